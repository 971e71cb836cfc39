// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd's HTTP listener under bad input, on the test build whose model is
 * tests/serve/fake_model.c (the model does not matter here): malformed
 * JSON, invalid UTF-8, huge bodies (413, with and without a length),
 * header floods (431), a client that sends half a request and stops, a
 * stream whose client never reads, a client that leaves while its answer
 * is computed, a full queue (429 with Retry-After) and 10,000 connections
 * opened and dropped. After each, /health must still answer 200 and
 * /metrics show nothing left running.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "daemon_util.h"
#include "kselftest_harness.h"

static const char *fake_binary(void)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/tests/serve/moemd-fakemodel",
		 getenv("MOEM_BUILD") ? getenv("MOEM_BUILD") : "build");
	return path;
}

/* The port from moemd's log line "OpenAI API on http://127.0.0.1:PORT/v1". */
static int wait_port(struct dmn *d, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;
	char buf[8192];

	while (dmn_ms() < end && !dmn_exited(d)) {
		FILE *f = fopen(d->log, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		char *p;

		if (f)
			fclose(f);
		buf[n] = 0;
		p = strstr(buf, "OpenAI API on http://127.0.0.1:");
		if (p)
			return atoi(p + strlen("OpenAI API on http://127.0.0.1:"));
		dmn_sleep_ms(5);
	}
	return -1;
}

/*
 * rcvbuf > 0 caps the receive buffer before connecting, so the kernel turns
 * off its autotuning: a client that never reads then holds kilobytes, not
 * the megabytes loopback autotuning allows (tcp_rmem max), and the server's
 * own buffer is what fills.
 */
static int tcp_buf(int port, int rcvbuf)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf))) {
		close(fd);
		return -1;
	}
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static int tcp(int port)
{
	return tcp_buf(port, 0);
}

/* Read until the server closes (Connection: close) or the deadline. */
static size_t read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;
	size_t len = 0;

	while (len + 1 < cap && dmn_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recv(fd, buf + len, cap - 1 - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	return len;
}

/* One request (its head ends with Connection: close); the status, the answer in out. */
static int request(int port, const char *head, const void *body, size_t blen, char *out, size_t cap)
{
	int fd = tcp(port), status = -1;

	if (fd < 0)
		return -1;
	if (send(fd, head, strlen(head), MSG_NOSIGNAL) >= 0 &&
	    (!blen || send(fd, body, blen, MSG_NOSIGNAL) >= 0)) {
		read_all(fd, out, cap, 30000);
		if (!strncmp(out, "HTTP/1.1 ", 9))
			status = atoi(out + 9);
	}
	close(fd);
	return status;
}

static int post(int port, const char *path, const char *json, char *out, size_t cap)
{
	char head[512];

	snprintf(head, sizeof(head),
		 "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		 path, strlen(json));
	return request(port, head, json, strlen(json), out, cap);
}

static int get(int port, const char *path, char *out, size_t cap)
{
	char head[256];

	snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		 path);
	return request(port, head, NULL, 0, out, cap);
}

/* A metric's value from /metrics (-1 if absent). */
static double metric(int port, const char *name)
{
	static char buf[65536];
	char key[128], *p;

	if (get(port, "/metrics", buf, sizeof(buf)) != 200)
		return -1;
	snprintf(key, sizeof(key), "\n%s ", name);
	p = strstr(buf, key);
	return p ? atof(p + strlen(key)) : -1;
}

/*
 * Wait until a counter reaches at least want. A request just sent may not
 * be parsed yet, so "nothing running" alone is no proof that it ended.
 */
static bool reaches(int port, const char *name, double want, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;

	while (dmn_ms() < end) {
		if (metric(port, name) >= want)
			return true;
		dmn_sleep_ms(20);
	}
	return false;
}

/* Wait until nothing is running or queued, and no request is live. */
static bool settles(int port, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;

	while (dmn_ms() < end) {
		if (metric(port, "moem_running_sequences") == 0 &&
		    metric(port, "moem_queue_requests") == 0 &&
		    metric(port, "moem_live_requests") == 0)
			return true;
		dmn_sleep_ms(20);
	}
	return false;
}

FIXTURE(http)
{
	char *dir;
	struct dmn d;
	int port;
	char buf[65536];
};

FIXTURE_SETUP(http)
{
	char pack[512];

	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	snprintf(pack, sizeof(pack), "%s/t.moem", self->dir);
	ASSERT_EQ(0, dmn_make_pack(self->dir, pack, 2, 8, 2, 128, 128));
	setenv("MOEMD", fake_binary(), 1);
	ASSERT_EQ(0, dmn_start(&self->d, self->dir, "--pack", pack, "--pool", "thp", "--listen",
			       "127.0.0.1:0", "--http-timeout", "2", "--stream-buffer", "64K",
			       "--max-queue", "2", "--max-batch", "2", "--step-tokens", "64",
			       "--max-body", "64K", NULL));
	self->port = wait_port(&self->d, 60000);
	ASSERT_GT(self->port, 0) TH_LOG("moemd did not listen (log %s)", self->d.log);
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end;) {
		if (get(self->port, "/health", self->buf, sizeof(self->buf)) == 200)
			break;
		dmn_sleep_ms(10);
	}
	ASSERT_EQ(200, get(self->port, "/health", self->buf, sizeof(self->buf)));
}

FIXTURE_TEARDOWN(http)
{
	if (self->d.pid > 0 && !dmn_exited(&self->d)) {
		kill(self->d.pid, SIGTERM);
		for (uint64_t end = dmn_ms() + 20000; !dmn_exited(&self->d) && dmn_ms() < end;)
			dmn_sleep_ms(5);
		if (!dmn_exited(&self->d))
			kill(self->d.pid, SIGKILL);
		EXPECT_TRUE(WIFEXITED(self->d.status) && WEXITSTATUS(self->d.status) == 0);
	}
	/* A sanitizer build (SAN=1) reports at exit, into the log. */
	{
		FILE *f = fopen(self->d.log, "r");
		char line[512];

		while (f && fgets(line, sizeof(line), f)) {
			EXPECT_EQ(NULL, strstr(line, "Sanitizer")) TH_LOG("%s", line);
			/* A failed test shows what the daemon said. */
			if (!_metadata->passed)
				TH_LOG("moemd: %s", line);
		}
		if (f)
			fclose(f);
	}
	dmn_rm_rf(self->dir);
	free(self->dir);
}

static bool healthy(struct __test_metadata *_metadata, FIXTURE_DATA(http) * self)
{
	return get(self->port, "/health", self->buf, sizeof(self->buf)) == 200;
}

TEST_F_TIMEOUT(http, bad_bodies, 120)
{
	static const char invalid_utf8[] = "{\"model\":\"t\",\"prompt\":\"ab\xc3\x28\"}";
	static char big[200 * 1024];
	char head[256];

	EXPECT_EQ(400,
		  post(self->port, "/v1/completions", "{\"model\":", self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"error\""));
	EXPECT_EQ(400,
		  post(self->port, "/v1/completions", "[1,2,3]", self->buf, sizeof(self->buf)));
	EXPECT_EQ(400, post(self->port, "/v1/completions", "", self->buf, sizeof(self->buf)));
	EXPECT_EQ(400,
		  post(self->port, "/v1/completions", invalid_utf8, self->buf, sizeof(self->buf)));
	EXPECT_EQ(
		400,
		post(self->port, "/v1/chat/completions",
		     "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]}",
		     self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"messages[0].content\""));
	/* Too big with a length: refused before it is read. */
	memset(big, 'a', sizeof(big));
	EXPECT_EQ(413, request(self->port,
			       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
			       "204800\r\nConnection: close\r\n\r\n",
			       NULL, 0, self->buf, sizeof(self->buf)));
	/* ... and without one (chunked). */
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
		 "Connection: close\r\n\r\n%x\r\n",
		 (unsigned int)sizeof(big));
	{
		int fd = tcp(self->port);

		ASSERT_GE(fd, 0);
		send(fd, head, strlen(head), MSG_NOSIGNAL);
		send(fd, big, sizeof(big), MSG_NOSIGNAL);
		send(fd, "\r\n0\r\n\r\n", 7, MSG_NOSIGNAL);
		read_all(fd, self->buf, sizeof(self->buf), 30000);
		close(fd);
		EXPECT_EQ(0, strncmp(self->buf + (strncmp(self->buf, "HTTP/1.1 100", 12) ? 0 : 25),
				     "HTTP/1.1 413", 12))
		TH_LOG("%.80s", self->buf);
	}
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, header_flood, 120)
{
	static char flood[256 * 1024];
	size_t n;

	n = (size_t)snprintf(flood, sizeof(flood), "GET /health HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; n + 200 < sizeof(flood); i++)
		n += (size_t)snprintf(flood + n, sizeof(flood) - n, "X-Flood-%d: %0150d\r\n", i, i);
	n += (size_t)snprintf(flood + n, sizeof(flood) - n, "\r\n");
	EXPECT_EQ(431, request(self->port, flood, NULL, 0, self->buf, sizeof(self->buf)));
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, slow_client_is_dropped, 120)
{
	int fd = tcp(self->port);
	uint64_t t0 = dmn_ms();

	ASSERT_GE(fd, 0);
	/* Half a request, then nothing: closed after --http-timeout (2 s). */
	send(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len", 51, MSG_NOSIGNAL);
	EXPECT_TRUE(healthy(_metadata, self));
	read_all(fd, self->buf, sizeof(self->buf), 60000);
	EXPECT_LT(dmn_ms() - t0, 30000u);
	close(fd);
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, unread_stream_and_departed_clients, 120)
{
	const char *stream = "{\"model\":\"t\",\"prompt\":\"never read\",\"max_tokens\":8000,"
			     "\"stream\":true}";
	/* "slow ": the fake model takes 1 ms a step for it (4000 tokens: 4 s). */
	const char *whole = "{\"model\":\"t\",\"prompt\":\"slow gone\",\"max_tokens\":4000}";
	char head[256];
	int fd, fd2;

	/* A stream whose client never reads: cancelled once 64K wait unsent. */
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(stream), stream);
	fd = tcp_buf(self->port, 4096);
	ASSERT_GE(fd, 0);
	send(fd, head, strlen(head), MSG_NOSIGNAL);
	EXPECT_TRUE(reaches(self->port, "moem_requests_cancelled_total", 1, 60000));
	EXPECT_TRUE(settles(self->port, 60000));
	EXPECT_EQ(1.0, metric(self->port, "moem_requests_cancelled_total"));
	/* A client that leaves while its whole answer is computed. */
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(whole), whole);
	fd2 = tcp(self->port);
	ASSERT_GE(fd2, 0);
	send(fd2, head, strlen(head), MSG_NOSIGNAL);
	for (uint64_t end = dmn_ms() + 30000;
	     metric(self->port, "moem_running_sequences") < 1 && dmn_ms() < end;)
		dmn_sleep_ms(5);
	close(fd2);
	EXPECT_TRUE(reaches(self->port, "moem_requests_cancelled_total", 2, 60000));
	EXPECT_TRUE(settles(self->port, 60000));
	EXPECT_EQ(2.0, metric(self->port, "moem_requests_cancelled_total"));
	EXPECT_EQ(1.0, metric(self->port, "moem_client_disconnects_total"));
	close(fd);
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, full_queue_gets_429, 120)
{
	const char *req = "{\"model\":\"t\",\"prompt\":\"q\",\"max_tokens\":3000,\"stream\":true}";
	int fds[8], got429 = 0;
	char head[256];

	/* Batch 2 and queue 2: of 8 long requests at once, some are refused. */
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(req), req);
	for (int i = 0; i < 8; i++) {
		fds[i] = tcp(self->port);
		ASSERT_GE(fds[i], 0);
		send(fds[i], head, strlen(head), MSG_NOSIGNAL);
	}
	for (int i = 0; i < 8; i++) {
		ssize_t n = recv(fds[i], self->buf, 200, 0);

		if (n > 12 && !strncmp(self->buf, "HTTP/1.1 429", 12)) {
			got429++;
			self->buf[n] = 0;
			EXPECT_NE(NULL, strcasestr(self->buf, "Retry-After: "));
		}
		close(fds[i]);
	}
	EXPECT_GE(got429, 1);
	EXPECT_TRUE(settles(self->port, 60000));
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, ten_thousand_connections_dropped, 300)
{
	struct linger rst = {.l_onoff = 1, .l_linger = 0};

	/* Open and drop, 100 at a time; every other batch with a reset. */
	for (int round = 0; round < 100; round++) {
		int fds[100];

		for (int i = 0; i < 100; i++) {
			fds[i] = tcp(self->port);
			ASSERT_GE(fds[i], 0)
			TH_LOG("round %d: connect: %s", round, strerror(errno));
			if (i % 3 == 1)
				send(fds[i], "GET /hea", 8, MSG_NOSIGNAL);
		}
		for (int i = 0; i < 100; i++) {
			if (round % 2)
				setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
			close(fds[i]);
		}
	}
	EXPECT_TRUE(healthy(_metadata, self));
	EXPECT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"still here\",\"max_tokens\":4}",
			    self->buf, sizeof(self->buf)));
	EXPECT_FALSE(dmn_exited(&self->d));
}

TEST_HARNESS_MAIN
