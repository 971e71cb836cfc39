// SPDX-License-Identifier: GPL-2.0-only
/*
 * The control socket: a Unix stream socket (mode 0660) taking JSON-line
 * requests (Documentation/protocol.md). One instance per socket path: a
 * lock file next to it (flock, released by the kernel however the holder
 * dies) tells a stale socket left by a killed daemon from a live one, and
 * only a socket that nobody answers on is ever removed.
 *
 * Clients are non-blocking; each has an input line buffer and an output
 * queue. A line longer than MOEM_CTL_LINE_MAX gets an error response and
 * the connection is closed after it; malformed JSON gets an error
 * response and the connection stays; a client whose output queue exceeds
 * MOEMD_OUT_MAX (it does not read) is dropped. A client that half-closes
 * (shuts down its sending side) still gets every answer, then EOF.
 *
 * Admission (Documentation/admin-guide.md, "Security model"): at most
 * MOEMD_MAX_CLIENTS connections, of which one uid holds at most
 * cfg.clients_per_uid; MOEMD_ROOT_SLOTS more are for uid 0 only, and root
 * finding even those taken closes the other uids' connection idle the
 * longest (root's own connections are root's business). A
 * connection that sends nothing and waits for nothing for
 * cfg.idle_timeout_ms is closed. Nothing a client sends, or withholds,
 * can stop the daemon from serving the others.
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
	uid_t uid;	  /* the peer's (SO_PEERCRED) */
	uint64_t last_ns; /* last byte received or answer queued */
	uint32_t pending; /* jobs (run, verify) whose answer it waits for */
	struct moem_ctl_lines in;
	char *out;
	size_t out_len, out_cap;
	bool close_after_flush;
	bool rd_closed; /* it sent EOF: answer what it asked, then close */
};

int moemd_client_fd(const struct moemd_client *c)
{
	return c->fd;
}

uint64_t moemd_client_serial(const struct moemd_client *c)
{
	return c->serial;
}

short moemd_client_events(const struct moemd_client *c)
{
	return (short)((c->rd_closed ? 0 : POLLIN) | (c->out_len ? POLLOUT : 0));
}

uid_t moemd_client_uid(const struct moemd_client *c)
{
	return c->uid;
}

void moemd_client_hold(struct moemd_client *c)
{
	c->pending++;
}

void moemd_client_release(struct moemd *d, struct moemd_client *c)
{
	if (c->pending)
		c->pending--;
	c->last_ns = moem_now_ns();
}

struct moemd_client *moemd_client_find(struct moemd *d, uint64_t serial)
{
	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++)
		if (d->clients[i] && d->clients[i]->serial == serial)
			return d->clients[i];
	return NULL;
}

unsigned int moemd_client_count(const struct moemd *d)
{
	unsigned int n = 0;

	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++)
		n += d->clients[i] != NULL;
	return n;
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

/*
 * We hold the lock, so a socket at path should be a dead daemon's. Remove
 * it only if it is a socket and nobody answers on it (a daemon of another
 * version, or one whose lock file was removed, may still serve there);
 * anything else at path (a typo in the configuration naming a file) is
 * left alone and refused.
 */
static int remove_stale(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, err;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		return moem_errf(errno, "control socket %s: %s", path, strerror(errno));
	}
	if (!S_ISSOCK(st.st_mode))
		return moem_errf(EEXIST,
				 "control socket %s: a %s is there, not a socket: not removing it "
				 "(check --socket / 'socket =')",
				 path, S_ISDIR(st.st_mode) ? "directory" : "file");
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return moem_errf(errno, "socket: %s", strerror(errno));
	err = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
	close(fd);
	if (!err)
		return moem_errf(EADDRINUSE, "control socket %s: another process answers on it",
				 path);
	if (err != ECONNREFUSED)
		return moem_errf(err, "control socket %s: %s", path, strerror(err));
	if (unlink(path))
		return moem_errf(errno, "control socket %s: %s", path, strerror(errno));
	moem_info("removed the stale socket %s (nobody answered on it)", path);
	return 0;
}

int moemd_server_open(struct moemd *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *path = d->cfg.socket;
	struct stat st = {0};
	char lock[128];
	int fd, ret;

	d->lfd = d->lock_fd = -1;
	ret = make_parent(path);
	if (ret)
		return ret;
	snprintf(lock, sizeof(lock), "%s.lock", path);
	/* not through a link someone planted, and only a lock moemd's user owns:
	 * in a directory others can write, the name is theirs to take */
	d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (d->lock_fd < 0)
		return moem_errf(errno, "lock file %s: %s%s", lock, strerror(errno),
				 errno == ELOOP ? " (a symbolic link: remove it)" : "");
	if (fstat(d->lock_fd, &st) || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
		ret = moem_errf(EPERM,
				"lock file %s belongs to uid %u, not to moemd's %u: remove it",
				lock, (unsigned int)st.st_uid, (unsigned int)geteuid());
		close(d->lock_fd);
		d->lock_fd = -1;
		return ret;
	}
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB)) {
		ret = errno == EWOULDBLOCK
			      ? moem_errf(EADDRINUSE, "another moemd serves %s (it holds %s)", path,
					  lock)
			      : moem_errf(errno, "flock %s: %s", lock, strerror(errno));
		close(d->lock_fd);
		d->lock_fd = -1;
		return ret;
	}
	ret = remove_stale(path);
	if (ret) {
		close(d->lock_fd);
		d->lock_fd = -1;
		return ret;
	}
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
	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++)
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

/* One error line to a connection that is not taken, then close it. */
static void refuse(int fd, const char *why)
{
	struct json_object *o = moem_ctl_error(-1, EBUSY, why);
	size_t len;
	char *line = o ? moem_ctl_line(o, &len) : NULL;

	if (line && send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		moem_dbg("refusing a client: %s", strerror(errno));
	free(line);
	json_object_put(o);
	close(fd);
}

/* The non-root connection idle the longest that waits for nothing, or -1. */
static int idlest(struct moemd *d)
{
	int best = -1;

	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
		struct moemd_client *c = d->clients[i];

		if (c && c->uid && !c->pending && !c->out_len &&
		    (best < 0 || c->last_ns < d->clients[best]->last_ns))
			best = i;
	}
	return best;
}

/*
 * Free the slots of clients that hung up and wait for nothing (the poll
 * loop would find them only after the accepts of this round): a burst of
 * connect-and-close left them counted against a live client.
 */
static void reap_gone(struct moemd *d)
{
	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
		struct moemd_client *c = d->clients[i];
		struct pollfd p;

		if (!c || c->pending)
			continue;
		p = (struct pollfd){.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)))
			client_free(d, i);
	}
}

/* A slot for a new connection from uid, or -1 with the reason. */
static int admit(struct moemd *d, uid_t uid, char *why, size_t len)
{
	unsigned int same = 0, used = 0;
	int free_slot = -1, victim;
	bool reaped = false;

again:
	same = used = 0;
	free_slot = -1;

	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
		if (!d->clients[i]) {
			/* Slots past MOEMD_MAX_CLIENTS are root's. */
			if (free_slot < 0 && (i < MOEMD_MAX_CLIENTS || !uid))
				free_slot = i;
			continue;
		}
		used++;
		same += d->clients[i]->uid == uid;
	}
	if (!reaped &&
	    (free_slot < 0 || (uid && d->cfg.clients_per_uid && same >= d->cfg.clients_per_uid))) {
		reaped = true;
		reap_gone(d);
		goto again;
	}
	if (uid && d->cfg.clients_per_uid && same >= d->cfg.clients_per_uid) {
		snprintf(why, len, "too many control connections from uid %u (%u at once)",
			 (unsigned int)uid, d->cfg.clients_per_uid);
		return -1;
	}
	if (free_slot >= 0)
		return free_slot;
	if (!uid) {
		/* Root gets in: close another uid's connection idle the longest. */
		victim = idlest(d);
		if (victim >= 0) {
			moem_warn("control client %llu (uid %u) idle for %.1f s: closed to let "
				  "root in",
				  (unsigned long long)d->clients[victim]->serial,
				  (unsigned int)d->clients[victim]->uid,
				  (double)(moem_now_ns() - d->clients[victim]->last_ns) / 1e9);
			client_free(d, victim);
			return victim;
		}
	}
	snprintf(why, len, "too many control connections (%u)", used);
	return -1;
}

void moemd_server_accept(struct moemd *d)
{
	for (;;) {
		struct moemd_client *c;
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		char why[128];
		int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot;

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				moem_warn("accept: %s", strerror(errno));
			return;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl)) {
			/* Unknown peer: treat it as nobody's, never as root. */
			cred.uid = (uid_t)-1;
		}
		slot = admit(d, cred.uid, why, sizeof(why));
		c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			refuse(fd, slot >= 0 ? "out of memory" : why);
			continue;
		}
		c->fd = fd;
		c->uid = cred.uid;
		c->serial = ++d->next_client;
		c->last_ns = moem_now_ns();
		moem_ctl_lines_init(&c->in, MOEM_CTL_LINE_MAX);
		d->clients[slot] = c;
	}
}

void moemd_server_reap_idle(struct moemd *d, uint64_t now)
{
	uint64_t tmo = (uint64_t)d->cfg.idle_timeout_ms * 1000000;

	if (!tmo)
		return;
	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
		struct moemd_client *c = d->clients[i];

		if (!c || c->pending || c->out_len || now - c->last_ns < tmo)
			continue;
		moem_dbg("control client %llu (uid %u) idle for %u ms: closing it",
			 (unsigned long long)c->serial, (unsigned int)c->uid,
			 d->cfg.idle_timeout_ms);
		client_free(d, i);
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
	c->last_ns = moem_now_ns();
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
	for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++)
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

	if (!c->rd_closed && (revents & (POLLIN | POLLHUP | POLLERR))) {
		for (int rounds = 0; rounds < 8 && !c->close_after_flush; rounds++) {
			ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
			if (n < 0) {
				alive = false; /* reset: answers to it are dropped */
				break;
			}
			if (n == 0) {
				/* EOF: the peer may still read (shutdown(SHUT_WR),
				 * nc -N). A last line without its newline is a
				 * request too; answer everything, then close. */
				c->rd_closed = true;
				if (c->in.len > c->in.skip && !moem_ctl_lines_feed(&c->in, "\n", 1))
					client_requests(d, c);
				break;
			}
			c->last_ns = moem_now_ns();
			if (moem_ctl_lines_feed(&c->in, buf, (size_t)n)) {
				/* Only an over-long line gets here: next() says so. */
				client_requests(d, c);
				break;
			}
			client_requests(d, c);
		}
	}
	/* POLLHUP: the peer closed both ways and cannot read an answer. */
	if (alive && (revents & (POLLERR | POLLHUP)))
		alive = false;
	if (alive)
		alive = client_flush(c);
	if (alive && (c->close_after_flush || (c->rd_closed && !c->pending)) && !c->out_len)
		alive = false;
	if (!alive && slot >= 0)
		client_free(d, slot);
	return alive;
}

/* A job's answer was queued (or its client left): close a half-closed
 * client once everything it asked for is answered and sent. */
void moemd_client_settle(struct moemd *d, struct moemd_client *c)
{
	moemd_client_io(d, c, 0);
}

void moemd_server_flush(struct moemd *d, int ms)
{
	uint64_t end = moem_now_ns() + (uint64_t)ms * 1000000;

	for (;;) {
		struct pollfd p[MOEMD_CLIENT_SLOTS];
		int n = 0;

		for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
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
