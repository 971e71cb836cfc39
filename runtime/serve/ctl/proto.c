// SPDX-License-Identifier: GPL-2.0-only
/* The control protocol's framing, request checks and responses (ctl.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/ctl.h>
#include <moem/error.h>

void moem_ctl_lines_init(struct moem_ctl_lines *l, size_t max)
{
	memset(l, 0, sizeof(*l));
	l->max = max ? max : MOEM_CTL_LINE_MAX;
}

void moem_ctl_lines_free(struct moem_ctl_lines *l)
{
	free(l->buf);
	memset(l, 0, sizeof(*l));
}

/* Drop the line handed out last. */
static void drop_taken(struct moem_ctl_lines *l)
{
	if (!l->skip)
		return;
	memmove(l->buf, l->buf + l->skip, l->len - l->skip);
	l->len -= l->skip;
	l->skip = 0;
}

int moem_ctl_lines_feed(struct moem_ctl_lines *l, const void *data, size_t len)
{
	size_t need;

	drop_taken(l);
	/* Hold at most one line and a read's worth more: a peer sending an
	 * endless line is cut off by next() before this grows further. */
	if (l->len > l->max + 1)
		return moem_errf(E2BIG, "request line longer than %zu bytes", l->max);
	need = l->len + len + 1;
	if (need > l->cap) {
		size_t cap = l->cap ? l->cap : 4096;
		char *b;

		while (cap < need)
			cap *= 2;
		b = realloc(l->buf, cap);
		if (!b)
			return -ENOMEM;
		l->buf = b;
		l->cap = cap;
	}
	memcpy(l->buf + l->len, data, len);
	l->len += len;
	return 0;
}

int moem_ctl_lines_next(struct moem_ctl_lines *l, char **line, size_t *len)
{
	char *nl;
	size_t n;

	drop_taken(l);
	if (!l->len)
		return 0;
	nl = memchr(l->buf, '\n', l->len);
	n = nl ? (size_t)(nl - l->buf) : l->len;
	if (n > l->max)
		return moem_errf(E2BIG, "request line longer than %zu bytes", l->max);
	if (!nl)
		return 0;
	*nl = 0;
	l->skip = n + 1;
	if (n && l->buf[n - 1] == '\r')
		l->buf[--n] = 0;
	*line = l->buf;
	*len = n;
	return 1;
}

struct json_object *moem_ctl_ok(int64_t id)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "v", json_object_new_int(MOEM_CTL_VERSION_MAJOR));
	json_object_object_add(o, "id", id >= 0 ? json_object_new_int64(id) : NULL);
	json_object_object_add(o, "ok", json_object_new_boolean(1));
	return o;
}

struct json_object *moem_ctl_error(int64_t id, int err, const char *msg)
{
	struct json_object *o = moem_ctl_ok(id);

	if (!o)
		return NULL;
	json_object_object_add(o, "ok", json_object_new_boolean(0));
	json_object_object_add(o, "error", json_object_new_string(msg ? msg : strerror(err)));
	json_object_object_add(o, "errno", json_object_new_int(err > 0 ? err : EIO));
	return o;
}

char *moem_ctl_line(struct json_object *obj, size_t *len)
{
	const char *s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
								    JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t n = strlen(s);
	char *line = malloc(n + 2);

	if (!line)
		return NULL;
	memcpy(line, s, n);
	line[n] = '\n';
	line[n + 1] = 0;
	*len = n + 1;
	return line;
}

int moem_ctl_parse_request(const char *line, size_t len, struct json_object **req, int64_t *id,
			   const char **cmd)
{
	struct json_tokener *tok;
	struct json_object *o, *v;
	enum json_tokener_error jerr;
	int64_t major;

	*req = NULL;
	*id = -1;
	*cmd = NULL;
	if (len > INT32_MAX)
		return moem_errf(E2BIG, "request too long");
	if (memchr(line, 0, len))
		return moem_errf(EINVAL, "request holds a NUL byte");
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, line, (int)len);
	jerr = json_tokener_get_error(tok);
	if (!o && jerr == json_tokener_continue) {
		/* The line is all there is (and all of it was taken): a bare
		 * number or literal ends here. A NUL ends json-c's input. */
		o = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
	} else if (o && jerr == json_tokener_success && json_tokener_get_parse_end(tok) < len) {
		/* Only whitespace may follow the object. */
		for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
			if (!strchr(" \t\r", line[i])) {
				jerr = json_tokener_error_parse_unexpected;
				break;
			}
	}
	if (!o || jerr != json_tokener_success) {
		const char *why = jerr == json_tokener_continue ? "incomplete JSON"
								: json_tokener_error_desc(jerr);

		json_tokener_free(tok);
		json_object_put(o);
		return moem_errf(EINVAL, "malformed request (%s): want one JSON object per line",
				 why);
	}
	json_tokener_free(tok);
	if (!json_object_is_type(o, json_type_object)) {
		/* Name the type before the object is released. */
		const char *type = json_type_to_name(json_object_get_type(o));

		json_object_put(o);
		return moem_errf(EINVAL, "a request is a JSON object, not %s", type);
	}
	if (json_object_object_get_ex(o, "id", &v) && json_object_is_type(v, json_type_int)) {
		/* json-c clamps what does not fit 64 bits to UINT64_MAX and keeps
		 * values above INT64_MAX as unsigned: anything above INT64_MAX
		 * would be answered with another id, so it is refused. */
		if (json_object_get_int64(v) >= 0 && json_object_get_uint64(v) > INT64_MAX) {
			json_object_put(o);
			return moem_errf(EINVAL,
					 "request \"id\" does not fit: ids are 0..%lld (2^63-1)",
					 (long long)INT64_MAX);
		}
		*id = json_object_get_int64(v);
	}
	if (*id < 0) {
		json_object_put(o);
		*id = -1;
		return moem_errf(EINVAL, "request without an \"id\" (a non-negative integer)");
	}
	if (!json_object_object_get_ex(o, "v", &v) || !json_object_is_type(v, json_type_int)) {
		json_object_put(o);
		return moem_errf(EINVAL,
				 "request without a protocol version \"v\" (this moemd speaks %d)",
				 MOEM_CTL_VERSION_MAJOR);
	}
	major = json_object_get_int64(v);
	if (major != MOEM_CTL_VERSION_MAJOR) {
		json_object_put(o);
		return moem_errf(EPROTONOSUPPORT,
				 "protocol version %lld is not supported (this moemd speaks %d.%d)",
				 (long long)major, MOEM_CTL_VERSION_MAJOR, MOEM_CTL_VERSION_MINOR);
	}
	if (!json_object_object_get_ex(o, "cmd", &v) || !json_object_is_type(v, json_type_string)) {
		json_object_put(o);
		return moem_errf(EINVAL, "request without a \"cmd\" string");
	}
	*cmd = json_object_get_string(v);
	*req = o;
	return 0;
}

int moem_ctl_get_str(struct json_object *o, const char *key, const char **out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return -ENOENT;
	if (!json_object_is_type(v, json_type_string))
		return moem_errf(EINVAL, "\"%s\" must be a string", key);
	*out = json_object_get_string(v);
	return 0;
}

int moem_ctl_get_bool(struct json_object *o, const char *key, bool *out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return -ENOENT;
	if (!json_object_is_type(v, json_type_boolean))
		return moem_errf(EINVAL, "\"%s\" must be true or false", key);
	*out = json_object_get_boolean(v);
	return 0;
}

int moem_ctl_get_scalar(struct json_object *o, const char *key, char *buf, size_t len)
{
	struct json_object *v;
	const char *s;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return -ENOENT;
	switch (json_object_get_type(v)) {
	case json_type_string:
		s = json_object_get_string(v);
		if (strlen(s) >= len)
			return moem_errf(EINVAL, "\"%s\" is longer than %zu bytes", key, len - 1);
		snprintf(buf, len, "%s", s);
		return 0;
	case json_type_int:
		/* json-c keeps integers up to UINT64_MAX; negative ones are
		 * passed on as such and refused by the value's parser. */
		if (json_object_get_int64(v) < 0)
			snprintf(buf, len, "%lld", (long long)json_object_get_int64(v));
		else
			snprintf(buf, len, "%llu", (unsigned long long)json_object_get_uint64(v));
		return 0;
	default:
		return moem_errf(EINVAL, "\"%s\" must be a string or an integer", key);
	}
}
