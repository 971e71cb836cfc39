// SPDX-License-Identifier: GPL-2.0-only
/*
 * systemd's readiness and watchdog protocol (sd_notify(3)) spoken
 * directly: one datagram of "KEY=VALUE\n" lines to the AF_UNIX socket
 * named by $NOTIFY_SOCKET ('@' = abstract namespace). No libsystemd, so
 * the statically linked test build behaves like the packaged one. Without
 * $NOTIFY_SOCKET every call is a no-op.
 *
 * The watchdog thread sends WATCHDOG=1 every WATCHDOG_USEC/2 while the
 * event loop has completed a pass within the last WATCHDOG_USEC: a loop
 * stuck for longer lets systemd kill and restart the daemon.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <moem/util.h>

#include "moemd.h"

void moemd_notify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t salen;
	char msg[512];
	va_list ap;
	size_t n;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	n = strlen(path);
	if (n >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = 0;
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0)
		moem_dbg("sd_notify '%s': %s", msg, strerror(errno));
	close(fd);
}

static void *watchdog_main(void *arg)
{
	struct moemd *d = arg;
	int period_ms = (int)moem_max(d->watchdog_usec / 2000, 1);
	bool warned = false;

	for (;;) {
		struct pollfd p = {.fd = d->watchdog_efd, .events = POLLIN};
		uint64_t beat;

		if (poll(&p, 1, period_ms) > 0)
			break;
		beat = __atomic_load_n(&d->heartbeat_ns, __ATOMIC_ACQUIRE);
		if (moem_now_ns() - beat < d->watchdog_usec * 1000) {
			moemd_notify("WATCHDOG=1");
			warned = false;
		} else if (!warned) {
			moem_err("event loop stalled for %.1f s: not petting the watchdog",
				 (double)(moem_now_ns() - beat) / 1e9);
			warned = true;
		}
	}
	return NULL;
}

int moemd_watchdog_start(struct moemd *d)
{
	const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	unsigned long long u;
	char *end;

	if (!usec || !getenv("NOTIFY_SOCKET"))
		return 0;
	if (pid && strtoll(pid, NULL, 10) != getpid())
		return 0; /* meant for another process */
	errno = 0;
	u = strtoull(usec, &end, 10);
	if (errno || *end || !u) {
		moem_warn("ignoring WATCHDOG_USEC='%s'", usec);
		return 0;
	}
	d->watchdog_usec = u;
	d->watchdog_efd = eventfd(0, EFD_CLOEXEC);
	if (d->watchdog_efd < 0)
		return -errno;
	if (pthread_create(&d->watchdog, NULL, watchdog_main, d)) {
		close(d->watchdog_efd);
		d->watchdog_efd = -1;
		return -EAGAIN;
	}
	d->watchdog_started = true;
	moem_info("systemd watchdog: WATCHDOG=1 every %.1f s while the event loop is healthy",
		  (double)u / 2e6);
	return 0;
}

void moemd_watchdog_stop(struct moemd *d)
{
	uint64_t one = 1;

	if (!d->watchdog_started)
		return;
	if (write(d->watchdog_efd, &one, sizeof(one)) != sizeof(one))
		moem_warn("watchdog: cannot wake the thread");
	pthread_join(d->watchdog, NULL);
	close(d->watchdog_efd);
	d->watchdog_started = false;
}
