// SPDX-License-Identifier: GPL-2.0-only
/*
 * The control socket: a Unix stream socket (mode 0660) taking JSON-line
 * requests (Documentation/protocol.md). One instance per socket path: a
 * lock file next to it (flock, released by the kernel however the holder
 * dies) tells a stale socket left by a killed daemon from a live one.
 *
 * Clients are non-blocking; each has an input line buffer and an output
 * queue. A line longer than MOEM_CTL_LINE_MAX gets an error response and
 * the connection is closed after it; malformed JSON gets an error
 * response and the connection stays; a client whose output queue exceeds
 * MOEMD_OUT_MAX (it does not read) is dropped. Nothing a client sends can
 * stop the daemon from serving the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "moemd.h"

struct moemd_client {
	int fd;
	uint64_t serial;
	struct moem_ctl_lines in;
	char *out;
	size_t out_len, out_cap;
	bool close_after_flush;
};

int moemd_client_fd(const struct moemd_client *c)
{
	return c->fd;
}

uint64_t moemd_client_serial(const struct moemd_client *c)
{
	return c->serial;
}

bool moemd_client_wants_write(const struct moemd_client *c)
{
	return c->out_len > 0;
}

struct moemd_client *moemd_client_find(struct moemd *d, uint64_t serial)
{
	for (int i = 0; i < MOEMD_MAX_CLIENTS; i++)
		if (d->clients[i] && d->clients[i]->serial == serial)
			return d->clients[i];
	return NULL;
}

/* Make the socket's directory (e.g. /run/moem) if it is missing. */
static int make_parent(const char *path)
{
	char dir[108], *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return moem_errf(errno, "mkdir %s: %s", dir, strerror(errno));
	return 0;
}

int moemd_server_open(struct moemd *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *path = d->cfg.socket;
	char lock[128];
	int fd, ret;

	d->lfd = d->lock_fd = -1;
	ret = make_parent(path);
	if (ret)
		return ret;
	snprintf(lock, sizeof(lock), "%s.lock", path);
	d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (d->lock_fd < 0)
		return moem_errf(errno, "lock file %s: %s", lock, strerror(errno));
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB)) {
		ret = errno == EWOULDBLOCK
			      ? moem_errf(EADDRINUSE, "another moemd serves %s (it holds %s)", path,
					  lock)
			      : moem_errf(errno, "flock %s: %s", lock, strerror(errno));
		close(d->lock_fd);
		d->lock_fd = -1;
		return ret;
	}
	/* We hold the lock: a socket file there is a dead daemon's. */
	if (unlink(path) == 0)
		moem_info("removed the stale socket %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return moem_errf(errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(path, 0660) || listen(fd, 64)) {
		ret = moem_errf(errno, "control socket %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return ret;
	}
	d->lfd = fd;
	moem_info("control socket: %s (mode 0660)", path);
	return 0;
}

static void client_free(struct moemd *d, int slot)
{
	struct moemd_client *c = d->clients[slot];

	close(c->fd);
	moem_ctl_lines_free(&c->in);
	free(c->out);
	free(c);
	d->clients[slot] = NULL;
}

void moemd_server_close(struct moemd *d)
{
	for (int i = 0; i < MOEMD_MAX_CLIENTS; i++)
		if (d->clients[i])
			client_free(d, i);
	if (d->lfd >= 0) {
		close(d->lfd);
		unlink(d->cfg.socket);
		d->lfd = -1;
	}
	if (d->lock_fd >= 0) {
		close(d->lock_fd);
		d->lock_fd = -1;
	}
}

void moemd_server_accept(struct moemd *d)
{
	for (;;) {
		struct moemd_client *c;
		int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot = -1;

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				moem_warn("accept: %s", strerror(errno));
			return;
		}
		for (int i = 0; i < MOEMD_MAX_CLIENTS && slot < 0; i++)
			if (!d->clients[i])
				slot = i;
		c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			static const char busy[] =
				"{\"v\":1,\"id\":null,\"ok\":false,\"error\":\"too many control "
				"connections\",\"errno\":16}\n";

			if (send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				moem_dbg("refusing a client: %s", strerror(errno));
			close(fd);
			continue;
		}
		c->fd = fd;
		c->serial = ++d->next_client;
		moem_ctl_lines_init(&c->in, MOEM_CTL_LINE_MAX);
		d->clients[slot] = c;
	}
}

void moemd_client_send(struct moemd *d, struct moemd_client *c, struct json_object *obj)
{
	size_t len;
	char *line;

	if (!obj)
		return;
	line = moem_ctl_line(obj, &len);
	json_object_put(obj);
	if (!line || c->close_after_flush)
		goto out;
	if (c->out_len + len > MOEMD_OUT_MAX) {
		moem_warn("control client %llu does not read its responses: dropping it",
			  (unsigned long long)c->serial);
		c->close_after_flush = true;
		c->out_len = 0;
		goto out;
	}
	if (c->out_len + len > c->out_cap) {
		size_t cap = moem_max(c->out_cap * 2, c->out_len + len);
		char *o = realloc(c->out, cap);

		if (!o)
			goto out;
		c->out = o;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, line, len);
	c->out_len += len;
out:
	free(line);
}

/* Write what is queued; false if the client is gone. */
static bool client_flush(struct moemd_client *c)
{
	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return true;
		if (n <= 0)
			return false;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return !c->close_after_flush;
}

static int slot_of(struct moemd *d, struct moemd_client *c)
{
	for (int i = 0; i < MOEMD_MAX_CLIENTS; i++)
		if (d->clients[i] == c)
			return i;
	return -1;
}

/* Split buffered input into requests and dispatch them. */
static void client_requests(struct moemd *d, struct moemd_client *c)
{
	char *line;
	size_t len;
	int ret;

	while (!c->close_after_flush && (ret = moem_ctl_lines_next(&c->in, &line, &len)) != 0) {
		struct json_object *req;
		const char *cmd;
		int64_t id;

		if (ret < 0) {
			d->bad_requests++;
			moemd_client_send(d, c, moem_ctl_error(-1, E2BIG, moem_last_error()));
			c->close_after_flush = true;
			moem_warn(
				"control client %llu sent a line longer than %d bytes: closing it",
				(unsigned long long)c->serial, MOEM_CTL_LINE_MAX);
			return;
		}
		if (!len)
			continue; /* blank lines are keep-alives */
		d->requests++;
		moem_clear_error();
		ret = moem_ctl_parse_request(line, len, &req, &id, &cmd);
		if (ret) {
			d->bad_requests++;
			moemd_client_send(d, c, moem_ctl_error(id, -ret, moem_last_error()));
			continue;
		}
		moemd_dispatch(d, c, req, id, cmd);
		json_object_put(req);
	}
}

bool moemd_client_io(struct moemd *d, struct moemd_client *c, short revents)
{
	int slot = slot_of(d, c);
	char buf[16384];
	bool alive = true;

	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		for (int rounds = 0; rounds < 8 && !c->close_after_flush; rounds++) {
			ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
			if (n <= 0) {
				alive = false; /* closed: answers to it are dropped */
				break;
			}
			if (moem_ctl_lines_feed(&c->in, buf, (size_t)n)) {
				/* Only an over-long line gets here: next() says so. */
				client_requests(d, c);
				break;
			}
			client_requests(d, c);
		}
	}
	if (alive)
		alive = client_flush(c);
	if (alive && c->close_after_flush && !c->out_len)
		alive = false;
	if (!alive && slot >= 0)
		client_free(d, slot);
	return alive;
}

void moemd_server_flush(struct moemd *d, int ms)
{
	uint64_t end = moem_now_ns() + (uint64_t)ms * 1000000;

	for (;;) {
		struct pollfd p[MOEMD_MAX_CLIENTS];
		int n = 0;

		for (int i = 0; i < MOEMD_MAX_CLIENTS; i++) {
			struct moemd_client *c = d->clients[i];

			if (c && c->out_len && client_flush(c) && c->out_len)
				p[n++] = (struct pollfd){.fd = c->fd, .events = POLLOUT};
		}
		if (!n || moem_now_ns() >= end)
			return;
		if (poll(p, (nfds_t)n, 10) < 0 && errno != EINTR)
			return;
	}
}
