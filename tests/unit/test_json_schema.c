// SPDX-License-Identifier: GPL-2.0-only
/*
 * Constrained decoding by a JSON schema (json_fsm.h): schemas refused with
 * the place and the reason; documents taken and bytes refused where they
 * come; and random walks through the recognizer (a random byte among those
 * it takes, until the object closes) that must never reach a state with
 * no way on, and whose documents an independent validator, Python's
 * jsonschema (Debian's python3-jsonschema, draft 2020-12), must accept
 * as instances of the schema.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/json_fsm.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

static struct moem_json_schema *compile(const char *text)
{
	struct json_object *o = json_tokener_parse(text);
	struct moem_json_schema *s = NULL;

	if (!o)
		return NULL;
	moem_clear_error();
	if (moem_json_schema_compile(o, &s))
		s = NULL;
	json_object_put(o);
	return s;
}

struct refusal {
	const char *schema, *says;
};

TEST(schemas_refused_with_the_reason)
{
	static const struct refusal r[] = {
		{"{\"type\":\"string\"}", "(top): the top schema must be an object"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"contains\":"
		 "{}}}}",
		 "/properties/a: 'contains' is not supported"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"^(a|b$\"}}}",
		 "/properties/a: 'pattern': a group without its ')' at offset 5"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"(?<=x)a\"}}}",
		 "'pattern': a group other than (?:...)"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"^a|b$\"}}}",
		 "an anchor beside a '|' outside any group"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"(a)\\\\1\"}}}",
		 "an escape moem does not follow"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"a{1,1000}\"}}}",
		 "a repetition count above 100"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"a\xff\xff\"}}}",
		 "'pattern': not valid UTF-8 at offset 1"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"^(abcdefgh){40}$\"}}}",
		 "more than 256 states"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"^\\\\d{5}$\",\"maxLength\":3}}}",
		 "/properties/a: no string within 'minLength' and 'maxLength' matches 'pattern'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"^(ab)*$\",\"minLength\":3,\"maxLength\":3}}}",
		 "no string within 'minLength' and 'maxLength' matches 'pattern'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"a\",\"maxLength\":2000}}}",
		 "'maxLength' above 1024 beside 'pattern' is not supported"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
		 "\"[\\\\ud800-\\\\udfff]\"}}}",
		 "a class that matches no character"},
		{"{\"type\":\"object\",\"properties\":{\"a "
		 "b\":{\"type\":\"number\",\"multipleOf\":2}}}",
		 "/properties/a b: 'multipleOf' is not supported"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":3,"
		 "\"exclusiveMaximum\":3}}}",
		 "/properties/a: no number within the bounds"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":"
		 "10.2,\"maximum\":10.8}}}",
		 "no integer within the bounds"},
		/* between two numbers of 15 digits */
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":"
		 "0.12345678901234561,\"maximum\":0.12345678901234569}}}",
		 "no number within the bounds"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":"
		 "1e15}}}",
		 "no number within the bounds that moem writes (at most 15 digits"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\","
		 "\"exclusiveMinimum\":true}}}",
		 "'exclusiveMinimum' must be a number (the boolean form is draft 4's"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"maximum\":"
		 "\"3\"}}}",
		 "'maximum' must be a number"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minimum\":"
		 "1}}}",
		 "'minimum' does not apply"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"prefixItems\":"
		 "{}}}}",
		 "/properties/a: 'prefixItems' must be an array of 1 to 64 schemas"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"prefixItems\":[{},{\"not\":"
		 "{}}]}}}",
		 "/properties/a/prefixItems/1: 'not' is not supported"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"prefixItems\":"
		 "[{}],\"items\":false,\"minItems\":2}}}",
		 "'minItems' above the 1 items of 'prefixItems' ('items' false)"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}",
		 "'not' is not supported"},
		{"{\"type\":\"object\",\"required\":[\"b\"],\"properties\":{\"a\":{}}}",
		 "required property 'b' is not in 'properties'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"object\"},"
		 "{\"properties\":{}}]}}}",
		 "/properties/a: two alternatives can start with '{'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"integer\",\"string\","
		 "\"string\"]}}}",
		 "two alternatives can start with '\"'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/X\"}}}",
		 "/properties/a: $ref '#/$defs/X' names no schema"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"other.json#/a\"}}}",
		 "only '#', '#/$defs/NAME'"},
		{"{\"$defs\":{\"A\":{\"$ref\":\"#/$defs/B\"},\"B\":{\"$ref\":\"#/$defs/A\"}},"
		 "\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"}}}",
		 "a $ref cycle that never reaches a schema"},
		{"{\"$defs\":{\"A\":{\"anyOf\":[{\"$ref\":\"#/$defs/A\"},{\"type\":\"null\"}]}},"
		 "\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"}}}",
		 "refers back to its anyOf"},
		{"{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},\"required\":[\"x\"]"
		 "}",
		 "no instance nests at most 32 deep"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"minItems\":3,"
		 "\"maxItems\":2}}}",
		 "'minItems' above 'maxItems'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"minItems\":-1}}"
		 "}",
		 "'minItems' must be a non-negative integer"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1,2,1]}}}",
		 "a value twice"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[1]}}}",
		 "not of 'type'"},
		{"false", "the schema false"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"text\"}}}",
		 "unknown type"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minItems\":1}}"
		 "}",
		 "'minItems' does not apply"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[{},{}]}}}",
		 "'allOf' of more than one schema"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\",\"type\":\"object\"}}"
		 "}",
		 "'type' is not supported beside '$ref'"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":"
		 "true}}}",
		 "'uniqueItems' true is supported for arrays of enum values only"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{"
		 "\"enum\":[\"a\",1]},\"uniqueItems\":true}}}",
		 "for enums of strings, booleans and null only"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{"
		 "\"enum\":[\"a\",\"b\"]},\"uniqueItems\":true,\"minItems\":3}}}",
		 "'minItems' above the 2 values 'uniqueItems' allows"},
		{"{\"type\":\"object\",\"properties\":{\"a\":7}}",
		 "must be an object or a boolean"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"minLength\":1,\"items\":{}}}}",
		 "keywords of several types"},
	};
	struct moem_json_schema *s;

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		s = compile(r[i].schema);
		EXPECT_EQ(NULL, s) TH_LOG("taken: %s", r[i].schema);
		moem_json_schema_free(s);
		EXPECT_NE(NULL, strstr(moem_last_error(), r[i].says))
		TH_LOG("%s: says \"%s\", not \"%s\"", r[i].schema, moem_last_error(), r[i].says);
	}
}

TEST(bounds_refused)
{
	char big[8192];
	size_t n = 0;
	struct moem_json_schema *s;

	/* 65 properties: one more than an object may list */
	n += (size_t)snprintf(big + n, sizeof(big) - n, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i <= MOEM_JSON_SCHEMA_PROPS; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"p%d\":{}", i ? "," : "", i);
	snprintf(big + n, sizeof(big) - n, "}}");
	s = compile(big);
	EXPECT_EQ(NULL, s);
	EXPECT_NE(NULL, strstr(moem_last_error(), "more than 64 properties"));
	moem_json_schema_free(s);
	/* 65 enum values */
	n = (size_t)snprintf(big, sizeof(big),
			     "{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[");
	for (int i = 0; i <= MOEM_JSON_SCHEMA_ENUM; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s%d", i ? "," : "", i);
	snprintf(big + n, sizeof(big) - n, "]}}}");
	s = compile(big);
	EXPECT_EQ(NULL, s);
	EXPECT_NE(NULL, strstr(moem_last_error(), "1 to 64 values"));
	moem_json_schema_free(s);
}

static const char person[] =
	"{\"type\":\"object\",\"properties\":{"
	"\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":5},"
	"\"age\":{\"type\":\"integer\"},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"ab\"]},\"minItems\":1,"
	"\"maxItems\":2},"
	"\"opt\":{\"type\":[\"number\",\"null\"]},"
	"\"sub\":{\"$ref\":\"#/$defs/Sub\"}},"
	"\"required\":[\"name\",\"age\",\"tags\"],"
	"\"$defs\":{\"Sub\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":true}},"
	"\"required\":[\"v\"],\"additionalProperties\":false}}}";

static bool takes(const struct moem_json_schema *s, const char *doc, bool *done)
{
	struct moem_json_fsm f;
	bool ok;

	moem_json_fsm_init(&f, s);
	ok = !moem_json_fsm_feed(&f, doc, strlen(doc));
	*done = ok && moem_json_fsm_done(&f);
	return ok;
}

/* The first byte of doc that s refuses (strlen(doc) if none). */
static size_t refused_at(const struct moem_json_schema *s, const char *doc)
{
	struct moem_json_fsm f;
	size_t i;

	moem_json_fsm_init(&f, s);
	for (i = 0; doc[i]; i++)
		if (moem_json_fsm_feed(&f, doc + i, 1))
			break;
	return i;
}

TEST(documents_taken_and_refused)
{
	static const char *const good[] = {
		"{\"name\":\"Ann\",\"age\":31,\"tags\":[\"a\"]}",
		"{\"name\":\"Ann\",\"age\":-3,\"tags\":[\"ab\",\"b\"],\"opt\":null,\"sub\":{\"v\":"
		"true}}",
		"{ \"name\" : \"\xc3\xa9\\n\" , \"age\":0, \"tags\":[ \"b\" ], \"opt\": 2.5e3 }",
		"{\"name\":\"12345\",\"age\":7,\"tags\":[\"a\",\"ab\"],\"sub\":{\"v\":true}}",
	};
	/* each refused at the byte after the marker '|' */
	static const char *const bad[] = {
		"{\"|age\":1}",						    /* name comes first */
		"{\"name\":\"|\"",					    /* minLength 1 */
		"{\"name\":\"abcde|f\"",				    /* maxLength 5 */
		"{\"name\":\"A\",\"age\":1|.5",				    /* an integer */
		"{\"name\":\"A\",\"age\":1,\"tags\":[|]",		    /* minItems 1 */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\",\"b\"|,",	    /* maxItems 2 */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"|c\"",		    /* enum */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"ab|a\"",		    /* enum */
		"{\"name\":\"A\",\"age\":1|}",				    /* tags required */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"],\"sub\":{|}",   /* v required */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"],\"|extra\":1}", /* not listed */
		/* properties in the schema's order: none after sub */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"],\"sub\":{\"v\":true}|,\"opt\":1}",
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"],\"opt\":|\"1\"", /* number or null */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"],\"sub\":{\"v\":|false}", /* const */
		"{\"name\":\"A\",\"age\":1,\"tags\":[\"a\"]} |x", /* after the end */
	};
	struct moem_json_schema *s = compile(person);
	bool done;

	ASSERT_NE(NULL, s) TH_LOG("%s", moem_last_error());
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		EXPECT_TRUE(takes(s, good[i], &done)) TH_LOG("refused: %s", good[i]);
		EXPECT_TRUE(done) TH_LOG("not complete: %s", good[i]);
		EXPECT_EQ(strlen(good[i]), refused_at(s, good[i])) TH_LOG("%s", good[i]);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char doc[256];
		const char *bar = strchr(bad[i], '|');
		size_t at = (size_t)(bar - bad[i]);

		snprintf(doc, sizeof(doc), "%.*s%s", (int)at, bad[i], bar + 1);
		EXPECT_EQ(at, refused_at(s, doc))
		TH_LOG("%s", bad[i]);
	}
	moem_json_schema_free(s);
}

TEST(recursion_within_the_nesting_limit)
{
	static const char tree[] = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
				   "\"string\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":"
				   "\"#\"}}},\"required\":[\"name\"]}";
	struct moem_json_schema *s = compile(tree);
	struct moem_json_fsm f;
	bool done;
	int d;

	ASSERT_NE(NULL, s) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(takes(s,
			  "{\"name\":\"r\",\"kids\":[{\"name\":\"a\"},{\"name\":\"b\",\"kids\":"
			  "[]}]}",
			  &done));
	EXPECT_TRUE(done);
	/* each level is an object and an array: the deepest object at 31 open
	 * containers can still be written, then no "kids" key opens a 32nd's
	 * array that could hold one more */
	moem_json_fsm_init(&f, s);
	for (d = 0; d < MOEM_JSON_FSM_DEPTH / 2 - 1; d++)
		ASSERT_EQ(0, moem_json_fsm_feed(&f, "{\"name\":\"x\",\"kids\":[", 20))
	TH_LOG("%d", d);
	ASSERT_EQ(0, moem_json_fsm_feed(&f, "{\"name\":\"x\"", 11));
	EXPECT_EQ(31, f.depth);
	{
		struct moem_json_fsm g;

		moem_json_fsm_copy(&g, &f);
		/* an empty kids array fits (32 open), but no object in it would */
		EXPECT_EQ(0, moem_json_fsm_feed(&g, ",\"kids\":[", 9));
		EXPECT_EQ(-EINVAL, moem_json_fsm_feed(&g, "{", 1));
	}
	for (d = 0; d < MOEM_JSON_FSM_DEPTH / 2 - 1; d++)
		ASSERT_EQ(0, moem_json_fsm_feed(&f, "}]", 2));
	ASSERT_EQ(0, moem_json_fsm_feed(&f, "}", 1));
	EXPECT_TRUE(moem_json_fsm_done(&f));
	moem_json_schema_free(s);
}

/*
 * Numbers between bounds, against a reference that reads them as
 * validators do (strtod, compared with the bound's double): every number
 * of up to NB_LEN bytes (all JSON numbers without exponent of that
 * length, which includes every one the recognizer could take) is taken
 * exactly when the reference says it is valid, and no prefix the
 * recognizer takes is a dead end (the bounds' digits may lie deeper).
 */
#define NB_LEN 5

struct nbounds {
	const char *kw; /* the keywords, as JSON */
	bool integer;
	double lo, hi;
	bool xlo, xhi; /* exclusive */
};

static bool nb_valid(const struct nbounds *b, const char *t)
{
	double v = strtod(t, NULL);

	/* and the recognizer writes no -0 (json_fsm.c) */
	if ((b->integer && strchr(t, '.')) || (t[0] == '-' && v == 0))
		return false;
	return (b->xlo ? v > b->lo : v >= b->lo) && (b->xhi ? v < b->hi : v <= b->hi);
}

/* t (n bytes) is the start of a JSON number without exponent; *whole: it is one. */
static bool nb_prefix(const char *t, size_t n, bool *whole)
{
	size_t i = t[0] == '-';

	*whole = false;
	if (i == n)
		return true;
	if (t[i] == '0') {
		i++;
	} else if (t[i] >= '1' && t[i] <= '9') {
		while (i < n && t[i] >= '0' && t[i] <= '9')
			i++;
	} else {
		return false;
	}
	if (i < n && t[i] == '.') {
		if (++i == n)
			return true;
		while (i < n && t[i] >= '0' && t[i] <= '9')
			i++;
		if (i == n) {
			*whole = true;
			return true;
		}
		return false;
	}
	*whole = i == n;
	return i == n;
}

struct nb_walk {
	struct __test_metadata *meta;
	const struct moem_json_schema *s;
	const struct nbounds *b;
	char t[NB_LEN + 1];
	int checked, taken, errors;
};

/* w->t[0..n): f its state after them (NULL: the recognizer refused a prefix). */
static void nb_rec(struct nb_walk *w, size_t n, const struct moem_json_fsm *f)
{
	static const char alpha[] = "-0123456789.";
	struct __test_metadata *_metadata = w->meta; /* for TH_LOG */
	struct moem_json_fsm g;
	bool whole;

	w->t[n] = 0;
	if (!nb_prefix(w->t, n, &whole))
		return;
	if (n && whole) {
		bool got = false, want = nb_valid(w->b, w->t);

		if (f) {
			moem_json_fsm_copy(&g, f);
			got = !moem_json_fsm_feed(&g, "}", 1) && moem_json_fsm_done(&g);
		}
		w->checked++;
		w->taken += got;
		if (got != want && w->errors++ < 5)
			TH_LOG("%s: %s %s", w->b->kw, w->t, want ? "refused" : "taken");
	}
	if (f) {
		bool on = false;

		for (int c = 1; c < 256 && !on; c++) {
			char ch = (char)c;

			moem_json_fsm_copy(&g, f);
			on = !moem_json_fsm_feed(&g, &ch, 1);
		}
		if (!on && w->errors++ < 5)
			TH_LOG("%s: a dead end after %s", w->b->kw, w->t);
	}
	if (n == NB_LEN)
		return;
	for (const char *a = alpha; *a; a++) {
		w->t[n] = *a;
		w->t[n + 1] = 0;
		if (f) {
			moem_json_fsm_copy(&g, f);
			nb_rec(w, n + 1, moem_json_fsm_feed(&g, a, 1) ? NULL : &g);
		} else {
			nb_rec(w, n + 1, NULL);
		}
	}
}

TEST(numbers_within_their_bounds)
{
	static const struct nbounds cases[] = {
		{"\"type\":\"integer\",\"minimum\":1,\"maximum\":5", true, 1, 5, false, false},
		{"\"type\":\"integer\",\"exclusiveMinimum\":-20,\"exclusiveMaximum\":300", true,
		 -20, 300, true, true},
		{"\"type\":\"integer\",\"minimum\":-2.5", true, -2.5, 1e300, false, false},
		{"\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1", false, 0, 1, true,
		 false},
		{"\"type\":\"number\",\"minimum\":-273.15", false, -273.15, 1e300, false, false},
		{"\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.3", false, 0.1, 0.3, false,
		 false},
		{"\"type\":\"number\",\"exclusiveMinimum\":-0.05,\"exclusiveMaximum\":0.05", false,
		 -0.05, 0.05, true, true},
		{"\"type\":\"number\",\"maximum\":-12.5", false, -1e300, -12.5, false, false},
		{"\"type\":\"number\",\"minimum\":99.99,\"maximum\":100.01", false, 99.99, 100.01,
		 false, false},
		{"\"minimum\":0.001", false, 0.001, 1e300, false, false},
		/* below what NB_LEN bytes can write: every short number refused, and no dead end */
		{"\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e-7", false, 0, 1e-7,
		 true, false},
		{"\"type\":\"number\",\"minimum\":123456.5,\"maximum\":123456.75", false, 123456.5,
		 123456.75, false, false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct nb_walk w = {.meta = _metadata, .b = &cases[i]};
		struct moem_json_fsm f;
		char schema[256];
		struct moem_json_schema *s;

		snprintf(schema, sizeof(schema),
			 "{\"type\":\"object\",\"properties\":{\"x\":{%s}},\"required\":[\"x\"]}",
			 cases[i].kw);
		s = compile(schema);
		ASSERT_NE(NULL, s) TH_LOG("%s: %s", schema, moem_last_error());
		w.s = s;
		moem_json_fsm_init(&f, s);
		ASSERT_EQ(0, moem_json_fsm_feed(&f, "{\"x\":", 5));
		nb_rec(&w, 0, &f);
		EXPECT_EQ(0, w.errors) TH_LOG("%s", cases[i].kw);
		/* the reference is not vacuous: numbers on both sides of it */
		EXPECT_GT(w.checked, 1000);
		if (i < 10)
			EXPECT_GT(w.taken, 0) TH_LOG("%s", cases[i].kw);
		moem_json_schema_free(s);
	}
}

/* Schemas for the walks: what clients send (Pydantic's and zod's shapes among them). */
static const char *const walk_schemas[] = {
	person,
	/* Pydantic: $defs, Optional as anyOf with null, enums, lists of models, a dict */
	"{\"$defs\":{\"Color\":{\"enum\":[\"red\",\"green\",\"blue\"],\"title\":\"Color\","
	"\"type\":\"string\"},\"Item\":{\"properties\":{\"sku\":{\"title\":\"Sku\",\"type\":"
	"\"string\",\"maxLength\":12},\"qty\":{\"title\":\"Qty\",\"type\":\"integer\"},"
	"\"color\":{\"anyOf\":[{\"$ref\":\"#/$defs/Color\"},{\"type\":\"null\"}],\"default\":"
	"null}},\"required\":[\"sku\",\"qty\"],\"title\":\"Item\",\"type\":\"object\"}},"
	"\"properties\":{\"id\":{\"type\":\"integer\"},\"items\":{\"items\":{\"$ref\":"
	"\"#/$defs/Item\"},\"type\":\"array\",\"maxItems\":4},\"note\":{\"anyOf\":[{\"type\":"
	"\"string\"},{\"type\":\"null\"}],\"default\":null,\"format\":\"email\"},\"prices\":"
	"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}},\"paid\":{\"type\":"
	"\"boolean\"}},\"required\":[\"id\",\"items\",\"paid\"],\"title\":\"Order\",\"type\":"
	"\"object\",\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}",
	/* OpenAI strict style: every property required, no others; a recursive tree */
	"{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\",\"maxLength\":8},"
	"\"score\":{\"type\":[\"number\",\"null\"]},\"children\":{\"type\":\"array\",\"items\":"
	"{\"$ref\":\"#\"},\"maxItems\":2}},\"required\":[\"label\",\"score\",\"children\"],"
	"\"additionalProperties\":false}",
	/* anything goes under a key; const and mixed enums; an empty object; escapes in keys */
	"{\"type\":\"object\",\"properties\":{\"any\":{},\"k\":{\"const\":{\"a\":[1,\"x\"]}},"
	"\"mix\":{\"enum\":[1,10,\"1\",null,true,[2]]},\"none\":{\"type\":\"object\","
	"\"additionalProperties\":false},\"q\\\"/\\u00e9\":{\"type\":\"string\",\"minLength\":2}},"
	"\"required\":[\"any\",\"mix\",\"q\\\"/\\u00e9\"]}",
	/* recursion through an alias ($ref to a $ref), Pydantic v1's allOf of one $ref */
	"{\"$defs\":{\"A\":{\"$ref\":\"#/$defs/B\"},\"B\":{\"type\":\"object\",\"properties\":"
	"{\"x\":{\"$ref\":\"#/$defs/A\"},\"v\":{\"type\":\"integer\"}}}},\"type\":\"object\","
	"\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"},\"b\":{\"allOf\":[{\"$ref\":"
	"\"#/$defs/B\"}],\"description\":\"d\"}},\"required\":[\"a\"]}",
	/* Pydantic's discriminated union: objects told apart by their first property */
	"{\"$defs\":{\"Cat\":{\"properties\":{\"pet_type\":{\"const\":\"cat\",\"type\":"
	"\"string\"},\"meows\":{\"type\":\"integer\"}},\"required\":[\"pet_type\",\"meows\"],"
	"\"type\":\"object\"},\"Dog\":{\"properties\":{\"pet_type\":{\"const\":\"dog\",\"type\":"
	"\"string\"},\"barks\":{\"type\":\"number\"}},\"required\":[\"pet_type\",\"barks\"],"
	"\"type\":\"object\"},\"Lizard\":{\"properties\":{\"pet_type\":{\"enum\":[\"reptile\"]},"
	"\"scales\":{\"type\":\"boolean\"}},\"required\":[\"pet_type\"],\"type\":\"object\"}},"
	"\"properties\":{\"pet\":{\"discriminator\":{\"mapping\":{\"cat\":\"#/$defs/Cat\","
	"\"dog\":\"#/$defs/Dog\",\"reptile\":\"#/$defs/Lizard\"},\"propertyName\":\"pet_type\"},"
	"\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":\"#/$defs/Dog\"},{\"$ref\":"
	"\"#/$defs/Lizard\"},{\"type\":\"null\"}]},\"n\":{\"type\":\"integer\"}},\"required\":"
	"[\"pet\",\"n\"],\"type\":\"object\"}",
	/* oneOf of different types, an integer-or-number list, nullable arrays */
	"{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{\"type\":\"integer\"},{\"type\":"
	"\"string\",\"maxLength\":3},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},"
	"\"minItems\":2,\"maxItems\":3}]},\"w\":{\"type\":[\"array\",\"null\"],\"items\":"
	"{\"type\":[\"integer\",\"number\"]}}},\"required\":[\"v\",\"w\"]}",
	/* Field(pattern=...): anchored and not, classes, groups, repetitions, Unicode, escapes */
	"{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":"
	"\"^\\\\d{5}(-\\\\d{4})?$\"},\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$"
	"\"},"
	"\"file\":{\"type\":\"string\",\"pattern\":\"^(foo|bar)+\\\\.txt$\"},\"mail\":{\"type\":"
	"\"string\",\"pattern\":\"^[^@\\\\s]+@[a-z]+\\\\.(com|org)$\"},\"has\":{\"type\":"
	"\"string\","
	"\"pattern\":\"x\\\\d\"},\"greek\":{\"type\":\"string\",\"pattern\":\"^\u00e9[\u03b1-"
	"\u03c9]?"
	".\\\\u00e9$\"},\"rep\":{\"type\":\"string\",\"pattern\":\"^(?:ab){2,3}c*?$\"},\"tail\":{"
	"\"type\":\"string\",\"pattern\":\"[^\\\\w]z$\"},\"words\":{\"type\":\"string\","
	"\"pattern\":"
	"\"^\\\\S+\\\\s\\\\S+$\"},\"esc\":{\"type\":[\"string\",\"null\"],\"pattern\":\"^["
	"\\\\\\\\\\\"/]"
	"{2}\\\\n?\\\\x41\\\\W\\\\D$\"},\"list\":{\"type\":\"array\",\"items\":{\"type\":"
	"\"string\","
	"\"pattern\":\"^[a-c]+$\"},\"maxItems\":3}},\"required\":[\"zip\",\"code\",\"file\","
	"\"mail\","
	"\"has\",\"greek\",\"rep\",\"tail\",\"words\",\"esc\",\"list\"]}",
	/* set[Color] and set[Literal[...]]: uniqueItems over enums, also recursive and nested */
	"{\"$defs\":{\"Color\":{\"enum\":[\"red\",\"green\",\"blue\",\"cyan\"],\"type\":"
	"\"string\"},\"Node\":{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\","
	"\"items\":{\"enum\":[\"x\",\"y\",null,true]},\"uniqueItems\":true},\"kids\":{\"type\":"
	"\"array\",\"items\":{\"$ref\":\"#/$defs/Node\"},\"maxItems\":2}}}},\"type\":\"object\","
	"\"properties\":{\"colors\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Color\"},"
	"\"uniqueItems\":true,\"minItems\":2},\"all\":{\"type\":\"array\",\"items\":{\"enum\":"
	"[\"a\",\"ab\",\"abc\"]},\"uniqueItems\":true,\"minItems\":3},\"many\":{\"type\":"
	"\"array\",\"items\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Color\"},"
	"\"uniqueItems\":true},\"maxItems\":3},\"node\":{\"$ref\":\"#/$defs/Node\"}},\"required\":"
	"[\"colors\",\"all\",\"many\",\"node\"]}",
	/* constr(pattern=, min_length=, max_length=): a match within the lengths */
	"{\"type\":\"object\",\"properties\":{\"abc\":{\"type\":\"string\",\"pattern\":"
	"\"^[a-c]+$\",\"minLength\":3,\"maxLength\":5},\"x\":{\"type\":\"string\",\"pattern\":"
	"\"x\",\"maxLength\":4},\"even\":{\"type\":\"string\",\"pattern\":\"^(ab)*$\","
	"\"minLength\":3,\"maxLength\":7},\"tail\":{\"type\":\"string\",\"pattern\":"
	"\"\\\\d$\",\"minLength\":12},\"any\":{\"type\":\"string\",\"pattern\":\"^.*$\","
	"\"maxLength\":2}},\"required\":[\"abc\",\"x\",\"even\",\"tail\",\"any\"]}",
	/* Pydantic's tuples: tuple[int, str] (items false), tuple[str, float, ...] with more
	 * items of one schema, a tuple that may stop early, nested and recursive */
	"{\"$defs\":{\"Pair\":{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\","
	"\"maxLength\":4},{\"anyOf\":[{\"$ref\":\"#/$defs/Pair\"},{\"type\":\"null\"}]}],"
	"\"minItems\":2,\"maxItems\":2}},\"properties\":{\"point\":{\"maxItems\":2,\"minItems\":"
	"2,\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"type\":\"array\"},"
	"\"row\":{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"maxLength\":3},"
	"{\"type\":\"number\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":5},"
	"\"short\":{\"type\":\"array\",\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":"
	"3}],\"items\":false},\"pair\":{\"$ref\":\"#/$defs/Pair\"}},\"required\":[\"point\","
	"\"row\",\"short\",\"pair\"],\"type\":\"object\"}",
	/* Pydantic's Field(ge=, le=, gt=, lt=): bounded numbers, also in lists and unions */
	"{\"properties\":{\"rating\":{\"maximum\":5,\"minimum\":1,\"title\":\"Rating\","
	"\"type\":\"integer\"},\"score\":{\"exclusiveMinimum\":0.0,\"maximum\":1.0,\"type\":"
	"\"number\"},\"temp\":{\"anyOf\":[{\"minimum\":-273.15,\"type\":\"number\"},{\"type\":"
	"\"null\"}]},\"tiny\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":"
	"1e-9},\"neg\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"exclusiveMaximum\":"
	"-1000,\"minimum\":-1000000},\"maxItems\":3},\"either\":{\"anyOf\":[{\"type\":"
	"\"integer\",\"minimum\":0},{\"type\":\"number\",\"maximum\":-0.5}]},\"big\":{\"type\":"
	"\"number\",\"minimum\":12345678901.25}},\"required\":[\"rating\",\"score\",\"tiny\","
	"\"neg\",\"either\",\"big\"],\"title\":\"Review\",\"type\":\"object\"}",
};

/* Bytes a walk prefers once it is long, so that it ends: closers, then short values. */
static const char finish[] = "\"]},:0ntf";

/*
 * The shortest bytes from f to a state that takes the quote ending a
 * string, breadth first over printable ASCII but the backslash, and
 * UTF-8 bytes (for a
 * string with a pattern, which a random walk may take long to satisfy).
 * Their count, 0 if none within the search's bounds.
 */
#define BFS_NODES 4096
static size_t bfs_quote(const struct moem_json_fsm *f, char *path, size_t cap)
{
	static struct {
		struct moem_json_fsm f;
		int parent;
		char b;
	} q[BFS_NODES];
	static int slot[2 * BFS_NODES]; /* open addressing by hash: node + 1, 0 empty */
	int head = 0, tail = 1;

	memset(slot, 0, sizeof(slot));
	moem_json_fsm_copy(&q[0].f, f);
	q[0].parent = -1;
	while (head < tail) {
		struct moem_json_fsm g;
		char quote = '"';

		moem_json_fsm_copy(&g, &q[head].f);
		if (!moem_json_fsm_feed(&g, &quote, 1)) {
			size_t n = 0;

			for (int i = head; q[i].parent >= 0; i = q[i].parent)
				n++;
			if (n > cap)
				return 0;
			for (int i = head, k = (int)n - 1; q[i].parent >= 0; i = q[i].parent)
				path[k--] = q[i].b;
			return n;
		}
		for (int c = 0x20; c < 0xf5 && tail < BFS_NODES; c++) {
			char ch = (char)c;
			bool seen = false;
			uint64_t h, k;

			/* no escape: a quote after one would not end the string */
			if (c == '"' || c == '\\' || (c > 0x7e && c < 0x80))
				continue;
			moem_json_fsm_copy(&g, &q[head].f);
			if (moem_json_fsm_feed(&g, &ch, 1))
				continue;
			/* the characters so far, beyond what the test's bounds can tell apart */
			g.len = g.len < 32 ? g.len : 32;
			h = 1469598103934665603ull;
			for (size_t j = 0; j < offsetof(struct moem_json_fsm, stack); j++)
				h = (h ^ ((const unsigned char *)&g)[j]) * 1099511628211ull;
			for (k = h % (2 * BFS_NODES); slot[k] && !seen;
			     k = (k + 1) % (2 * BFS_NODES))
				seen = !memcmp(&q[slot[k] - 1].f, &g,
					       offsetof(struct moem_json_fsm, stack));
			if (seen)
				continue;
			slot[k] = tail + 1;
			moem_json_fsm_copy(&q[tail].f, &g);
			q[tail].parent = head;
			q[tail].b = ch;
			tail++;
		}
		head++;
	}
	return 0;
}

/* One random document of s into out (NUL-ended); false at a state with no way on. */
static bool walk(const struct moem_json_schema *s, struct moem_rng *rng, char *out, size_t cap)
{
	struct moem_json_fsm f, g;
	bool in_str = false, esc = false;
	int hex = 0; /* \\u digits to come */
	size_t n = 0, npath = 0, at = 0;
	char path[64];

	moem_json_fsm_init(&f, s);
	while (!moem_json_fsm_done(&f)) {
		unsigned char ok[256];
		int nok = 0, pick = -1;

		if (n + 1 >= cap)
			return false;
		/* long, and in a string that cannot end yet: the shortest way to its end */
		if (n > 160 && in_str && !esc && !hex && at == npath) {
			char q = '"';

			moem_json_fsm_copy(&g, &f);
			if (moem_json_fsm_feed(&g, &q, 1)) {
				npath = bfs_quote(&f, path, sizeof(path));
				at = 0;
			}
		}
		for (int b = 1; b < 256; b++) {
			char c = (char)b;

			moem_json_fsm_copy(&g, &f);
			if (!moem_json_fsm_feed(&g, &c, 1))
				ok[nok++] = (unsigned char)b;
		}
		if (!nok) {
			out[n] = 0;
			return false; /* a dead end */
		}
		if (at < npath)
			pick = (unsigned char)path[at++];
		if (n > 160 && pick < 0) {
			for (const char *p = finish; *p && pick < 0; p++)
				if (memchr(ok, *p, (size_t)nok))
					pick = (unsigned char)*p;
		}
		if (pick < 0) {
			pick = ok[moem_rng_u64(rng) % (uint64_t)nok];
			/* fewer blanks, which would otherwise fill the walk */
			if ((pick == ' ' || pick == '\n' || pick == '\t' || pick == '\r') &&
			    moem_rng_u64(rng) % 8)
				pick = ok[moem_rng_u64(rng) % (uint64_t)nok];
		}
		out[n] = (char)pick;
		out[n + 1] = 0;
		if (moem_json_fsm_feed(&f, out + n, 1))
			return false;
		n++;
		if (hex) {
			hex--;
		} else if (in_str && !esc) {
			in_str = pick != '"';
			esc = pick == '\\';
		} else if (in_str) {
			esc = false;
			hex = pick == 'u' ? 4 : 0;
		} else {
			in_str = pick == '"';
		}
	}
	out[n] = 0;
	return true;
}

static const char validate_py[] =
	"import json, sys\n"
	"from jsonschema import Draft202012Validator as V\n"
	"d = sys.argv[1]\n"
	"bad = 0\n"
	"for i in range(int(sys.argv[2])):\n"
	"    schema = json.load(open('%s/schema%d.json' % (d, i)))\n"
	"    V.check_schema(schema)\n"
	"    v = V(schema)\n"
	"    docs = json.load(open('%s/docs%d.json' % (d, i), encoding='utf-8'))\n"
	"    for doc in docs:\n"
	"        for e in v.iter_errors(doc):\n"
	"            bad += 1\n"
	"            if bad < 5: print('schema %d: %s: %s' % (i, json.dumps(doc), e.message))\n"
	"    print('schema %d: %d documents checked' % (i, len(docs)))\n"
	"sys.exit(1 if bad else 0)\n";

TEST(walks_are_instances_of_the_schema)
{
	const int n_schemas = (int)(sizeof(walk_schemas) / sizeof(walk_schemas[0]));
	const int per = 150;
	char dir[] = "/tmp/moem-json-schema-XXXXXX", path[128], cmd[512];
	static char doc[8192];
	struct moem_rng rng;
	FILE *py;
	int ret;

	ASSERT_NE(NULL, mkdtemp(dir));
	moem_rng_seed(&rng, 20261129, 7);
	for (int i = 0; i < n_schemas; i++) {
		struct moem_json_schema *s = compile(walk_schemas[i]);
		int distinct = 0;
		FILE *out;
		char *prev = NULL;

		ASSERT_NE(NULL, s) TH_LOG("schema %d: %s", i, moem_last_error());
		snprintf(path, sizeof(path), "%s/schema%d.json", dir, i);
		out = fopen(path, "w");
		ASSERT_NE(NULL, out);
		fputs(walk_schemas[i], out);
		fclose(out);
		snprintf(path, sizeof(path), "%s/docs%d.json", dir, i);
		out = fopen(path, "w");
		ASSERT_NE(NULL, out);
		fputc('[', out);
		for (int w = 0; w < per; w++) {
			struct json_tokener *tok = json_tokener_new();
			struct json_object *o;

			ASSERT_TRUE(walk(s, &rng, doc, sizeof(doc)))
			TH_LOG("schema %d walk %d: no way on after: %s", i, w, doc);
			/* one strict JSON object, as json-c reads it */
			json_tokener_set_flags(tok,
					       JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
			o = json_tokener_parse_ex(tok, doc, (int)strlen(doc));
			EXPECT_TRUE(o && json_object_is_type(o, json_type_object) &&
				    json_tokener_get_error(tok) == json_tokener_success)
			TH_LOG("schema %d: json-c refuses %s", i, doc);
			json_object_put(o);
			json_tokener_free(tok);
			distinct += !prev || strcmp(prev, doc);
			free(prev);
			prev = strdup(doc);
			fprintf(out, "%s%s\n", w ? "," : "", doc);
		}
		free(prev);
		fputs("]\n", out);
		fclose(out);
		/* the walks differ: the test is not one document over and over */
		EXPECT_GT(distinct, per / 2) TH_LOG("schema %d: %d distinct", i, distinct);
		moem_json_schema_free(s);
	}
	snprintf(path, sizeof(path), "%s/validate.py", dir);
	py = fopen(path, "w");
	ASSERT_NE(NULL, py);
	fputs(validate_py, py);
	fclose(py);
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 -c 'import jsonschema' 2>/dev/null || "
		 "{ echo 'python3-jsonschema is missing: run scripts/deps.sh'; exit 2; }; "
		 "/usr/bin/python3 %s %s %d",
		 path, dir, n_schemas);
	ret = system(cmd);
	EXPECT_EQ(0, ret) TH_LOG("Python's jsonschema refused documents (above)");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	EXPECT_EQ(0, system(cmd));
}

/*
 * A tool call as Qwen's and Hermes' templates ask for it: the object
 * between "<tool_call>\n" and "\n</tool_call>", its "name" one of the
 * tools' (a union), its "arguments" that tool's parameters.
 */
TEST(tool_call_between_its_tags)
{
	static const char calls[] =
		"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
		"\"weather\"},\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":"
		"{\"type\":\"string\"}},\"required\":[\"city\"]}},\"required\":[\"name\","
		"\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
		"\"time\"},\"arguments\":{\"type\":\"object\",\"properties\":{\"zone\":"
		"{\"enum\":[\"UTC\",\"CET\"]}}}},\"required\":[\"name\",\"arguments\"]}]}";
	struct moem_json_schema *s = compile(calls);
	struct moem_json_fsm f;
	bool done;

	ASSERT_NE(NULL, s) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_json_schema_wrap(s, "<tool_call>\n", "\n</tool_call>"));
	EXPECT_EQ(-EINVAL, moem_json_schema_wrap(s, "a", "b"));
	EXPECT_TRUE(takes(s,
			  "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": "
			  "\"Paris\"}}\n</tool_call>",
			  &done));
	EXPECT_TRUE(done);
	EXPECT_TRUE(
		takes(s, "<tool_call>\n{\"name\":\"time\",\"arguments\":{}}\n</tool_call>", &done));
	EXPECT_TRUE(done);
	/* the object alone is not the whole answer */
	EXPECT_TRUE(takes(s, "<tool_call>\n{\"name\":\"time\",\"arguments\":{}}", &done));
	EXPECT_FALSE(done);
	EXPECT_EQ(11u, refused_at(s, "<tool_call>{"));
	EXPECT_EQ(21u, refused_at(s, "<tool_call>\n{\"name\":\"other\""));
	EXPECT_EQ(14u, refused_at(s, "<tool_call>\n{\"arguments\":{}}"));
	/* the name decides the arguments: weather needs a city, time takes no city */
	EXPECT_EQ(43u, refused_at(s, "<tool_call>\n{\"name\":\"weather\",\"arguments\":{}}"));
	EXPECT_EQ(41u, refused_at(s, "<tool_call>\n{\"name\":\"time\",\"arguments\":{\"city\""));
	EXPECT_EQ(42u, refused_at(s, "<tool_call>\n{\"name\":\"time\",\"arguments\":{}} "));
	moem_json_fsm_init(&f, s);
	EXPECT_EQ(0, moem_json_fsm_feed(&f, "<tool_call>\n{\"name\":\"time\",\"arguments\":{}}\n",
					43));
	EXPECT_FALSE(moem_json_fsm_done(&f));
	moem_json_schema_free(s);
}

/* The API's tools array to the schema of a call: names, parameters with their own $defs. */
TEST(calls_of_the_tools)
{
	static const char tools[] =
		"[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
		"{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":"
		"\"object\",\"$defs\":{\"P\":{\"type\":\"integer\"}},\"properties\":{\"p\":{\"$"
		"ref\":"
		"\"#/$defs/P\"}},\"required\":[\"p\"]}}}]";
	static const char bad[] =
		"[{\"type\":\"function\",\"function\":{\"name\":\"f\","
		"\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
		"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"(y\"}}}}}]";
	struct json_object *t = json_tokener_parse(tools), *b = json_tokener_parse(bad);
	struct moem_json_schema *s;
	bool done;

	ASSERT_NE(NULL, t);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, moem_json_schema_compile_calls(t, NULL, &s)) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(takes(s, "{\"name\":\"f\",\"arguments\":{\"any\":[1]}}", &done));
	EXPECT_TRUE(done);
	EXPECT_TRUE(takes(s, "{\"name\": \"g\", \"arguments\": {\"p\": -4}}", &done));
	EXPECT_TRUE(done);
	EXPECT_EQ(33u, refused_at(s, "{\"name\": \"g\", \"arguments\": {\"p\": \"x\"}}"));
	EXPECT_EQ(25u, refused_at(s, "{\"name\":\"g\",\"arguments\":{}}"));
	moem_json_schema_free(s);
	/* only g */
	ASSERT_EQ(0, moem_json_schema_compile_calls(t, "g", &s));
	EXPECT_EQ(9u, refused_at(s, "{\"name\":\"f\""));
	moem_json_schema_free(s);
	EXPECT_EQ(-ENOENT, moem_json_schema_compile_calls(t, "h", &s));
	EXPECT_NE(NULL, strstr(moem_last_error(), "no tool named 'h'"));
	EXPECT_EQ(-EINVAL, moem_json_schema_compile_calls(b, NULL, &s));
	EXPECT_NE(NULL,
		  strstr(moem_last_error(), "/tools/0/function/parameters/properties/x: 'pattern'"))
	TH_LOG("%s", moem_last_error());
	json_object_put(t);
	json_object_put(b);
}

/*
 * The vocabulary pass's fast path (text_chars against text_room) takes
 * exactly the tokens that feeding takes, wherever it applies: random
 * tokens (quotes, escapes, cut UTF-8 among them) at every state of walks
 * through schemas with and without maxLength.
 */
TEST(text_fast_path_agrees_with_feeding)
{
	static const char alpha[] = "ab \"\\nu0\x01\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80{}:,";
	static const char *const schemas[] = {
		"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":"
		"7},\"t\":{\"type\":\"string\"},\"m\":{\"type\":\"object\","
		"\"additionalProperties\":"
		"{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}}},\"required\":[\"s\",\"t\","
		"\"m\"]}",
		"{\"type\":\"object\"}",
	};
	struct moem_rng rng;
	char tok[128][8];
	size_t tl[128];
	unsigned int fast = 0;

	/* and tokens that close a string and open another (not plain text) */
	static const char *const fixed[] = {"\":{\"", "a\",\"b", "\\\"x\":\"", "\"}"};

	moem_rng_seed(&rng, 20261129, 3);
	for (int t = 0; t < 128; t++) {
		tl[t] = 1 + moem_rng_u64(&rng) % 6;
		for (size_t i = 0; i < tl[t]; i++)
			tok[t][i] = alpha[moem_rng_u64(&rng) % (sizeof(alpha) - 1)];
	}
	for (size_t t = 0; t < MOEM_ARRAY_SIZE(fixed); t++) {
		tl[t] = strlen(fixed[t]);
		memcpy(tok[t], fixed[t], tl[t]);
	}
	for (size_t k = 0; k < MOEM_ARRAY_SIZE(schemas); k++) {
		struct moem_json_schema *s = compile(schemas[k]);
		static char doc[8192];

		ASSERT_NE(NULL, s);
		for (int w = 0; w < 40; w++) {
			struct moem_json_fsm f, g;

			ASSERT_TRUE(walk(s, &rng, doc, sizeof(doc)));
			/* every prefix of the walk's document is a state to try */
			moem_json_fsm_init(&f, s);
			for (size_t at = 0; doc[at]; at++) {
				int64_t room = moem_json_fsm_text_room(&f);

				for (int t = 0; room >= 0 && t < 128; t++) {
					int64_t c = moem_json_fsm_text_chars(tok[t], tl[t]);
					bool fed;

					if (c < 0)
						continue;
					moem_json_fsm_copy(&g, &f);
					fed = !moem_json_fsm_feed(&g, tok[t], tl[t]);
					ASSERT_EQ(fed, c <= room)
					TH_LOG("schema %zu, after %.*s: token %.*s", k, (int)at,
					       doc, (int)tl[t], tok[t]);
					fast++;
				}
				ASSERT_EQ(0, moem_json_fsm_feed(&f, doc + at, 1));
			}
		}
		moem_json_schema_free(s);
	}
	EXPECT_GT(fast, 10000u);
}

TEST(any_object_is_the_schema_of_an_object)
{
	struct moem_json_schema *s = compile("{\"type\":\"object\"}");
	bool done;

	ASSERT_NE(NULL, s);
	EXPECT_TRUE(takes(s, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", &done));
	EXPECT_TRUE(done);
	EXPECT_EQ(0u, refused_at(s, "[1]"));
	moem_json_schema_free(s);
}

TEST_HARNESS_MAIN
