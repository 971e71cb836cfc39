// SPDX-License-Identifier: GPL-2.0-only
/*
 * Jinja lexer: text, {{ expressions }}, {% statements %} and {# comments #},
 * with the whitespace rules chat templates are rendered with: "-" inside a
 * delimiter strips all whitespace on that side, trim_blocks drops the first
 * newline after a block or comment, lstrip_blocks drops spaces and tabs
 * from the start of a line up to a block or comment ("+" keeps them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "jinja_int.h"
#include "tok_int.h"

/* A template is small; its token count is bounded by its length anyway. */
#define JINJA_MAX_SRC (4u << 20)

struct lexer {
	struct jarena *a;
	const char *s;
	size_t len, i;
	int line;
	struct jtok *v;
	size_t n, cap;
};

static int push(struct lexer *L, struct jtok t)
{
	if (L->n == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		struct jtok *v = realloc(L->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		L->v = v;
		L->cap = cap;
	}
	t.line = t.line ? t.line : L->line;
	L->v[L->n++] = t;
	return 0;
}

static int lex_err(const struct lexer *L, const char *what)
{
	return moem_errf(EINVAL, "template line %d: %s", L->line, what);
}

/* A digit of base (2, 8, 10, 16). */
static bool is_digit_of(char c, int base)
{
	if (base == 16)
		return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
	return c >= '0' && c < '0' + (base < 10 ? base : 10);
}

/*
 * Digits of base at L->i into num (n so far, cap bytes), an underscore
 * allowed between two digits as Python writes 1_000; false if there are
 * none or num is full.
 */
static bool lex_digits(struct lexer *L, int base, char *num, size_t *n, size_t cap)
{
	size_t first = *n;

	while (L->i < L->len) {
		char c = L->s[L->i];

		if (c == '_' && *n > first && L->i + 1 < L->len &&
		    is_digit_of(L->s[L->i + 1], base)) {
			L->i++;
			continue;
		}
		if (!is_digit_of(c, base))
			break;
		if (*n + 1 >= cap)
			return false;
		num[(*n)++] = c;
		L->i++;
	}
	num[*n] = 0;
	return *n > first;
}

/*
 * A number literal as Jinja's lexer takes it: 42, 1_000, 0x1f, 0o17,
 * 0b101; 2.5, 1e3, 2.5e-1, 1_0.5 (a float; one too large is inf, as in
 * Python). An integer past int64 is refused (Python's are unbounded).
 */
static int lex_number(struct lexer *L, struct jtok *t)
{
	char num[80];
	size_t n = 0;
	bool fl = false;
	char *end;
	int base = 10;

	if (L->s[L->i] == '0' && L->i + 2 < L->len) {
		char x = L->s[L->i + 1] | 0x20;

		base = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 10;
		if (base != 10) {
			L->i += 2;
			if (L->s[L->i] == '_')
				L->i++;
			if (!lex_digits(L, base, num, &n, sizeof(num)))
				return lex_err(L, "a number without digits, or too long");
		}
	}
	if (base == 10) {
		if (!lex_digits(L, 10, num, &n, sizeof(num)))
			return lex_err(L, "number too long");
		if (L->i + 1 < L->len && L->s[L->i] == '.' && is_digit_of(L->s[L->i + 1], 10)) {
			fl = true;
			num[n++] = '.';
			L->i++;
			if (!lex_digits(L, 10, num, &n, sizeof(num)))
				return lex_err(L, "number too long");
		}
		if (L->i + 1 < L->len && (L->s[L->i] | 0x20) == 'e') {
			size_t k = L->i + 1;

			if (k + 1 < L->len && (L->s[k] == '+' || L->s[k] == '-'))
				k++;
			if (k < L->len && is_digit_of(L->s[k], 10)) {
				if (n + 3 >= sizeof(num))
					return lex_err(L, "number too long");
				fl = true;
				num[n++] = 'e';
				if (k > L->i + 1)
					num[n++] = L->s[L->i + 1];
				L->i = k;
				if (!lex_digits(L, 10, num, &n, sizeof(num)))
					return lex_err(L, "number too long");
			}
		}
	}
	errno = 0;
	if (fl) {
		t->k = JK_FLOAT;
		t->f = strtod(num, &end); /* past the range: +-HUGE_VAL = inf, 0 */
		return 0;
	}
	t->k = JK_INT;
	t->i = strtoll(num, &end, base);
	if (errno)
		return lex_err(L, "integer out of range (more than 64 bits)");
	return 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void count_lines(struct lexer *L, size_t from, size_t to)
{
	for (size_t k = from; k < to; k++)
		L->line += L->s[k] == '\n';
}

/* Strip trailing whitespace of the last token if it is text ("{%-", "{{-"). */
static void rstrip_prev(struct lexer *L, bool all)
{
	struct jtok *t;

	if (!L->n || L->v[L->n - 1].k != JK_TEXT)
		return;
	t = &L->v[L->n - 1];
	if (all) {
		while (t->n && is_space(t->p[t->n - 1]))
			t->n--;
		return;
	}
	/* lstrip_blocks: only spaces and tabs, and only back to a line start. */
	{
		size_t k = t->n;

		while (k && (t->p[k - 1] == ' ' || t->p[k - 1] == '\t'))
			k--;
		if (k == 0 ? t->p == L->s || t->p[-1] == '\n' : t->p[k - 1] == '\n')
			t->n = k;
	}
}

static int unescape(struct lexer *L, const char *p, size_t n, struct jtok *t)
{
	char *o = moem_ja_alloc(L->a, n + 1);
	size_t k = 0;

	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint32_t cp;
		int digits = 0;

		if (p[i] != '\\' || i + 1 == n) {
			o[k++] = p[i];
			continue;
		}
		switch (p[++i]) {
		case 'n':
			o[k++] = '\n';
			continue;
		case 't':
			o[k++] = '\t';
			continue;
		case 'r':
			o[k++] = '\r';
			continue;
		case '\\':
		case '\'':
		case '"':
			o[k++] = p[i];
			continue;
		case 'x':
			digits = 2;
			break;
		case 'u':
			digits = 4;
			break;
		case 'U':
			digits = 8;
			break;
		default:
			/* Python keeps unknown escapes as written. */
			o[k++] = '\\';
			o[k++] = p[i];
			continue;
		}
		cp = 0;
		if (i + (size_t)digits >= n)
			return lex_err(L, "truncated \\x/\\u escape in a string");
		for (int d = 1; d <= digits; d++) {
			char c = p[i + (size_t)d];
			int v = c >= '0' && c <= '9'   ? c - '0'
				: c >= 'a' && c <= 'f' ? c - 'a' + 10
				: c >= 'A' && c <= 'F' ? c - 'A' + 10
						       : -1;

			if (v < 0)
				return lex_err(L, "bad \\x/\\u escape in a string");
			cp = cp * 16 + (uint32_t)v;
		}
		if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return lex_err(L, "escape is not a character");
		i += (size_t)digits;
		k += moem_tok_utf8_put(cp, o + k);
	}
	o[k] = 0;
	t->p = o;
	t->n = k;
	return 0;
}

static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
				  "/",	"%",  "<",  ">",  "=",	"(",  ")", "[", "]",
				  "{",	"}",  ".",  ",",  ":",	"|",  "~"};

/* Tokens inside {{ }} or {% %}, up to and including the closing delimiter. */
static int lex_tag(struct lexer *L, bool stmt, bool *strip_after)
{
	const char *close = stmt ? "%}" : "}}";

	for (;;) {
		struct jtok t = {0};
		char c;

		while (L->i < L->len && is_space(L->s[L->i])) {
			L->line += L->s[L->i] == '\n';
			L->i++;
		}
		if (L->i >= L->len)
			return lex_err(L, stmt ? "unclosed {%" : "unclosed {{");
		c = L->s[L->i];
		if (c == '-' && L->i + 2 < L->len && !strncmp(L->s + L->i + 1, close, 2)) {
			*strip_after = true;
			L->i += 3;
			return push(L, (struct jtok){.k = stmt ? JK_CLOSE_STMT : JK_CLOSE_EXPR});
		}
		if (L->i + 1 < L->len && !strncmp(L->s + L->i, close, 2)) {
			L->i += 2;
			return push(L, (struct jtok){.k = stmt ? JK_CLOSE_STMT : JK_CLOSE_EXPR});
		}
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
			size_t st = L->i;

			while (L->i < L->len &&
			       ((L->s[L->i] >= 'a' && L->s[L->i] <= 'z') ||
				(L->s[L->i] >= 'A' && L->s[L->i] <= 'Z') || L->s[L->i] == '_' ||
				(L->s[L->i] >= '0' && L->s[L->i] <= '9')))
				L->i++;
			t.k = JK_NAME;
			t.p = L->s + st;
			t.n = L->i - st;
		} else if (c >= '0' && c <= '9') {
			int ret = lex_number(L, &t);

			if (ret)
				return ret;
		} else if (c == '\'' || c == '"') {
			size_t st = ++L->i;
			int ret;

			while (L->i < L->len && L->s[L->i] != c) {
				if (L->s[L->i] == '\\' && L->i + 1 < L->len)
					L->i++;
				L->line += L->s[L->i] == '\n';
				L->i++;
			}
			if (L->i >= L->len)
				return lex_err(L, "unterminated string");
			t.k = JK_STRING;
			ret = unescape(L, L->s + st, L->i - st, &t);
			if (ret)
				return ret;
			L->i++;
		} else {
			size_t k;

			for (k = 0; k < MOEM_ARRAY_SIZE(ops); k++) {
				size_t ol = strlen(ops[k]);

				if (L->i + ol <= L->len && !strncmp(L->s + L->i, ops[k], ol))
					break;
			}
			if (k == MOEM_ARRAY_SIZE(ops)) {
				char msg[48];

				snprintf(msg, sizeof(msg), "unexpected character '%c'", c);
				return lex_err(L, msg);
			}
			t.k = JK_OP;
			t.p = ops[k];
			t.n = strlen(ops[k]);
			L->i += t.n;
		}
		{
			int ret = push(L, t);

			if (ret)
				return ret;
		}
	}
}

int moem_jinja_lex(struct jarena *a, const char *src, size_t len, struct jlexed *out)
{
	struct lexer L = {.a = a, .s = src, .len = len, .line = 1};
	bool strip_next = false, trim_next = false;
	int ret = 0;

	if (len > JINJA_MAX_SRC)
		return moem_errf(EFBIG, "template: %zu bytes is more than moem reads", len);
	if (moem_tok_utf8_invalid_at(src, len) != len)
		return moem_errf(EILSEQ, "template: not valid UTF-8");
	while (!ret && L.i < len) {
		const char *open = NULL;
		size_t st = L.i, te;
		bool minus, plus;
		char kind;

		/* Text up to the next delimiter. */
		for (te = L.i; te + 1 < len; te++)
			if (src[te] == '{' &&
			    (src[te + 1] == '{' || src[te + 1] == '%' || src[te + 1] == '#'))
				break;
		if (te + 1 >= len)
			te = len;
		else
			open = src + te;
		{
			struct jtok t = {.k = JK_TEXT, .p = src + st, .n = te - st, .line = L.line};

			if (strip_next)
				while (t.n && is_space(*t.p)) {
					t.p++;
					t.n--;
				}
			else if (trim_next && t.n && *t.p == '\n') {
				t.p++;
				t.n--;
			}
			count_lines(&L, st, te);
			strip_next = trim_next = false;
			ret = push(&L, t);
		}
		if (ret || !open)
			break;
		kind = open[1];
		L.i = te + 2;
		minus = L.i < len && src[L.i] == '-';
		plus = L.i < len && src[L.i] == '+';
		if (minus || plus)
			L.i++;
		if (minus)
			rstrip_prev(&L, true);
		else if (!plus && kind != '{')
			rstrip_prev(&L, false);
		if (kind == '#') {
			const char *e = NULL;

			for (size_t k = L.i; k + 1 < len; k++)
				if (src[k] == '#' && src[k + 1] == '}') {
					e = src + k;
					break;
				}
			if (!e)
				return free(L.v), lex_err(&L, "unclosed comment");
			count_lines(&L, L.i, (size_t)(e - src));
			strip_next = e > src + L.i && e[-1] == '-';
			trim_next = !strip_next;
			L.i = (size_t)(e - src) + 2;
			continue;
		}
		ret = push(&L, (struct jtok){.k = kind == '%' ? JK_OPEN_STMT : JK_OPEN_EXPR});
		if (!ret)
			ret = lex_tag(&L, kind == '%', &strip_next);
		trim_next = kind == '%' && !strip_next;
	}
	if (!ret)
		ret = push(&L, (struct jtok){.k = JK_END});
	if (ret) {
		free(L.v);
		return ret;
	}
	/* The tokens live in the arena with the rest of the template. */
	out->v = moem_ja_alloc(a, L.n * sizeof(*L.v));
	if (!out->v) {
		free(L.v);
		return -ENOMEM;
	}
	memcpy(out->v, L.v, L.n * sizeof(*L.v));
	out->n = L.n;
	free(L.v);
	return 0;
}
