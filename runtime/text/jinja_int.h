/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The Jinja subset chat templates use (include/moem/chat.h): moem_jinja_lex.c
 * turns the source into tokens (with trim_blocks and lstrip_blocks, as
 * transformers' apply_chat_template sets them), moem_jinja_parse.c builds the
 * tree, moem_jinja_eval.c runs it with Python's semantics for values (what
 * jinja2 does), jinja_builtin.c holds the filters, tests, methods and
 * globals, jinja_value.c the values and their printing. Anything outside
 * the subset is refused with an error naming it, at parse time when it
 * can be seen there.
 */
#ifndef MOEM_TEXT_JINJA_INT_H
#define MOEM_TEXT_JINJA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

/* ---- arena: every node and value lives in one, freed at once ---- */

struct jarena {
	struct jblk *head;
	size_t total, limit; /* bytes handed out, and the most allowed */
};

void *moem_ja_alloc(struct jarena *a, size_t n);
char *moem_ja_strndup(struct jarena *a, const char *s, size_t n);
void moem_ja_free(struct jarena *a);

/* ---- values ---- */

enum jt { JT_UNDEF, JT_NONE, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_DICT, JT_FN };

struct jlist {
	size_t n;
	struct jv *v;
};

/*
 * Keys are strings, or integers (Python dicts take both: Seed-OSS's
 * template keys a table by token budget): ki[i] marks an integer key,
 * whose k[i] is its decimal text. 512 and "512" are different keys.
 */
struct jdict {
	size_t n, cap;
	const char **k;
	size_t *klen;
	uint8_t *ki;
	struct jv *v;
};

struct jv {
	enum jt t;
	bool tuple; /* a list that prints as (...) */
	/*
	 * A list made by a filter that is a generator in Python's Jinja
	 * (select, map, selectattr, unique, reverse of a list, ...): always
	 * true, not indexable, no len(), no tojson, not printable, until
	 * |list makes it a list. Kept so that templates behave as in
	 * transformers, where such misuses fail.
	 */
	bool gen;
	/*
	 * A string that is markupsafe's Markup (from |safe or |e): "+" with a
	 * plain string HTML-escapes the plain one, as Python's Markup does.
	 */
	bool markup;
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *p;
			size_t n;
		} s;
		struct jlist *l;
		struct jdict *d;
		struct {
			int id;		 /* enum jfn */
			struct jv *self; /* bound method receiver, or NULL */
			const struct jnode *macro;
		} fn;
	};
};

static inline struct jv jv_undef(void)
{
	return (struct jv){.t = JT_UNDEF};
}

static inline struct jv jv_none(void)
{
	return (struct jv){.t = JT_NONE};
}

static inline struct jv jv_bool(bool b)
{
	return (struct jv){.t = JT_BOOL, .b = b};
}

static inline struct jv jv_int(int64_t i)
{
	return (struct jv){.t = JT_INT, .i = i};
}

static inline struct jv jv_str(const char *p, size_t n)
{
	struct jv v = {.t = JT_STR};

	v.s.p = p;
	v.s.n = n;
	return v;
}

bool moem_jv_truthy(const struct jv *v);
bool moem_jv_equal(const struct jv *a, const struct jv *b);
const char *moem_jv_type_name(const struct jv *v);
/* A dict's value for string key k, or NULL. */
struct jv *moem_jv_dict_get(const struct jdict *d, const char *k, size_t n);
int moem_jv_dict_set(struct jarena *a, struct jdict *d, const char *k, size_t n, struct jv v);
/* The same for a key value: a string or an integer (else NULL / -EINVAL). */
struct jv *moem_jv_dict_lookup(const struct jdict *d, const struct jv *key);
int moem_jv_dict_put(struct jarena *a, struct jdict *d, const struct jv *key, struct jv v);
/* Entry i's key as a value (an int for an integer key). */
struct jv moem_jv_dict_key(const struct jdict *d, size_t i);
struct jdict *moem_jv_dict_new(struct jarena *a);
struct jlist *moem_jv_list_new(struct jarena *a, size_t n);
/* JSON (json-c) into a value; objects keep their key order. */
int moem_jv_from_json(struct jarena *a, struct json_object *o, struct jv *out, int depth);

/* A growable output string. */
struct jbuf {
	char *p;
	size_t n, cap, limit;
};

int moem_jb_put(struct jbuf *b, const char *s, size_t n);
int moem_jb_puts(struct jbuf *b, const char *s);
/* Python's str(v) (what {{ v }} prints). */
int moem_jv_print(struct jbuf *b, const struct jv *v);
/* Python's repr(v) (strings quoted as Python quotes them). */
int moem_jv_repr(struct jbuf *b, const struct jv *v);
/* json.dumps(v, ensure_ascii=False, indent=indent): indent < 0 for none. */
int moem_jv_tojson(struct jbuf *b, const struct jv *v, int indent, int depth, bool sort_keys);

/* ---- tokens ---- */

enum jtok_kind {
	JK_TEXT,
	JK_OPEN_EXPR,  /* {{ */
	JK_CLOSE_EXPR, /* }} */
	JK_OPEN_STMT,  /* {% */
	JK_CLOSE_STMT, /* %} */
	JK_NAME,
	JK_STRING,
	JK_INT,
	JK_FLOAT,
	JK_OP, /* operators and punctuation; text holds it */
	JK_END,
};

struct jtok {
	enum jtok_kind k;
	const char *p; /* for TEXT, STRING (unescaped), NAME, OP */
	size_t n;
	int64_t i;
	double f;
	int line;
};

struct jlexed {
	struct jtok *v;
	size_t n;
};

/* Tokenize src; -EINVAL with a message naming the line on a syntax error. */
int moem_jinja_lex(struct jarena *a, const char *src, size_t len, struct jlexed *out);

/* ---- tree ---- */

/* The variable a filter block's body is bound to: no template can name it. */
#define JINJA_FILTER_BODY "\x01filter body"

enum jnode_kind {
	/* statements */
	JN_TEXT,
	JN_OUTPUT,
	JN_IF,
	JN_FOR,
	JN_SET,
	JN_SET_BLOCK,
	JN_BREAK,
	JN_CONTINUE,
	JN_MACRO,
	JN_BLOCK,	 /* {% generation %}: its body, as is */
	JN_FILTER_BLOCK, /* {% filter f %}: a, filters over the body (JINJA_FILTER_BODY) */
	/* expressions */
	JN_LIT,
	JN_NAME,
	JN_ATTR,
	JN_ITEM,
	JN_SLICE,
	JN_CALL,
	JN_FILTER,
	JN_TEST,
	JN_NOT,
	JN_NEG,
	JN_BIN,
	JN_AND,
	JN_OR,
	JN_COND,
	JN_LIST,
	JN_TUPLE,
	JN_DICT,
};

struct jnode {
	enum jnode_kind k;
	int line;
	const char *name; /* NAME, ATTR, FILTER, TEST, BIN operator, TEXT, MACRO */
	size_t name_len;
	struct jv lit;
	struct jnode *a, *b, *c; /* operands; FOR: a target names via names, b iterable, c filter */
	bool negate;		 /* TEST: is not */
	struct jnode **args;	 /* CALL/FILTER/TEST args, LIST/TUPLE items, DICT k,v,k,v */
	const char **kw;	 /* keyword names of args (NULL for positional) */
	size_t nargs;
	struct jnode **body, **orelse; /* IF/FOR/SET_BLOCK/MACRO */
	size_t nbody, norelse;
	const char **names; /* FOR/SET targets, MACRO parameters */
	size_t nnames;
	struct jnode *attr_of; /* SET: ns.attr target object name node */
};

struct jtemplate {
	struct jarena arena;
	struct jnode **body;
	size_t nbody;
};

int moem_jinja_parse(struct jarena *a, const struct jlexed *lx, struct jnode ***body,
		     size_t *nbody);

/* ---- evaluation ---- */

struct jscope {
	struct jscope *up;
	struct jdict *vars;
};

struct jctx {
	struct jarena *a;
	struct jbuf *out;
	struct jscope *scope;
	int depth;
	uint64_t steps; /* loop iterations and calls, bounded */
	int line;	/* of the node being run, for messages */
	int64_t now;	/* strftime_now()'s time, seconds since the epoch */
};

/* Built-in callables (globals, methods); jinja_builtin.c dispatches them. */
enum jfn {
	JF_RAISE,
	JF_RANGE,
	JF_NAMESPACE,
	JF_STRFTIME,
	JF_UNSUPPORTED, /* a Python method moem does not have: fn.self holds its name */
	JF_MACRO,
	JF_STR_METHOD, /* first of the string methods: id - JF_STR_METHOD indexes them */
};

int moem_jinja_eval(struct jctx *c, const struct jnode *n, struct jv *out);
int moem_jinja_run(struct jctx *c, struct jnode *const *body, size_t n);
struct jv *moem_jinja_lookup(struct jctx *c, const char *name, size_t n);

/* An attribute of v (dict key, method, loop field); *out is undefined if none. */
int moem_jinja_getattr(struct jctx *c, const struct jv *v, const char *name, size_t n,
		       struct jv *out);
int moem_jinja_call(struct jctx *c, const struct jv *fn, const struct jv *args,
		    const char *const *kw, size_t nargs, struct jv *out);
int moem_jinja_filter(struct jctx *c, const char *name, size_t nn, const struct jv *args,
		      const char *const *kw, size_t n, struct jv *out);
int moem_jinja_test(struct jctx *c, const char *name, size_t nn, const struct jv *args, size_t n,
		    bool *r);
/* Is this filter or test name known (checked at parse time)? */
bool moem_jinja_filter_known(const char *name, size_t n);
/* HTML-escape a string (markupsafe's escape); a Markup string is kept as is. */
int moem_jinja_escape(struct jctx *c, const struct jv *v, struct jv *out);
bool moem_jinja_test_known(const char *name, size_t n);

/* Error with the current line: -err, message "template line N: ...". */
int moem_jinja_err(const struct jctx *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* MOEM_TEXT_JINJA_INT_H */
