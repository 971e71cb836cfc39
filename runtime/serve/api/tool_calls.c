// SPDX-License-Identifier: GPL-2.0-only
/*
 * Tool calls in generated text (openai.h): the Hermes format that Qwen's
 * chat templates ask the model for, one call per
 * <tool_call>{"name": ..., "arguments": {...}}</tool_call> block. What it
 * holds is bounded by the request's max_tokens: a call is kept whole
 * until its end tag, content only while it could still start a tag.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/openai.h>

static const char start_tag[] = "<tool_call>";
static const char end_tag[] = "</tool_call>";
#define START_LEN (sizeof(start_tag) - 1)
#define END_LEN	  (sizeof(end_tag) - 1)

void moem_oai_tools_init(struct moem_oai_tools *f, bool parallel)
{
	memset(f, 0, sizeof(*f));
	f->parallel = parallel;
}

void moem_oai_tools_free(struct moem_oai_tools *f)
{
	for (uint32_t i = 0; i < f->n_calls; i++) {
		free(f->calls[i].name);
		free(f->calls[i].arguments);
	}
	free(f->calls);
	free(f->buf);
	free(f->ws_text);
	free(f->out);
	memset(f, 0, sizeof(*f));
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int grow(char **p, size_t *cap, size_t need)
{
	char *b;

	if (need <= *cap)
		return 0;
	b = realloc(*p, need * 2);
	if (!b)
		return -ENOMEM;
	*p = b;
	*cap = need * 2;
	return 0;
}

/* Content out: after a call, its leading whitespace is dropped. */
static int emit(struct moem_oai_tools *f, const char *s, size_t n)
{
	if (f->after_call) {
		while (n && is_ws(*s))
			s++, n--;
		if (!n)
			return 0;
		f->after_call = false;
	}
	if (!n)
		return 0;
	if (grow(&f->out, &f->out_cap, f->out_len + n + 1))
		return -ENOMEM;
	memcpy(f->out + f->out_len, s, n);
	f->out_len += n;
	f->out[f->out_len] = 0;
	return 0;
}

static void consume(struct moem_oai_tools *f, size_t n)
{
	if (!n)
		return;
	memmove(f->buf, f->buf + n, f->len - n);
	f->len -= n;
}

/* How many bytes at the end of buf could begin the start tag. */
static size_t held_prefix(const struct moem_oai_tools *f)
{
	size_t max = START_LEN - 1 < f->len ? START_LEN - 1 : f->len;

	for (size_t k = max; k; k--)
		if (!memcmp(f->buf + f->len - k, start_tag, k))
			return k;
	return 0;
}

/*
 * A call's JSON: an object with "name" (a non-empty string) and
 * "arguments" (an object, or a string holding one; absent: {}). 1 and the
 * call filled, 0 if it is not one, -ENOMEM.
 */
static int parse_call(const char *s, size_t n, struct moem_oai_call *c)
{
	static const int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
	struct json_object *o = NULL, *name, *args = NULL, *parsed = NULL;
	struct json_tokener *tok;
	int ret = 0;

	while (n && is_ws(*s))
		s++, n--;
	while (n && is_ws(s[n - 1]))
		n--;
	if (!n || n > INT32_MAX)
		return 0;
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	/* Strict, and valid UTF-8: the call goes into a JSON answer as it is. */
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, s, (int)n);
	if (!o || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != n || !json_object_is_type(o, json_type_object))
		goto out;
	if (!json_object_object_get_ex(o, "name", &name) ||
	    !json_object_is_type(name, json_type_string) || !json_object_get_string_len(name) ||
	    !moem_oai_utf8_ok(json_object_get_string(name),
			      (size_t)json_object_get_string_len(name)))
		goto out;
	if (json_object_object_get_ex(o, "arguments", &args) &&
	    json_object_is_type(args, json_type_string)) {
		parsed = json_tokener_parse(json_object_get_string(args));
		if (!parsed)
			goto out;
		args = parsed;
	}
	if (args && !json_object_is_type(args, json_type_object))
		goto out;
	c->name = strdup(json_object_get_string(name));
	c->arguments = strdup(args ? json_object_to_json_string_ext(args, flags) : "{}");
	ret = c->name && c->arguments ? 1 : -ENOMEM;
	if (ret < 0) {
		free(c->name);
		free(c->arguments);
	}
out:
	json_object_put(parsed);
	json_object_put(o);
	json_tokener_free(tok);
	return ret;
}

/* The call that ends at buf[body] (its end tag, if any, ends at buf[end]). */
static int end_call(struct moem_oai_tools *f, size_t body, size_t end)
{
	struct moem_oai_call c;
	int ret = parse_call(f->buf, body, &c);

	if (ret < 0)
		return ret;
	if (ret == 0) {
		/* Not a call: the block is content, as generated. */
		ret = emit(f, f->ws_text ? f->ws_text : "", f->ws);
		if (!ret)
			ret = emit(f, start_tag, START_LEN);
		if (!ret)
			ret = emit(f, f->buf, end);
	} else if (!f->parallel && f->n_calls) {
		ret = 0;
		free(c.name);
		free(c.arguments);
		f->dropped++;
		f->after_call = true;
	} else {
		ret = 0;
		if (f->n_calls == f->calls_cap) {
			uint32_t cap = f->calls_cap ? f->calls_cap * 2 : 4;
			struct moem_oai_call *a = realloc(f->calls, cap * sizeof(*a));

			if (!a) {
				free(c.name);
				free(c.arguments);
				return -ENOMEM;
			}
			f->calls = a;
			f->calls_cap = cap;
		}
		f->calls[f->n_calls++] = c;
		f->after_call = true;
	}
	if (ret)
		return ret;
	consume(f, end);
	f->in_call = false;
	f->ws = 0;
	return 0;
}

static int run(struct moem_oai_tools *f, bool at_end)
{
	for (;;) {
		const char *p;
		size_t k;
		int ret;

		if (f->in_call) {
			p = f->len ? memmem(f->buf, f->len, end_tag, END_LEN) : NULL;
			if (p)
				ret = end_call(f, (size_t)(p - f->buf),
					       (size_t)(p - f->buf) + END_LEN);
			else if (at_end)
				ret = end_call(f, f->len, f->len); /* cut short by the end */
			else
				return 0;
			if (ret)
				return ret;
			continue;
		}
		p = f->len ? memmem(f->buf, f->len, start_tag, START_LEN) : NULL;
		if (!p) {
			/* Hold a possible start tag and the whitespace before it. */
			k = at_end ? f->len : f->len - held_prefix(f);
			while (!at_end && k && is_ws(f->buf[k - 1]))
				k--;
			ret = emit(f, f->buf, k);
			if (!ret)
				consume(f, k);
			return ret;
		}
		k = (size_t)(p - f->buf);
		while (k && is_ws(f->buf[k - 1]))
			k--;
		ret = emit(f, f->buf, k);
		if (ret)
			return ret;
		/* The whitespace before the tag, kept in case the block is no call. */
		f->ws = (size_t)(p - f->buf) - k;
		free(f->ws_text);
		f->ws_text = f->ws ? strndup(f->buf + k, f->ws) : NULL;
		if (f->ws && !f->ws_text)
			return -ENOMEM;
		consume(f, (size_t)(p - f->buf) + START_LEN);
		f->in_call = true;
	}
}

int moem_oai_tools_feed(struct moem_oai_tools *f, const char *text, size_t len, const char **out,
			size_t *out_len)
{
	int ret;

	f->out_len = 0;
	*out = "";
	*out_len = 0;
	if (grow(&f->buf, &f->cap, f->len + len + 1))
		return -ENOMEM;
	memcpy(f->buf + f->len, text, len);
	f->len += len;
	ret = run(f, false);
	*out = f->out ? f->out : "";
	*out_len = f->out_len;
	return ret;
}

int moem_oai_tools_flush(struct moem_oai_tools *f, const char **out, size_t *out_len)
{
	int ret;

	f->out_len = 0;
	ret = run(f, true);
	*out = f->out ? f->out : "";
	*out_len = f->out_len;
	return ret;
}
