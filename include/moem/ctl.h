/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moemd's control protocol (Documentation/protocol.md): JSON lines over a
 * Unix stream socket. Every request is one line
 *   {"v":1,"id":N,"cmd":"status", ...arguments}
 * and gets one response line with the same id
 *   {"v":1,"id":N,"ok":true, ...results}
 *   {"v":1,"id":N,"ok":false,"error":"message","errno":22}
 * Unknown fields are ignored; an unknown cmd or a newer major version is
 * refused with an error response; a line longer than MOEM_CTL_LINE_MAX
 * gets an error response and the connection is closed. Responses to
 * different requests on one connection may come out of order (a "run"
 * answers when the run ends): match them by id.
 *
 * This header has the pieces both ends use: line framing, request
 * checking and response building (proto.c), and a blocking client
 * (client.c).
 */
#ifndef MOEM_CTL_H
#define MOEM_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define MOEM_CTL_VERSION_MAJOR 1
#define MOEM_CTL_VERSION_MINOR 0
#define MOEM_CTL_SOCKET	       "/run/moem/moemd.sock"
#define MOEM_CTL_LINE_MAX      65536 /* bytes per line, newline excluded */

/* ---- line framing ---- */

/* Bytes received but not yet split into lines. */
struct moem_ctl_lines {
	char *buf;
	size_t len, cap;
	size_t skip; /* bytes of the line handed out last, dropped next */
	size_t max;  /* longest line accepted (MOEM_CTL_LINE_MAX if 0) */
};

void moem_ctl_lines_init(struct moem_ctl_lines *l, size_t max);
void moem_ctl_lines_free(struct moem_ctl_lines *l);
/* Append received bytes; -ENOMEM. */
int moem_ctl_lines_feed(struct moem_ctl_lines *l, const void *data, size_t len);
/*
 * Take the next complete line: 1 and *line (NUL-terminated, newline and a
 * trailing CR removed, valid until the next call of next() or feed())
 * and *len; 0 if no
 * complete line is buffered; -E2BIG (with a message) if the line being
 * received is already longer than max.
 */
int moem_ctl_lines_next(struct moem_ctl_lines *l, char **line, size_t *len);

/* ---- requests and responses ---- */

/*
 * Check a request line: a JSON object with "v" (an integer: the major
 * version, MOEM_CTL_VERSION_MAJOR; minor additions are announced by
 * "hello"), "id" (an integer) and "cmd" (a string). On success *req is the parsed object
 * (put it with json_object_put()), *id and *cmd point into it. On failure
 * -EINVAL / -EPROTONOSUPPORT with a message; *id is the request's id when
 * it could be read, else -1.
 */
int moem_ctl_parse_request(const char *line, size_t len, struct json_object **req, int64_t *id,
			   const char **cmd);
/* {"v":1,"id":id,"ok":true}: add results to it. id < 0 gives "id":null. */
struct json_object *moem_ctl_ok(int64_t id);
/* {"v":1,"id":id,"ok":false,"error":msg,"errno":err} (err > 0). */
struct json_object *moem_ctl_error(int64_t id, int err, const char *msg);
/* One line (with its newline) for obj, malloc()ed; NULL on ENOMEM. */
char *moem_ctl_line(struct json_object *obj, size_t *len);

/* Typed getters for request arguments: -ENOENT if absent, -EINVAL with a
 * message naming key if present with the wrong type. */
int moem_ctl_get_str(struct json_object *o, const char *key, const char **out);
int moem_ctl_get_bool(struct json_object *o, const char *key, bool *out);
/* A value given as a string or a number, as a string ("12G", "25", "oea"). */
int moem_ctl_get_scalar(struct json_object *o, const char *key, char *buf, size_t len);

/* ---- client ---- */

struct moem_ctl;

/* Connect to the socket at path (NULL: MOEM_CTL_SOCKET). -errno with a message. */
int moem_ctl_connect(const char *path, struct moem_ctl **out);
void moem_ctl_close(struct moem_ctl *c);
int moem_ctl_fd(const struct moem_ctl *c);

/*
 * Send a request for cmd with the fields of args (consumed; may be NULL)
 * and wait up to timeout_ms (< 0: forever) for the response with its id.
 * Returns 0 and *resp for "ok":true; for "ok":false, -errno (the
 * response's, or EIO) with the daemon's message, and *resp still set;
 * -ETIMEDOUT, -ECONNRESET (daemon went away), -EPROTO (bad response)
 * otherwise with *resp NULL. Responses to other ids are dropped. A
 * connection moemd refused (one error line, then closed) fails with that
 * line's errno and message, even when the request could not be sent.
 */
int moem_ctl_call(struct moem_ctl *c, const char *cmd, struct json_object *args, int timeout_ms,
		  struct json_object **resp);
/* The two halves of moem_ctl_call(): send (the request's id in *id) and
 * wait for the response to id (same returns; -ETIMEDOUT leaves the
 * request outstanding, wait again). */
int moem_ctl_send(struct moem_ctl *c, const char *cmd, struct json_object *args, int64_t *id);
int moem_ctl_wait(struct moem_ctl *c, int64_t id, int timeout_ms, struct json_object **resp);
/* Raw access: send one line as is (a newline is added if missing), and
 * receive one line (malloc()ed, without its newline). */
int moem_ctl_send_line(struct moem_ctl *c, const char *line, size_t len);
int moem_ctl_recv_line(struct moem_ctl *c, int timeout_ms, char **line);

#endif /* MOEM_CTL_H */
