// SPDX-License-Identifier: GPL-2.0-only
/*
 * Parsing and checking OpenAI request bodies (openai.h). Every field is
 * looked up in one table that says which endpoint takes it; anything
 * else is refused by name. null is taken as "not given", as OpenAI does.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/openai.h>
#include <moem/util.h>

int moem_oai_errorf(struct moem_oai_error *e, int status, const char *type, const char *param,
		    const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	snprintf(e->type, sizeof(e->type), "%s", type);
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	e->code[0] = 0;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

#define BAD(e, param, ...) moem_oai_errorf(e, 400, "invalid_request_error", param, __VA_ARGS__)

bool moem_oai_utf8_ok(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		uint32_t cp;
		size_t n;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n >= len - i)
			return false; /* cut short */
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

/* A string field: UTF-8 without NULs, copied. */
static int get_string(struct json_object *v, const char *param, char **out,
		      struct moem_oai_error *e)
{
	const char *s;
	size_t len;

	if (!json_object_is_type(v, json_type_string))
		return BAD(e, param, "'%s' must be a string", param);
	s = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	if (!moem_oai_utf8_ok(s, len))
		return BAD(e, param, "'%s' is not valid UTF-8 (or contains a NUL character)",
			   param);
	*out = strndup(s, len);
	return *out ? 0 : -ENOMEM;
}

static int get_number(struct json_object *v, const char *param, double lo, double hi, bool lo_open,
		      double *out, struct moem_oai_error *e)
{
	double d;

	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return BAD(e, param, "'%s' must be a number", param);
	d = json_object_get_double(v);
	/* the sampler keeps a float: open at lo as a float too (1e-300 is 0) */
	if (!isfinite(d) || d < lo || d > hi || (lo_open && (float)d <= (float)lo))
		return BAD(e, param, "'%s' is %g: it must be %s %g and <= %g", param, d,
			   lo_open ? ">" : ">=", lo, hi);
	*out = d;
	return 0;
}

/* An integer: an int, or a double with no fraction (JavaScript sends 5.0 as 5). */
static int get_int(struct json_object *v, const char *param, int64_t lo, int64_t hi, int64_t *out,
		   struct moem_oai_error *e)
{
	int64_t x;

	if (json_object_is_type(v, json_type_double)) {
		double d = json_object_get_double(v);

		if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18)
			return BAD(e, param, "'%s' must be an integer", param);
		x = (int64_t)d;
	} else if (json_object_is_type(v, json_type_int)) {
		/* json-c keeps big positive numbers as uint64 (and clamps
		 * those past it): either is out of range here. */
		if (json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) > INT64_MAX)
			return BAD(e, param, "'%s' is out of range", param);
		x = json_object_get_int64(v);
	} else {
		return BAD(e, param, "'%s' must be an integer", param);
	}
	if (x < lo || x > hi)
		return BAD(e, param, "'%s' is %lld: it must be %lld..%lld", param, (long long)x,
			   (long long)lo, (long long)hi);
	*out = x;
	return 0;
}

static int get_bool(struct json_object *v, const char *param, bool *out, struct moem_oai_error *e)
{
	if (!json_object_is_type(v, json_type_boolean))
		return BAD(e, param, "'%s' must be true or false", param);
	*out = json_object_get_boolean(v);
	return 0;
}

/* prompt: "text", ["text"], [ids], [[ids]]: exactly one prompt. */
static int get_prompt(struct json_object *v, struct moem_oai_request *rq, struct moem_oai_error *e)
{
	struct json_object *in;
	size_t n;

	if (json_object_is_type(v, json_type_string)) {
		int ret = get_string(v, "prompt", &rq->prompt, e);

		if (!ret && !rq->prompt[0])
			ret = BAD(e, "prompt", "'prompt' is empty");
		return ret;
	}
	if (!json_object_is_type(v, json_type_array))
		return BAD(e, "prompt", "'prompt' must be a string or an array of token ids");
	n = json_object_array_length(v);
	if (n == 0)
		return BAD(e, "prompt", "'prompt' is empty");
	in = json_object_array_get_idx(v, 0);
	if (json_object_is_type(in, json_type_string) || json_object_is_type(in, json_type_array)) {
		struct json_object *in0;

		if (n != 1)
			return BAD(e, "prompt",
				   "'prompt' has %zu prompts: this server takes one per request",
				   n);
		/* one level: ["text"] or [[ids]], not [[[ids]]] or [["text"]] */
		in0 = json_object_is_type(in, json_type_array) ? json_object_array_get_idx(in, 0)
							       : NULL;
		if (json_object_is_type(in0, json_type_string) ||
		    json_object_is_type(in0, json_type_array))
			return BAD(e, "prompt",
				   "'prompt' must be a string, an array of token ids, or an array "
				   "of one of those");
		return get_prompt(in, rq, e);
	}
	if (n > (1u << 24))
		return BAD(e, "prompt", "'prompt' has %zu token ids: too many", n);
	rq->prompt_ids = calloc(n, sizeof(*rq->prompt_ids));
	if (!rq->prompt_ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int64_t id;
		char param[32];
		int ret;

		snprintf(param, sizeof(param), "prompt[%zu]", i);
		ret = get_int(json_object_array_get_idx(v, i), param, 0, INT32_MAX, &id, e);
		if (ret)
			return ret;
		rq->prompt_ids[i] = (int32_t)id;
	}
	rq->n_prompt_ids = (uint32_t)n;
	return 0;
}

/* content: a string, or an array of {"type":"text","text":...} parts (joined). */
static int get_content(struct json_object *v, const char *param, char **out,
		       struct moem_oai_error *e)
{
	size_t n, total = 0;
	char p[160], *s;

	if (json_object_is_type(v, json_type_string))
		return get_string(v, param, out, e);
	if (!json_object_is_type(v, json_type_array))
		return BAD(e, param, "'%s' must be a string or an array of text parts", param);
	n = json_object_array_length(v);
	for (size_t i = 0; i < n; i++) {
		struct json_object *part = json_object_array_get_idx(v, i), *t, *x;

		snprintf(p, sizeof(p), "%s[%zu]", param, i);
		if (!json_object_is_type(part, json_type_object))
			return BAD(e, p, "'%s' must be an object", p);
		json_object_object_foreach(part, key, val)
		{
			(void)val;
			if (strcmp(key, "type") && strcmp(key, "text")) {
				snprintf(p, sizeof(p), "%s[%zu].%s", param, i, key);
				return BAD(e, p, "Unrecognized request argument supplied: %s", p);
			}
		}
		if (!json_object_object_get_ex(part, "type", &t) ||
		    !json_object_is_type(t, json_type_string) ||
		    strcmp(json_object_get_string(t), "text")) {
			snprintf(p, sizeof(p), "%s[%zu].type", param, i);
			return BAD(e, p, "'%s' must be \"text\": this model takes text only", p);
		}
		snprintf(p, sizeof(p), "%s[%zu].text", param, i);
		if (!json_object_object_get_ex(part, "text", &x) ||
		    !json_object_is_type(x, json_type_string))
			return BAD(e, p, "'%s' must be a string", p);
		if (!moem_oai_utf8_ok(json_object_get_string(x),
				      (size_t)json_object_get_string_len(x)))
			return BAD(e, p, "'%s' is not valid UTF-8 (or contains a NUL character)",
				   p);
		total += (size_t)json_object_get_string_len(x);
	}
	s = malloc(total + 1);
	if (!s)
		return -ENOMEM;
	total = 0;
	for (size_t i = 0; i < n; i++) {
		struct json_object *x;

		json_object_object_get_ex(json_object_array_get_idx(v, i), "text", &x);
		memcpy(s + total, json_object_get_string(x), (size_t)json_object_get_string_len(x));
		total += (size_t)json_object_get_string_len(x);
	}
	s[total] = 0;
	*out = s;
	return 0;
}

/* A function's name, as OpenAI allows it: 1..64 of [A-Za-z0-9_-]. */
static int get_fn_name(struct json_object *v, const char *param, struct moem_oai_error *e)
{
	const char *s;
	size_t n;

	if (!json_object_is_type(v, json_type_string))
		return BAD(e, param, "'%s' must be a string", param);
	s = json_object_get_string(v);
	n = (size_t)json_object_get_string_len(v);
	if (!n || n > MOEM_OAI_TOOL_NAME ||
	    strspn(s, "abcdefghijklmnopqrstuvwxyz"
		      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		      "0123456789_-") != n)
		return BAD(e, param, "'%s' must be 1 to %d letters, digits, '_' or '-'", param,
			   MOEM_OAI_TOOL_NAME);
	return 0;
}

/* Every key of o is one of keys (NULL-terminated); else the first other is refused. */
static int only_keys(struct json_object *o, const char *const *keys, const char *param,
		     struct moem_oai_error *e)
{
	json_object_object_foreach(o, key, val)
	{
		size_t k;
		char p[160];

		(void)val;
		for (k = 0; keys[k] && strcmp(key, keys[k]); k++)
			;
		if (!keys[k]) {
			snprintf(p, sizeof(p), "%s.%s", param, key);
			return BAD(e, p, "Unrecognized request argument supplied: %s", p);
		}
	}
	return 0;
}

static char *to_json(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								  JSON_C_TO_STRING_NOSLASHESCAPE);

	return s ? strdup(s) : NULL;
}

/*
 * An assistant message's tool_calls: [{"id","type":"function","function":
 * {"name","arguments": a JSON object as a string}}]. Kept as JSON for the
 * template with each "arguments" parsed to the object (vLLM does the
 * same: Hugging Face's templates print it with tojson).
 */
static int get_msg_calls(struct json_object *v, const char *param, char **out,
			 struct moem_oai_error *e)
{
	static const char *const call_keys[] = {"id", "type", "function", NULL};
	static const char *const fn_keys[] = {"name", "arguments", NULL};
	struct json_object *a;
	size_t n;
	char p[160];
	int ret = 0;

	if (!json_object_is_type(v, json_type_array))
		return BAD(e, param, "'%s' must be an array", param);
	n = json_object_array_length(v);
	if (n > MOEM_OAI_TOOLS_MAX)
		return BAD(e, param, "'%s' has %zu calls: at most %d", param, n,
			   MOEM_OAI_TOOLS_MAX);
	a = json_object_new_array();
	if (!a)
		return -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++) {
		struct json_object *c = json_object_array_get_idx(v, i), *x, *fn, *args = NULL;
		struct json_object *oc = NULL, *ofn = NULL;
		const char *as;

		snprintf(p, sizeof(p), "%s[%zu]", param, i);
		if (!json_object_is_type(c, json_type_object)) {
			ret = BAD(e, p, "'%s' must be an object", p);
			break;
		}
		ret = only_keys(c, call_keys, p, e);
		if (ret)
			break;
		snprintf(p, sizeof(p), "%s[%zu].type", param, i);
		if (json_object_object_get_ex(c, "type", &x) &&
		    (!json_object_is_type(x, json_type_string) ||
		     strcmp(json_object_get_string(x), "function"))) {
			ret = BAD(e, p, "'%s' must be \"function\"", p);
			break;
		}
		snprintf(p, sizeof(p), "%s[%zu].id", param, i);
		x = NULL;
		if (json_object_object_get_ex(c, "id", &x) &&
		    (!json_object_is_type(x, json_type_string) ||
		     !moem_oai_utf8_ok(json_object_get_string(x),
				       (size_t)json_object_get_string_len(x)))) {
			ret = BAD(e, p, "'%s' must be a string (UTF-8, no NUL)", p);
			break;
		}
		snprintf(p, sizeof(p), "%s[%zu].function", param, i);
		if (!json_object_object_get_ex(c, "function", &fn) ||
		    !json_object_is_type(fn, json_type_object)) {
			ret = BAD(e, p, "'%s' must be an object", p);
			break;
		}
		ret = only_keys(fn, fn_keys, p, e);
		if (ret)
			break;
		snprintf(p, sizeof(p), "%s[%zu].function.name", param, i);
		if (!json_object_object_get_ex(fn, "name", &x)) {
			ret = BAD(e, p, "'%s' is missing", p);
			break;
		}
		ret = get_fn_name(x, p, e);
		if (ret)
			break;
		oc = json_object_new_object();
		ofn = json_object_new_object();
		if (!oc || !ofn) {
			json_object_put(oc);
			json_object_put(ofn);
			ret = -ENOMEM;
			break;
		}
		json_object_object_add(ofn, "name", json_object_get(x));
		snprintf(p, sizeof(p), "%s[%zu].function.arguments", param, i);
		if (!json_object_object_get_ex(fn, "arguments", &x) ||
		    !json_object_is_type(x, json_type_string)) {
			ret = BAD(e, p, "'%s' must be a string (a JSON object)", p);
		} else {
			as = json_object_get_string(x);
			if (!moem_oai_utf8_ok(as, (size_t)json_object_get_string_len(x)))
				ret = BAD(e, p, "'%s' is not valid UTF-8 (or contains a NUL)", p);
			else
				args = json_tokener_parse(as);
			/* Not an object: the template gets the string as it came. */
			if (!ret && !json_object_is_type(args, json_type_object)) {
				json_object_put(args);
				args = json_object_get(x);
			}
		}
		if (!ret) {
			json_object_object_add(ofn, "arguments", args);
			json_object_object_add(oc, "type", json_object_new_string("function"));
			if (json_object_object_get_ex(c, "id", &x))
				json_object_object_add(oc, "id", json_object_get(x));
			json_object_object_add(oc, "function", ofn);
			ofn = NULL;
			json_object_array_add(a, oc);
			oc = NULL;
		}
		json_object_put(ofn);
		json_object_put(oc);
	}
	if (!ret) {
		*out = to_json(a);
		if (!*out)
			ret = -ENOMEM;
	}
	json_object_put(a);
	return ret;
}

/*
 * tools: [{"type":"function","function":{"name","description",
 * "parameters","strict"}}], 1..128, the names distinct. Kept as JSON for
 * the chat template's "tools".
 */
static int get_tools(struct json_object *v, struct moem_oai_request *rq, struct moem_oai_error *e)
{
	static const char *const tool_keys[] = {"type", "function", NULL};
	static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
	size_t n;
	char p[96];
	int ret;

	if (!json_object_is_type(v, json_type_array))
		return BAD(e, "tools", "'tools' must be an array");
	n = json_object_array_length(v);
	if (!n)
		return BAD(e, "tools", "'tools' is empty: leave it out, or give 1 to %d tools",
			   MOEM_OAI_TOOLS_MAX);
	if (n > MOEM_OAI_TOOLS_MAX)
		return BAD(e, "tools", "'tools' has %zu tools: at most %d", n, MOEM_OAI_TOOLS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct json_object *t = json_object_array_get_idx(v, i), *x, *fn, *name;

		snprintf(p, sizeof(p), "tools[%zu]", i);
		if (!json_object_is_type(t, json_type_object))
			return BAD(e, p, "'%s' must be an object", p);
		ret = only_keys(t, tool_keys, p, e);
		if (ret)
			return ret;
		snprintf(p, sizeof(p), "tools[%zu].type", i);
		if (!json_object_object_get_ex(t, "type", &x) ||
		    !json_object_is_type(x, json_type_string) ||
		    strcmp(json_object_get_string(x), "function"))
			return BAD(e, p, "'%s' must be \"function\"", p);
		snprintf(p, sizeof(p), "tools[%zu].function", i);
		if (!json_object_object_get_ex(t, "function", &fn) ||
		    !json_object_is_type(fn, json_type_object))
			return BAD(e, p, "'%s' must be an object", p);
		ret = only_keys(fn, fn_keys, p, e);
		if (ret)
			return ret;
		snprintf(p, sizeof(p), "tools[%zu].function.name", i);
		if (!json_object_object_get_ex(fn, "name", &name))
			return BAD(e, p, "'%s' is missing", p);
		ret = get_fn_name(name, p, e);
		if (ret)
			return ret;
		for (size_t j = 0; j < i; j++) {
			struct json_object *o, *on;

			json_object_object_get_ex(json_object_array_get_idx(v, j), "function", &o);
			json_object_object_get_ex(o, "name", &on);
			if (!strcmp(json_object_get_string(on), json_object_get_string(name)))
				return BAD(e, p, "'%s': tools[%zu] has the same name", p, j);
		}
		snprintf(p, sizeof(p), "tools[%zu].function.description", i);
		if (json_object_object_get_ex(fn, "description", &x) &&
		    !json_object_is_type(x, json_type_null) &&
		    (!json_object_is_type(x, json_type_string) ||
		     !moem_oai_utf8_ok(json_object_get_string(x),
				       (size_t)json_object_get_string_len(x))))
			return BAD(e, p, "'%s' must be a string (UTF-8, no NUL)", p);
		snprintf(p, sizeof(p), "tools[%zu].function.parameters", i);
		if (json_object_object_get_ex(fn, "parameters", &x) &&
		    !json_object_is_type(x, json_type_null) &&
		    !json_object_is_type(x, json_type_object))
			return BAD(e, p, "'%s' must be an object (a JSON Schema)", p);
		snprintf(p, sizeof(p), "tools[%zu].function.strict", i);
		if (json_object_object_get_ex(fn, "strict", &x) &&
		    !json_object_is_type(x, json_type_null) &&
		    !json_object_is_type(x, json_type_boolean))
			return BAD(e, p, "'%s' must be true or false", p);
	}
	free(rq->tools);
	free(rq->template_kwargs);
	rq->tools = to_json(v);
	rq->n_tools = (uint32_t)n;
	return rq->tools ? 0 : -ENOMEM;
}

/*
 * chat_template_kwargs: {"name": any JSON} for the chat template (Qwen3's
 * enable_thinking, ...). The names the server sets itself are refused.
 */
static int get_template_kwargs(struct json_object *v, struct moem_oai_request *rq,
			       struct moem_oai_error *e)
{
	static const char *const reserved[] = {
		"messages",  "tools",	  "add_generation_prompt",
		"bos_token", "eos_token", "raise_exception",
		"range",     "namespace", "strftime_now",
	};

	if (!json_object_is_type(v, json_type_object))
		return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
	json_object_object_foreach(v, key, val)
	{
		char p[96];

		(void)val;
		snprintf(p, sizeof(p), "chat_template_kwargs.%s", key);
		if (!moem_oai_utf8_ok(key, strlen(key)) || !key[0])
			return BAD(e, "chat_template_kwargs",
				   "'chat_template_kwargs': a name is empty or not UTF-8");
		for (size_t i = 0; i < MOEM_ARRAY_SIZE(reserved); i++)
			if (!strcmp(key, reserved[i]))
				return BAD(e, p, "'%s': the server sets '%s' itself", p, key);
	}
	free(rq->template_kwargs);
	rq->template_kwargs = NULL;
	if (!json_object_object_length(v))
		return 0;
	rq->template_kwargs = to_json(v);
	return rq->template_kwargs ? 0 : -ENOMEM;
}

/*
 * tool_choice: "auto", "none", "required", or {"type": "function",
 * "function": {"name": NAME}}; the last two are checked against the tools,
 * and their constraint built, once the whole body is read (tool_constraint()).
 */
static int get_tool_choice(struct json_object *v, struct moem_oai_request *rq,
			   struct moem_oai_error *e)
{
	static const char *const keys[] = {"type", "function", NULL}, *const fn_keys[] = {"name",
											  NULL};
	const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
	struct json_object *t, *fn, *name;

	if (s && (!strcmp(s, "auto") || !strcmp(s, "none") || !strcmp(s, "required"))) {
		rq->tool_choice = !strcmp(s, "auto")   ? MOEM_OAI_TOOL_AUTO
				  : !strcmp(s, "none") ? MOEM_OAI_TOOL_NONE
						       : MOEM_OAI_TOOL_REQUIRED;
		return 0;
	}
	if (!json_object_is_type(v, json_type_object))
		return BAD(e, "tool_choice",
			   "'tool_choice' must be \"auto\", \"none\", \"required\" or "
			   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
	if (only_keys(v, keys, "tool_choice", e))
		return -EINVAL;
	if (!json_object_object_get_ex(v, "type", &t) ||
	    !json_object_is_type(t, json_type_string) ||
	    strcmp(json_object_get_string(t), "function"))
		return BAD(e, "tool_choice.type", "'tool_choice.type' must be \"function\"");
	if (!json_object_object_get_ex(v, "function", &fn) ||
	    !json_object_is_type(fn, json_type_object))
		return BAD(e, "tool_choice.function",
			   "'tool_choice.function' must be an object with the function's 'name'");
	if (only_keys(fn, fn_keys, "tool_choice.function", e))
		return -EINVAL;
	if (!json_object_object_get_ex(fn, "name", &name) ||
	    !json_object_is_type(name, json_type_string))
		return BAD(e, "tool_choice.function.name",
			   "'tool_choice.function.name' must be a string");
	free(rq->tool_name);
	rq->tool_name = strdup(json_object_get_string(name));
	rq->tool_choice = MOEM_OAI_TOOL_NAMED;
	return rq->tool_name ? 0 : -ENOMEM;
}

/*
 * tool_choice required or named: the answer is one call, as Qwen's and
 * Hermes' templates write it, <tool_call>\n{"name": ..., "arguments":
 * {...}}\n</tool_call>, the arguments following the tool's parameters.
 */
static int tool_constraint(struct moem_oai_request *rq, struct moem_oai_error *e)
{
	struct json_object *tools;
	int ret;

	if (rq->tool_choice != MOEM_OAI_TOOL_REQUIRED && rq->tool_choice != MOEM_OAI_TOOL_NAMED)
		return 0;
	if (!rq->n_tools)
		return BAD(e, "tool_choice", "'tool_choice' %s needs 'tools'",
			   rq->tool_name ? "naming a function" : "\"required\"");
	if (rq->json_object)
		return BAD(e, "response_format",
			   "'response_format' and 'tool_choice' %s both constrain the answer: "
			   "give one",
			   rq->tool_name ? "naming a function" : "\"required\"");
	tools = json_tokener_parse(rq->tools); /* written by get_tools() */
	if (!tools)
		return -ENOMEM;
	moem_clear_error();
	ret = moem_json_schema_compile_calls(tools, rq->tool_name, &rq->json_schema);
	json_object_put(tools);
	if (ret == -ENOENT)
		return BAD(e, "tool_choice.function.name",
			   "'tool_choice.function.name': '%.64s' is not in 'tools'", rq->tool_name);
	if (ret == -EINVAL)
		return BAD(e, "tools", "'tool_choice' %s constrains the answer to a call, but: %s",
			   rq->tool_name ? "naming a function" : "\"required\"", moem_last_error());
	if (!ret)
		ret = moem_json_schema_wrap(rq->json_schema, "<tool_call>\n", "\n</tool_call>");
	if (!ret)
		rq->json_object = true;
	return ret;
}

static int get_messages(struct json_object *v, struct moem_oai_request *rq,
			struct moem_oai_error *e)
{
	static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
	size_t n;

	if (!json_object_is_type(v, json_type_array))
		return BAD(e, "messages", "'messages' must be an array");
	n = json_object_array_length(v);
	if (!n)
		return BAD(e, "messages", "'messages' is empty");
	if (n > MOEM_OAI_MESSAGES_MAX)
		return BAD(e, "messages", "'messages' has %zu messages: at most %d", n,
			   MOEM_OAI_MESSAGES_MAX);
	rq->messages = calloc(n, sizeof(*rq->messages));
	if (!rq->messages)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_array_get_idx(v, i), *role = NULL,
				   *content = NULL, *calls = NULL, *call_id = NULL;
		struct moem_oai_message *msg = &rq->messages[i];
		char p[96];
		bool known = false;
		int ret;

		rq->n_messages = (uint32_t)i + 1;
		snprintf(p, sizeof(p), "messages[%zu]", i);
		if (!json_object_is_type(m, json_type_object))
			return BAD(e, p, "'%s' must be an object", p);
		json_object_object_foreach(m, key, val)
		{
			if (!strcmp(key, "role")) {
				role = val;
			} else if (!strcmp(key, "content")) {
				content = val;
			} else if (!strcmp(key, "tool_calls")) {
				calls = json_object_is_type(val, json_type_null) ? NULL : val;
			} else if (!strcmp(key, "tool_call_id")) {
				call_id = json_object_is_type(val, json_type_null) ? NULL : val;
			} else if (!strcmp(key, "name")) {
				/* a participant's name: checked, not used by the templates */
				if (!json_object_is_type(val, json_type_string)) {
					snprintf(p, sizeof(p), "messages[%zu].name", i);
					return BAD(e, p, "'%s' must be a string", p);
				}
			} else {
				snprintf(p, sizeof(p), "messages[%zu].%s", i, key);
				return BAD(e, p, "Unrecognized request argument supplied: %s", p);
			}
		}
		snprintf(p, sizeof(p), "messages[%zu].role", i);
		if (!role)
			return BAD(e, p, "'%s' is missing", p);
		ret = get_string(role, p, &msg->role, e);
		if (ret)
			return ret;
		for (size_t k = 0; k < MOEM_ARRAY_SIZE(roles); k++)
			known |= !strcmp(msg->role, roles[k]);
		if (!known)
			return BAD(e, p,
				   "'%s' is '%.32s': one of system, developer, user, assistant, "
				   "tool",
				   p, msg->role);
		snprintf(p, sizeof(p), "messages[%zu].tool_calls", i);
		if (calls && strcmp(msg->role, "assistant"))
			return BAD(e, p, "'%s': only an assistant message makes tool calls", p);
		if (calls) {
			ret = get_msg_calls(calls, p, &msg->tool_calls, e);
			if (ret)
				return ret;
		}
		snprintf(p, sizeof(p), "messages[%zu].tool_call_id", i);
		if (call_id && strcmp(msg->role, "tool"))
			return BAD(e, p, "'%s': only a tool message answers a tool call", p);
		if (call_id) {
			ret = get_string(call_id, p, &msg->tool_call_id, e);
			if (ret)
				return ret;
		}
		snprintf(p, sizeof(p), "messages[%zu].content", i);
		if (!content || json_object_is_type(content, json_type_null)) {
			/* Only an assistant turn may come without content. */
			if (strcmp(msg->role, "assistant"))
				return BAD(e, p, "'%s' is missing", p);
			msg->content = strdup("");
			if (!msg->content)
				return -ENOMEM;
			continue;
		}
		ret = get_content(content, p, &msg->content, e);
		if (ret)
			return ret;
	}
	return 0;
}

static int get_stop(struct json_object *v, struct moem_oai_request *rq, struct moem_oai_error *e)
{
	size_t n;

	if (json_object_is_type(v, json_type_string)) {
		n = 1;
	} else if (json_object_is_type(v, json_type_array)) {
		n = json_object_array_length(v);
		if (n > MOEM_OAI_STOP_MAX)
			return BAD(e, "stop", "'stop' has %zu strings: at most %d", n,
				   MOEM_OAI_STOP_MAX);
	} else {
		return BAD(e, "stop", "'stop' must be a string or an array of strings");
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *s = json_object_is_type(v, json_type_string)
						? v
						: json_object_array_get_idx(v, i);
		char p[32];
		int ret;

		snprintf(p, sizeof(p),
			 json_object_is_type(v, json_type_string) ? "stop" : "stop[%zu]", i);
		ret = get_string(s, p, &rq->stop[i], e);
		rq->n_stop = (uint32_t)i + (ret ? 0 : 1);
		if (ret)
			return ret;
		if (!rq->stop[i][0])
			return BAD(e, p, "'%s' is empty", p);
		if (strlen(rq->stop[i]) > MOEM_OAI_STOP_LEN)
			return BAD(e, p, "'%s' is longer than %d bytes", p, MOEM_OAI_STOP_LEN);
	}
	return 0;
}

/* logit_bias: {"token id": -100..100}, at most MOEM_OAI_BIAS_MAX ids. */
static int get_logit_bias(struct json_object *v, struct moem_oai_request *rq,
			  struct moem_oai_error *e)
{
	if (!json_object_is_type(v, json_type_object))
		return BAD(e, "logit_bias",
			   "'logit_bias' must be an object of token ids to biases");
	if (json_object_object_length(v) > MOEM_OAI_BIAS_MAX)
		return BAD(e, "logit_bias", "'logit_bias' has %d entries: at most %d",
			   json_object_object_length(v), MOEM_OAI_BIAS_MAX);
	rq->n_bias = 0;
	json_object_object_foreach(v, key, val)
	{
		size_t n = strlen(key);
		char p[96];
		double b;

		snprintf(p, sizeof(p), "logit_bias.%s", key);
		if (!n || n > 10 || strspn(key, "0123456789") != n ||
		    strtoll(key, NULL, 10) > INT32_MAX)
			return BAD(e, p, "'%s': a key must be a token id (0..%d)", p, INT32_MAX);
		if (get_number(val, p, -100, 100, false, &b, e))
			return -EINVAL;
		rq->bias_id[rq->n_bias] = (int32_t)strtol(key, NULL, 10);
		rq->bias[rq->n_bias++] = (float)b;
	}
	return 0;
}

/* response_format.json_schema: {"name", "description", "schema", "strict"}, the schema compiled. */
static int get_json_schema(struct json_object *v, struct moem_oai_request *rq,
			   struct moem_oai_error *e)
{
	static const char *const keys[] = {"name", "description", "schema", "strict", NULL};
	struct json_object *js, *x;
	int ret;

	if (!json_object_object_get_ex(v, "json_schema", &js) ||
	    !json_object_is_type(js, json_type_object))
		return BAD(e, "response_format.json_schema",
			   "'response_format.json_schema' must be an object with 'name' and "
			   "'schema'");
	if (only_keys(js, keys, "response_format.json_schema", e))
		return -EINVAL;
	/* named as a function is (OpenAI's rule for both) */
	if (!json_object_object_get_ex(js, "name", &x))
		return BAD(e, "response_format.json_schema.name",
			   "'response_format.json_schema.name' is missing");
	if (get_fn_name(x, "response_format.json_schema.name", e))
		return -EINVAL;
	if (json_object_object_get_ex(js, "description", &x) &&
	    !json_object_is_type(x, json_type_null) && !json_object_is_type(x, json_type_string))
		return BAD(e, "response_format.json_schema.description",
			   "'response_format.json_schema.description' must be a string");
	if (json_object_object_get_ex(js, "strict", &x) &&
	    !json_object_is_type(x, json_type_null) && !json_object_is_type(x, json_type_boolean))
		return BAD(e, "response_format.json_schema.strict",
			   "'response_format.json_schema.strict' must be true or false");
	if (!json_object_object_get_ex(js, "schema", &x) ||
	    !json_object_is_type(x, json_type_object))
		return BAD(
			e, "response_format.json_schema.schema",
			"'response_format.json_schema.schema' must be a JSON schema (an object)");
	moem_json_schema_free(rq->json_schema);
	rq->json_schema = NULL;
	moem_clear_error();
	ret = moem_json_schema_compile(x, &rq->json_schema);
	if (ret == -EINVAL)
		return BAD(e, "response_format.json_schema.schema",
			   "'response_format.json_schema.schema': %s", moem_last_error());
	return ret;
}

/*
 * response_format: {"type": "text" | "json_object"}, or {"type":
 * "json_schema", "json_schema": {...}}: the answer follows the schema.
 */
static int get_response_format(struct json_object *v, struct moem_oai_request *rq,
			       struct moem_oai_error *e)
{
	static const char *const keys[] = {"type", NULL}, *const schema_keys[] = {
								  "type", "json_schema", NULL};
	struct json_object *t;
	const char *s;

	if (!json_object_is_type(v, json_type_object))
		return BAD(e, "response_format", "'response_format' must be an object");
	if (!json_object_object_get_ex(v, "type", &t) || !json_object_is_type(t, json_type_string))
		return BAD(e, "response_format.type",
			   "'response_format.type' must be \"text\", \"json_object\" or "
			   "\"json_schema\"");
	s = json_object_get_string(t);
	if (strcmp(s, "text") && strcmp(s, "json_object") && strcmp(s, "json_schema"))
		return BAD(e, "response_format.type",
			   "'response_format.type' must be \"text\", \"json_object\" or "
			   "\"json_schema\"");
	if (only_keys(v, strcmp(s, "json_schema") ? keys : schema_keys, "response_format", e))
		return -EINVAL;
	rq->json_object = strcmp(s, "text") != 0;
	return strcmp(s, "json_schema") ? 0 : get_json_schema(v, rq, e);
}

/* stop_token_ids: [id, ...], up to MOEM_OAI_STOP_IDS_MAX (checked against the vocabulary later). */
static int get_stop_ids(struct json_object *v, struct moem_oai_request *rq,
			struct moem_oai_error *e)
{
	size_t n;

	if (!json_object_is_type(v, json_type_array))
		return BAD(e, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
	n = json_object_array_length(v);
	if (n > MOEM_OAI_STOP_IDS_MAX)
		return BAD(e, "stop_token_ids", "'stop_token_ids' has %zu ids: at most %d", n,
			   MOEM_OAI_STOP_IDS_MAX);
	for (size_t i = 0; i < n; i++) {
		char p[48];
		int64_t id;

		snprintf(p, sizeof(p), "stop_token_ids[%zu]", i);
		if (get_int(json_object_array_get_idx(v, i), p, 0, INT32_MAX, &id, e))
			return -EINVAL;
		rq->stop_ids[i] = (int32_t)id;
	}
	rq->n_stop_ids = (uint32_t)n;
	return 0;
}

static int get_stream_options(struct json_object *v, struct moem_oai_request *rq,
			      struct moem_oai_error *e)
{
	if (!json_object_is_type(v, json_type_object))
		return BAD(e, "stream_options", "'stream_options' must be an object");
	json_object_object_foreach(v, key, val)
	{
		char p[96];

		snprintf(p, sizeof(p), "stream_options.%s", key);
		if (strcmp(key, "include_usage"))
			return BAD(e, p, "Unrecognized request argument supplied: %s", p);
		if (json_object_is_type(val, json_type_null))
			continue;
		if (get_bool(val, p, &rq->include_usage, e))
			return -EINVAL;
	}
	return 0;
}

enum field {
	F_MODEL,
	F_PROMPT,
	F_MESSAGES,
	F_MAX_TOKENS,
	F_MAX_COMPLETION_TOKENS,
	F_TEMPERATURE,
	F_TOP_P,
	F_TOP_K,
	F_MIN_P,
	F_PRESENCE,
	F_FREQUENCY,
	F_REPETITION,
	F_SEED,
	F_STOP,
	F_N,
	F_LOGPROBS,
	F_TOP_LOGPROBS,
	F_STREAM,
	F_STREAM_OPTIONS,
	F_USER,
	F_LOGIT_BIAS,
	F_RESPONSE_FORMAT,
	F_ECHO,
	F_TEMPLATE_KWARGS,
	F_IGNORE_EOS,
	F_MIN_TOKENS,
	F_STOP_TOKEN_IDS,
	F_ADD_GEN_PROMPT,
	F_TOOLS,
	F_TOOL_CHOICE,
	F_PARALLEL_TOOL_CALLS,
};

#define EP_C (1u << MOEM_OAI_COMPLETIONS)
#define EP_H (1u << MOEM_OAI_CHAT)

static const struct {
	const char *name;
	enum field f;
	unsigned int eps;
} fields[] = {
	{"model", F_MODEL, EP_C | EP_H},
	{"prompt", F_PROMPT, EP_C},
	{"messages", F_MESSAGES, EP_H},
	{"max_tokens", F_MAX_TOKENS, EP_C | EP_H},
	{"max_completion_tokens", F_MAX_COMPLETION_TOKENS, EP_H},
	{"temperature", F_TEMPERATURE, EP_C | EP_H},
	{"top_p", F_TOP_P, EP_C | EP_H},
	{"top_k", F_TOP_K, EP_C | EP_H},
	{"min_p", F_MIN_P, EP_C | EP_H},
	{"presence_penalty", F_PRESENCE, EP_C | EP_H},
	{"frequency_penalty", F_FREQUENCY, EP_C | EP_H},
	{"repetition_penalty", F_REPETITION, EP_C | EP_H},
	{"seed", F_SEED, EP_C | EP_H},
	{"stop", F_STOP, EP_C | EP_H},
	{"n", F_N, EP_C | EP_H},
	{"logprobs", F_LOGPROBS, EP_C | EP_H},
	{"top_logprobs", F_TOP_LOGPROBS, EP_H},
	{"stream", F_STREAM, EP_C | EP_H},
	{"stream_options", F_STREAM_OPTIONS, EP_C | EP_H},
	{"user", F_USER, EP_C | EP_H},
	{"logit_bias", F_LOGIT_BIAS, EP_C | EP_H},
	{"response_format", F_RESPONSE_FORMAT, EP_C | EP_H},
	{"echo", F_ECHO, EP_C},
	{"chat_template_kwargs", F_TEMPLATE_KWARGS, EP_H},
	{"ignore_eos", F_IGNORE_EOS, EP_C | EP_H},
	{"min_tokens", F_MIN_TOKENS, EP_C | EP_H},
	{"stop_token_ids", F_STOP_TOKEN_IDS, EP_C | EP_H},
	{"add_generation_prompt", F_ADD_GEN_PROMPT, EP_H},
	{"tools", F_TOOLS, EP_H},
	{"tool_choice", F_TOOL_CHOICE, EP_H},
	{"parallel_tool_calls", F_PARALLEL_TOOL_CALLS, EP_H},
};

/* OpenAI's fields this server does not implement: null is taken as absent. */
static bool unsupported(const char *name, enum moem_oai_endpoint ep)
{
	static const char *const both[] = {
		"best_of",   "suffix",	      "response_format",
		"tools",     "tool_choice",   "parallel_tool_calls",
		"functions", "function_call", "service_tier",
		"store",     "metadata",      "modalities",
		"audio",     "prediction",    "reasoning_effort",
	};

	(void)ep;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(both); i++)
		if (!strcmp(name, both[i]))
			return true;
	return false;
}

static int field(struct moem_oai_request *rq, enum field f, const char *name, struct json_object *v,
		 bool *top_logprobs_given, struct moem_oai_error *e)
{
	char *tmp = NULL;
	int64_t x;
	int ret;

	switch (f) {
	case F_MODEL:
		return get_string(v, name, &rq->model, e);
	case F_PROMPT:
		return get_prompt(v, rq, e);
	case F_MESSAGES:
		return get_messages(v, rq, e);
	case F_MAX_TOKENS:
	case F_MAX_COMPLETION_TOKENS:
		ret = get_int(v, name, 1, INT32_MAX, &x, e);
		if (!ret)
			rq->max_tokens = (uint32_t)x;
		return ret;
	case F_TEMPERATURE:
		return get_number(v, name, 0, 2, false, &rq->temperature, e);
	case F_TOP_P:
		return get_number(v, name, 0, 1, true, &rq->top_p, e);
	case F_TOP_K:
		ret = get_int(v, name, -1, MOEM_OAI_TOP_K_MAX, &x, e);
		if (!ret)
			rq->top_k = x < 0 ? 0 : (int32_t)x;
		return ret;
	case F_MIN_P:
		return get_number(v, name, 0, 1, false, &rq->min_p, e);
	case F_PRESENCE:
		return get_number(v, name, -2, 2, false, &rq->presence_penalty, e);
	case F_FREQUENCY:
		return get_number(v, name, -2, 2, false, &rq->frequency_penalty, e);
	case F_REPETITION:
		return get_number(v, name, 0, 2, true, &rq->repetition_penalty, e);
	case F_SEED:
		ret = get_int(v, name, INT64_MIN, INT64_MAX, &x, e);
		if (!ret) {
			rq->seed = (uint64_t)x;
			rq->has_seed = true;
		}
		return ret;
	case F_STOP:
		return get_stop(v, rq, e);
	case F_N:
		ret = get_int(v, name, 1, MOEM_OAI_N_MAX, &x, e);
		if (!ret)
			rq->n = (uint32_t)x;
		return ret;
	case F_LOGPROBS:
		if (rq->ep == MOEM_OAI_CHAT)
			return get_bool(v, name, &rq->logprobs, e);
		/* completions: the number of alternatives, 0..20 */
		ret = get_int(v, name, 0, MOEM_OAI_TOP_MAX, &x, e);
		if (!ret) {
			rq->logprobs = true;
			rq->top_logprobs = (uint32_t)x;
		}
		return ret;
	case F_TOP_LOGPROBS:
		ret = get_int(v, name, 0, MOEM_OAI_TOP_MAX, &x, e);
		if (!ret) {
			rq->top_logprobs = (uint32_t)x;
			*top_logprobs_given = true;
		}
		return ret;
	case F_STREAM:
		return get_bool(v, name, &rq->stream, e);
	case F_STREAM_OPTIONS:
		return get_stream_options(v, rq, e);
	case F_USER:
		/* An end-user id for abuse tracking: checked, not kept. */
		ret = get_string(v, name, &tmp, e);
		free(tmp);
		return ret;
	case F_LOGIT_BIAS:
		return get_logit_bias(v, rq, e);
	case F_RESPONSE_FORMAT:
		return get_response_format(v, rq, e);
	case F_ECHO:
		return get_bool(v, name, &rq->echo, e);
	case F_TEMPLATE_KWARGS:
		return get_template_kwargs(v, rq, e);
	case F_IGNORE_EOS:
		return get_bool(v, name, &rq->ignore_eos, e);
	case F_MIN_TOKENS:
		ret = get_int(v, name, 0, INT32_MAX, &x, e);
		if (!ret)
			rq->min_tokens = (uint32_t)x;
		return ret;
	case F_STOP_TOKEN_IDS:
		return get_stop_ids(v, rq, e);
	case F_ADD_GEN_PROMPT:
		return get_bool(v, name, &rq->add_generation_prompt, e);
	case F_TOOLS:
		return get_tools(v, rq, e);
	case F_TOOL_CHOICE:
		return get_tool_choice(v, rq, e);
	case F_PARALLEL_TOOL_CALLS:
		return get_bool(v, name, &rq->parallel_tool_calls, e);
	}
	return BAD(e, name, "Unrecognized request argument supplied: %s", name);
}

void moem_oai_request_free(struct moem_oai_request *rq)
{
	free(rq->model);
	free(rq->prompt);
	free(rq->prompt_ids);
	for (uint32_t i = 0; i < rq->n_messages; i++) {
		free(rq->messages[i].role);
		free(rq->messages[i].content);
		free(rq->messages[i].tool_calls);
		free(rq->messages[i].tool_call_id);
	}
	free(rq->tools);
	free(rq->tool_name);
	free(rq->messages);
	for (uint32_t i = 0; i < rq->n_stop; i++)
		free(rq->stop[i]);
	moem_json_schema_free(rq->json_schema);
	memset(rq, 0, sizeof(*rq));
}

int moem_oai_parse(enum moem_oai_endpoint ep, const char *body, size_t len,
		   struct moem_oai_request *rq, struct moem_oai_error *e)
{
	struct json_tokener *tok;
	struct json_object *root, *mct;
	bool top_given = false, stream_options = false;
	enum json_tokener_error jerr;
	int ret = 0;

	memset(rq, 0, sizeof(*rq));
	memset(e, 0, sizeof(*e));
	rq->ep = ep;
	rq->temperature = 1.0;
	rq->top_p = 1.0;
	rq->repetition_penalty = 1.0;
	rq->parallel_tool_calls = true;
	rq->add_generation_prompt = true;
	rq->n = 1;
	if (len > INT32_MAX)
		return moem_oai_errorf(e, 413, "invalid_request_error", NULL,
				       "the body is too big");
	tok = json_tokener_new_ex(64);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, body, (int)len);
	jerr = json_tokener_get_error(tok);
	if (!root || jerr != json_tokener_success || json_tokener_get_parse_end(tok) != len) {
		if (jerr == json_tokener_continue || jerr == json_tokener_success)
			BAD(e, NULL,
			    "the body is not one complete JSON object (it ends early or has "
			    "text after it)");
		else
			BAD(e, NULL, "the body is not valid JSON: %s at byte %zu",
			    json_tokener_error_desc(jerr), json_tokener_get_parse_end(tok));
		json_tokener_free(tok);
		json_object_put(root);
		return -EINVAL;
	}
	json_tokener_free(tok);
	if (!json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return BAD(e, NULL, "the body must be a JSON object");
	}
	json_object_object_foreach(root, key, val)
	{
		size_t i;

		for (i = 0; i < MOEM_ARRAY_SIZE(fields); i++)
			if (!strcmp(key, fields[i].name) && (fields[i].eps & (1u << ep)))
				break;
		if (i == MOEM_ARRAY_SIZE(fields)) {
			char name[64];

			snprintf(name, sizeof(name), "%s", key);
			if (unsupported(name, ep)) {
				/* Clients send some of these as null. */
				if (json_object_is_type(val, json_type_null))
					continue;
				ret = BAD(e, name, "'%s' is not supported by this server", name);
			} else {
				ret = BAD(e, name, "Unrecognized request argument supplied: %s",
					  name);
			}
			break;
		}
		if (json_object_is_type(val, json_type_null))
			continue;
		stream_options |= fields[i].f == F_STREAM_OPTIONS;
		ret = field(rq, fields[i].f, key, val, &top_given, e);
		if (ret)
			break;
	}
	/* Both given (chat): max_completion_tokens, the newer name, wins, as in vLLM. */
	if (!ret && ep == MOEM_OAI_CHAT &&
	    json_object_object_get_ex(root, "max_completion_tokens", &mct) &&
	    !json_object_is_type(mct, json_type_null))
		ret = field(rq, F_MAX_COMPLETION_TOKENS, "max_completion_tokens", mct, &top_given,
			    e);
	json_object_put(root);
	if (ret)
		goto fail;
	if (!rq->model)
		ret = BAD(e, "model", "'model' is missing");
	else if (ep == MOEM_OAI_COMPLETIONS && !rq->prompt && !rq->n_prompt_ids)
		ret = BAD(e, "prompt", "'prompt' is missing");
	else if (ep == MOEM_OAI_CHAT && !rq->n_messages)
		ret = BAD(e, "messages", "'messages' is missing");
	else if (stream_options && !rq->stream)
		ret = BAD(e, "stream_options",
			  "'stream_options' is only allowed with 'stream': true");
	else if (rq->max_tokens && rq->min_tokens > rq->max_tokens)
		ret = BAD(e, "min_tokens", "'min_tokens' %u is more than 'max_tokens' %u",
			  rq->min_tokens, rq->max_tokens);
	else if (top_given && !rq->logprobs && rq->top_logprobs)
		ret = BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	else
		ret = tool_constraint(rq, e);
	if (!ret)
		return 0;
fail:
	moem_oai_request_free(rq);
	return ret;
}
