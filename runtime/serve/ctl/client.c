// SPDX-License-Identifier: GPL-2.0-only
/* A blocking client of moemd's control socket (ctl.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <moem/ctl.h>
#include <moem/error.h>
#include <moem/util.h>

struct moem_ctl {
	int fd;
	int64_t next_id;
	struct moem_ctl_lines in;
	char path[108];
};

int moem_ctl_connect(const char *path, struct moem_ctl **out)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct moem_ctl *c;
	int fd;

	if (!path)
		path = MOEM_CTL_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path))
		return moem_errf(ENAMETOOLONG, "socket path %s is longer than %zu bytes", path,
				 sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return moem_errf(errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(fd);
		if (err == ENOENT || err == ECONNREFUSED)
			return moem_errf(err, "moemd is not running (%s: %s)", path, strerror(err));
		return moem_errf(err, "connect %s: %s", path, strerror(err));
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->next_id = 1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	/* Responses can be large (status); allow more than a request line. */
	moem_ctl_lines_init(&c->in, 16 * MOEM_CTL_LINE_MAX);
	*out = c;
	return 0;
}

void moem_ctl_close(struct moem_ctl *c)
{
	if (!c)
		return;
	close(c->fd);
	moem_ctl_lines_free(&c->in);
	free(c);
}

int moem_ctl_fd(const struct moem_ctl *c)
{
	return c->fd;
}

int moem_ctl_send_line(struct moem_ctl *c, const char *line, size_t len)
{
	size_t off = 0;
	bool nl = len && line[len - 1] == '\n';

	while (off < len + !nl) {
		const char *p = off < len ? line + off : "\n";
		size_t n = off < len ? len - off : 1;
		ssize_t r = send(c->fd, p, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return moem_errf(errno == EPIPE ? ECONNRESET : errno, "send to moemd: %s",
					 strerror(errno));
		off += (size_t)r;
	}
	return 0;
}

int moem_ctl_recv_line(struct moem_ctl *c, int timeout_ms, char **out)
{
	uint64_t deadline =
		timeout_ms < 0 ? UINT64_MAX : moem_now_ns() + (uint64_t)timeout_ms * 1000000;
	char buf[65536], *line;
	size_t len;
	int ret;

	for (;;) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		uint64_t now;
		ssize_t r;

		ret = moem_ctl_lines_next(&c->in, &line, &len);
		if (ret < 0)
			return moem_errf(EPROTO, "moemd sent a line longer than %zu bytes",
					 c->in.max);
		if (ret > 0) {
			*out = strndup(line, len);
			return *out ? 0 : -ENOMEM;
		}
		now = moem_now_ns();
		if (now >= deadline)
			return moem_errf(ETIMEDOUT, "no answer from moemd within %d ms",
					 timeout_ms);
		ret = poll(&p, 1,
			   deadline == UINT64_MAX ? -1 : (int)((deadline - now) / 1000000 + 1));
		if (ret < 0 && errno == EINTR)
			continue;
		if (ret < 0)
			return moem_errf(errno, "poll: %s", strerror(errno));
		if (!ret)
			continue;
		r = recv(c->fd, buf, sizeof(buf), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return moem_errf(ECONNRESET, "moemd closed the connection%s%s",
					 r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
		ret = moem_ctl_lines_feed(&c->in, buf, (size_t)r);
		if (ret)
			return ret;
	}
}

/*
 * A request that found the connection closed: moemd refuses a connection
 * it does not take (too many clients) with one error line and closes it,
 * so return what that line says rather than err ("send to moemd: Broken
 * pipe").
 */
static int refused(struct moem_ctl *c, int err)
{
	struct json_object *r, *v, *e;
	struct moem_err_saved saved;
	char *line;
	int ret;

	if (err != -ECONNRESET)
		return err;
	moem_error_save(&saved);
	while (!moem_ctl_recv_line(c, 1000, &line)) {
		r = json_tokener_parse(line);
		free(line);
		if (json_object_object_get_ex(r, "ok", &v) && !json_object_get_boolean(v) &&
		    json_object_object_get_ex(r, "error", &e) &&
		    json_object_is_type(e, json_type_string)) {
			ret = ECONNRESET;
			if (json_object_object_get_ex(r, "errno", &v) &&
			    json_object_is_type(v, json_type_int) && json_object_get_int(v) > 0)
				ret = json_object_get_int(v);
			ret = moem_errf(ret, "%s", json_object_get_string(e));
			json_object_put(r);
			return ret;
		}
		json_object_put(r);
	}
	moem_error_restore(&saved);
	return err;
}

int moem_ctl_send(struct moem_ctl *c, const char *cmd, struct json_object *args, int64_t *id)
{
	struct json_object *req = args ? args : json_object_new_object();
	char *line;
	size_t len;
	int ret;

	if (!req)
		return -ENOMEM;
	*id = c->next_id++;
	json_object_object_add(req, "v", json_object_new_int(MOEM_CTL_VERSION_MAJOR));
	json_object_object_add(req, "id", json_object_new_int64(*id));
	json_object_object_add(req, "cmd", json_object_new_string(cmd));
	line = moem_ctl_line(req, &len);
	json_object_put(req);
	if (!line)
		return -ENOMEM;
	ret = moem_ctl_send_line(c, line, len);
	free(line);
	return refused(c, ret);
}

int moem_ctl_wait(struct moem_ctl *c, int64_t id, int timeout_ms, struct json_object **resp)
{
	struct json_object *r, *v, *e;
	char *line;
	int ret, err = EIO;

	*resp = NULL;
	for (;;) {
		ret = moem_ctl_recv_line(c, timeout_ms, &line);
		if (ret)
			return ret;
		r = json_tokener_parse(line);
		free(line);
		if (!r || !json_object_is_type(r, json_type_object)) {
			json_object_put(r);
			return moem_errf(EPROTO, "moemd sent something that is not a JSON object");
		}
		if (json_object_object_get_ex(r, "id", &v) &&
		    json_object_is_type(v, json_type_int) && json_object_get_int64(v) == id)
			break;
		if (json_object_object_get_ex(r, "id", &v) &&
		    json_object_is_type(v, json_type_null) &&
		    json_object_object_get_ex(r, "ok", &e) && !json_object_get_boolean(e))
			break;	    /* an error about the connection itself (too many clients) */
		json_object_put(r); /* the answer to another request */
	}
	*resp = r;
	if (!json_object_object_get_ex(r, "ok", &v) || !json_object_is_type(v, json_type_boolean))
		return moem_errf(EPROTO, "moemd's response has no \"ok\"");
	if (json_object_get_boolean(v))
		return 0;
	if (json_object_object_get_ex(r, "errno", &e) && json_object_is_type(e, json_type_int) &&
	    json_object_get_int(e) > 0)
		err = json_object_get_int(e);
	if (json_object_object_get_ex(r, "error", &e) && json_object_is_type(e, json_type_string))
		return moem_errf(err, "%s", json_object_get_string(e));
	return moem_errf(err, "moemd refused the request without saying why");
}

int moem_ctl_call(struct moem_ctl *c, const char *cmd, struct json_object *args, int timeout_ms,
		  struct json_object **resp)
{
	int64_t id;
	int ret = moem_ctl_send(c, cmd, args, &id);

	*resp = NULL;
	if (ret)
		return ret;
	return moem_ctl_wait(c, id, timeout_ms, resp);
}
