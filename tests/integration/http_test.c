// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd's HTTP listener under bad input, on moemd itself with the real
 * decoder: malformed JSON, invalid UTF-8, huge bodies (413, with and
 * without a length), header floods (431), a client that sends half a
 * request and stops, a stream whose client never reads, a client that
 * leaves while its answer is computed, a full queue (429 with
 * Retry-After) and 10,000 connections opened and dropped. After each,
 * /health must still answer 200 and /metrics show nothing left running.
 *
 * The pack is a tiny synthetic model (2 layers, hidden 128) with a real
 * tokenizer.json written here: GPT-2's byte-level BPE over the 256 byte
 * tokens and no merges, loaded by moem's own tokenizer like any other.
 * The model has no end-of-sequence id, so every answer runs to its
 * max_tokens and long requests are surely still running when a test acts.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <json-c/json.h>

#include <moem/openai.h>

#include "daemon_util.h"
#include "kselftest_harness.h"

/* GPT-2's byte -> character map: printable Latin-1 bytes stay, the rest
 * move to U+0100 and up, in byte order. */
static uint32_t byte_char(uint32_t b)
{
	uint32_t n = 0;

	if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
		return b;
	for (uint32_t x = 0; x < b; x++)
		if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) ||
		      (x >= 0xae && x <= 0xff)))
			n++;
	return 256 + n;
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int ret = f && fputs(text, f) >= 0 ? 0 : -EIO;

	if (f && fclose(f))
		ret = -EIO;
	return ret;
}

/* tokenizer.json and tokenizer_config.json (a plain chat template) into dir. */
static int write_tokenizer(const char *dir)
{
	static const char *const cfg =
		"{\"chat_template\": \"{% for m in messages %}{{ m.role }}: {{ m.content }}\\n"
		"{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}\"}\n";
	struct json_object *root = json_object_new_object(), *model = json_object_new_object(),
			   *vocab = json_object_new_object(), *pre = json_object_new_object(),
			   *dec = json_object_new_object();
	char path[600];
	int ret;

	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = byte_char(b);
		char u[3] = {0};

		if (c < 0x80) {
			u[0] = (char)c;
		} else {
			u[0] = (char)(0xc0 | (c >> 6));
			u[1] = (char)(0x80 | (c & 0x3f));
		}
		json_object_object_add(vocab, u, json_object_new_int((int)b));
	}
	json_object_object_add(model, "type", json_object_new_string("BPE"));
	json_object_object_add(model, "vocab", vocab);
	json_object_object_add(model, "merges", json_object_new_array());
	json_object_object_add(pre, "type", json_object_new_string("ByteLevel"));
	json_object_object_add(pre, "add_prefix_space", json_object_new_boolean(false));
	json_object_object_add(pre, "use_regex", json_object_new_boolean(true));
	json_object_object_add(dec, "type", json_object_new_string("ByteLevel"));
	json_object_object_add(root, "version", json_object_new_string("1.0"));
	json_object_object_add(root, "added_tokens", json_object_new_array());
	json_object_object_add(root, "normalizer", NULL);
	json_object_object_add(root, "pre_tokenizer", pre);
	json_object_object_add(root, "post_processor", NULL);
	json_object_object_add(root, "decoder", dec);
	json_object_object_add(root, "model", model);
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	ret = json_object_to_file_ext(path, root, JSON_C_TO_STRING_PLAIN) ? -EIO : 0;
	json_object_put(root);
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	if (!ret)
		ret = write_file(path, cfg);
	return ret;
}

/*
 * A three-token model's tokenizer (words): two added tokens that are not
 * special (the tool-call model's: a whole tool call each) and the unknown
 * token (special: no text), which is also every character of a prompt.
 * Whatever the random model picks, its answer is those words in the order
 * of its tokens; the chat template asks for <tool_call> and shows the
 * tools.
 */
#define CALL_F "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
#define CALL_G "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": 1}}\n</tool_call>"

static const char *const tool_words[] = {CALL_F, CALL_G, "<unk>"};

static int write_word_tokenizer(const char *dir, const char *const *added)
{
	static const char *const cfg =
		"{\"chat_template\": \"{% if tools %}{{ tools | tojson }}: answer with "
		"<tool_call>\\n{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\\n"
		"{% endfor %}assistant:\"}\n";
	struct json_object *root = json_object_new_object(), *model = json_object_new_object(),
			   *vocab = json_object_new_object(), *toks = json_object_new_array(),
			   *dec = json_object_new_object();
	char path[600];
	int ret;

	for (int i = 0; i < 3; i++) {
		struct json_object *t = json_object_new_object();

		json_object_object_add(vocab, added[i], json_object_new_int(i));
		json_object_object_add(t, "id", json_object_new_int(i));
		json_object_object_add(t, "content", json_object_new_string(added[i]));
		json_object_object_add(t, "single_word", json_object_new_boolean(false));
		json_object_object_add(t, "lstrip", json_object_new_boolean(false));
		json_object_object_add(t, "rstrip", json_object_new_boolean(false));
		json_object_object_add(t, "normalized", json_object_new_boolean(false));
		json_object_object_add(t, "special", json_object_new_boolean(i == 2));
		json_object_array_add(toks, t);
	}
	json_object_object_add(model, "type", json_object_new_string("BPE"));
	json_object_object_add(model, "vocab", vocab);
	json_object_object_add(model, "merges", json_object_new_array());
	json_object_object_add(model, "unk_token", json_object_new_string("<unk>"));
	json_object_object_add(root, "version", json_object_new_string("1.0"));
	json_object_object_add(root, "added_tokens", toks);
	json_object_object_add(root, "normalizer", NULL);
	json_object_object_add(root, "pre_tokenizer", NULL);
	json_object_object_add(root, "post_processor", NULL);
	/* Fuse: the words joined as they are (no decoder would join them with spaces) */
	json_object_object_add(dec, "type", json_object_new_string("Fuse"));
	json_object_object_add(root, "decoder", dec);
	json_object_object_add(root, "model", model);
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	ret = json_object_to_file_ext(path, root, JSON_C_TO_STRING_PLAIN) ? -EIO : 0;
	json_object_put(root);
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	if (!ret)
		ret = write_file(path, cfg);
	return ret;
}

/* The tiny pack: mkmodel, the tokenizer beside it, pack. tools: the tool-call model. */
static int make_pack_as(const char *dir, const char *path, uint32_t hidden,
			const char *const *words)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	char model[512];
	int ret;

	snprintf(model, sizeof(model), "%s/model", dir);
	moem_mkmodel_defaults(&mo, MOEM_PRESET_QWEN3_30B_A3B);
	mo.cfg.n_layers = 2;
	mo.cfg.n_experts = 8;
	mo.cfg.top_k = 2;
	mo.cfg.hidden = hidden;
	mo.cfg.moe_inter = 128;
	mo.cfg.dense_inter = 128;
	mo.cfg.vocab = words ? 3 : 256;
	mo.cfg.n_heads = 4;
	mo.cfg.n_kv_heads = 2;
	mo.cfg.head_dim = 32;
	mo.cfg.n_eos = 0;
	mo.cfg.max_pos = 32768; /* room for streams longer than any socket buffer */
	mo.threads = 2;
	mo.out_dir = model;
	ret = moem_mkmodel(&mo);
	if (!ret)
		ret = words ? write_word_tokenizer(model, words) : write_tokenizer(model);
	if (!ret) {
		po.model_dir = model;
		po.out_path = path;
		po.prec_mask = 1u << MOEM_PREC_BF16;
		po.threads = 2;
		ret = moem_pack_write(&po);
	}
	dmn_rm_rf(model);
	return ret;
}

static int make_pack(const char *dir, const char *path, uint32_t hidden)
{
	return make_pack_as(dir, path, hidden, NULL);
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
	if (fd >= 0 && rcvbuf > 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf))) {
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

/*
 * The tiny pack in dir and moemd serving it on a free port with args
 * (NULL-terminated); the port once /health answers 200, else -1.
 */
static int serve_tiny_as(struct dmn *d, const char *dir, const char *const *args,
			 const char *const *words, char *buf, size_t cap)
{
	const char *argv[32] = {"--pack", NULL, "--pool", "thp", "--listen", "127.0.0.1:0"};
	char pack[512];
	size_t n = 6;
	int port;

	snprintf(pack, sizeof(pack), "%s/t.moem", dir);
	argv[1] = pack;
	for (; *args && n + 1 < MOEM_ARRAY_SIZE(argv); args++)
		argv[n++] = *args;
	if (make_pack_as(dir, pack, 128, words) || dmn_start_argv(d, dir, argv))
		return -1;
	port = wait_port(d, 60000);
	for (uint64_t end = dmn_ms() + 60000; port > 0 && dmn_ms() < end; dmn_sleep_ms(10))
		if (get(port, "/health", buf, cap) == 200)
			return port;
	return -1;
}

static int serve_tiny(struct dmn *d, const char *dir, const char *const *args, char *buf,
		      size_t cap)
{
	return serve_tiny_as(d, dir, args, NULL, buf, cap);
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
	const char *const args[] = {"--http-timeout",
				    "2",
				    "--stream-buffer",
				    "64K",
				    "--max-queue",
				    "2",
				    "--max-batch",
				    "2",
				    "--step-tokens",
				    "64",
				    "--max-body",
				    "64K",
				    NULL};

	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	self->port = serve_tiny(&self->d, self->dir, args, self->buf, sizeof(self->buf));
	ASSERT_GT(self->port, 0)
	TH_LOG("moemd did not serve (%s; log %s)", moem_last_error(), self->d.log);
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

TEST_F_TIMEOUT(http, unread_stream_and_departed_clients, 600)
{
	/* Long enough to outlast the socket buffers and the 64K stream buffer. */
	const char *stream = "{\"model\":\"t\",\"prompt\":\"never read\",\"max_tokens\":20000,"
			     "\"stream\":true}";
	/* Long enough to be running still when its client leaves. */
	const char *whole = "{\"model\":\"t\",\"prompt\":\"gone\",\"max_tokens\":20000}";
	char head[256];
	double gone;
	int fd, fd2;

	/* A stream whose client never reads: cancelled once 64K wait unsent. */
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(stream), stream);
	fd = tcp_buf(self->port, 4096);
	ASSERT_GE(fd, 0);
	send(fd, head, strlen(head), MSG_NOSIGNAL);
	/* (generous: on a machine busy with QEMU guests filling 64K took over a minute) */
	EXPECT_TRUE(reaches(self->port, "moem_requests_cancelled_total", 1, 300000));
	EXPECT_TRUE(settles(self->port, 60000));
	EXPECT_EQ(1.0, metric(self->port, "moem_requests_cancelled_total"));
	/*
	 * Which limit ends it depends on the machine's speed: the 64K stream
	 * buffer, or the 2 s --http-timeout first when the model is slow to
	 * fill it (libmicrohttpd then closes the socket, and the step
	 * boundary sees a disconnect). Either is right; count from here.
	 */
	gone = metric(self->port, "moem_client_disconnects_total");
	EXPECT_GE(gone, 0.0);
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
	EXPECT_EQ(gone + 1, metric(self->port, "moem_client_disconnects_total"));
	close(fd);
	EXPECT_TRUE(healthy(_metadata, self));
}

TEST_F_TIMEOUT(http, full_queue_gets_429, 120)
{
	/* Long enough to be running still when the last of the 8 is sent,
	 * however slowly this test runs; closing them cancels them. */
	const char *req = "{\"model\":\"t\",\"prompt\":\"q\",\"max_tokens\":20000,\"stream\":true}";
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

/*
 * kv_bytes set live over the control socket: status shows the knob at
 * once, the decoder's KV pool follows at its next step (status's
 * serving.kv_budget and /metrics), and a value below one KV block is
 * refused with a message naming it, the knob unchanged.
 */
TEST_F_TIMEOUT(http, kv_bytes_live, 120)
{
	/* one block: 2 layers x 16 tokens x K and V of 2 heads x 32 x 4 bytes */
	const uint64_t block = 2 * 16 * 2 * 2 * 32 * 4, want = 4 * block;
	struct json_object *r;
	int ret;

	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_EQ(0, dmn_u64(r, "budgets.kv_bytes")); /* unset: the decoder sizes the pool */
	EXPECT_GT(dmn_u64(r, "serving.kv_budget"), want);
	json_object_put(r);

	/* more than the machine could hold is refused, not taken and then
	 * failed (or aborted) at the next sequence's allocation */
	r = NULL;
	EXPECT_NE(0,
		  dmn_call(&self->d, "set", dmn_args("knob", "kv_bytes", "value", "1T", NULL), &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "memory")) TH_LOG("%s", moem_last_error());
	json_object_put(r);

	ASSERT_EQ(0,
		  dmn_call(&self->d, "set", dmn_args("knob", "kv_bytes", "value", "64K", NULL), &r))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(want, dmn_u64(r, "value"));
	EXPECT_STREQ("before the next decode step", dmn_str(r, "applied"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_EQ(want, dmn_u64(r, "budgets.kv_bytes"));
	json_object_put(r);

	/* a request: the step it takes applies the budget */
	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hi\",\"max_tokens\":4}", self->buf,
			    sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_EQ(want, dmn_u64(r, "serving.kv_budget"));
	json_object_put(r);
	EXPECT_EQ((double)want, metric(self->port, "moem_budget_bytes{tier=\"kv\"}"));
	EXPECT_EQ((double)want, metric(self->port, "moem_knob{name=\"kv_bytes\"}"));
	/* the DRAM tier per NUMA node (this machine: node 0 only) */
	EXPECT_GT(metric(self->port, "moem_dram_node_bytes{node=\"0\",state=\"used\"}"), 0);
	EXPECT_EQ(0, metric(self->port, "moem_dram_node_fallback_total"));
	/* the request's MoE layers were routed on the engine thread */
	EXPECT_GT(metric(self->port, "moem_engine_phase_seconds_total{phase=\"route\"}"), 0);

	moem_clear_error();
	ret = dmn_call(&self->d, "set", dmn_args("knob", "kv_bytes", "value", "1000", NULL), &r);
	json_object_put(r);
	EXPECT_EQ(-ERANGE, ret);
	EXPECT_NE(NULL, strstr(moem_last_error(), "16384-byte block"))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, dmn_call(&self->d, "get", dmn_args("knob", "kv_bytes", NULL), &r));
	EXPECT_EQ(want, dmn_u64(r, "value"));
	json_object_put(r);
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

/* The body of a chunked answer (after its head), joined, into out. */
static size_t dechunk(const char *resp, char *out, size_t cap)
{
	const char *p = strstr(resp, "\r\n\r\n");
	size_t n = 0;

	if (!p)
		return 0;
	for (p += 4;;) {
		char *end;
		unsigned long sz = strtoul(p, &end, 16);

		if (end == p || !sz || strncmp(end, "\r\n", 2))
			break;
		p = end + 2;
		if (strlen(p) < sz || n + sz >= cap)
			break;
		memcpy(out + n, p, sz);
		n += sz;
		p += sz + 2;
	}
	out[n] = 0;
	return n;
}

/* choices[0].logprobs of an answer's JSON (a new reference) */
static struct json_object *logprobs_of(struct json_object *o)
{
	struct json_object *c = json_object_array_get_idx(json_object_object_get(o, "choices"), 0);

	return json_object_get(json_object_object_get(c, "logprobs"));
}

/* choices[0].logprobs.content of a chat answer (borrowed from o) */
static struct json_object *logprobs_content(struct json_object *o)
{
	struct json_object *lp = logprobs_of(o), *a = json_object_object_get(lp, "content");

	json_object_put(lp); /* o still holds it */
	return a;
}

/*
 * Logprobs give each token's own bytes (OpenAI's "bytes"), also where a
 * character is split over tokens: with this tokenizer every token is one
 * byte, and the model's bytes >= 0x80 are no character alone (U+FFFD's
 * three bytes were given before). text_offset counts those bytes, the same
 * streamed and whole.
 */
TEST_F_TIMEOUT(http, logprobs_are_each_tokens_bytes, 120)
{
	static char body[65536], joined[256];
	struct json_object *o, *lp, *a;
	size_t n, high = 0;

	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],"
		       "\"max_tokens\":32,\"temperature\":0,\"logprobs\":true}",
		       self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	lp = logprobs_of(o);
	a = json_object_object_get(lp, "content");
	n = json_object_array_length(a);
	ASSERT_EQ(32, n);
	for (size_t i = 0; i < n; i++) {
		struct json_object *b =
			json_object_object_get(json_object_array_get_idx(a, i), "bytes");

		ASSERT_EQ(1, json_object_array_length(b)) TH_LOG("token %zu", i);
		joined[i] = (char)json_object_get_int(json_object_array_get_idx(b, 0));
		high += (unsigned char)joined[i] >= 0x80;
	}
	joined[n] = 0;
	EXPECT_GT(high, 0) TH_LOG("no byte >= 0x80 in the answer: the case is not exercised");
	if (moem_oai_utf8_ok(joined, n))
		EXPECT_STREQ(joined,
			     json_object_get_string(json_object_object_get(
				     json_object_object_get(
					     json_object_array_get_idx(
						     json_object_object_get(o, "choices"), 0),
					     "message"),
				     "content")));
	json_object_put(lp);
	json_object_put(o);

	/* completions, streamed: the offsets 0, 1, 2, ... of one-byte tokens */
	ASSERT_EQ(200,
		  post(self->port, "/v1/completions",
		       "{\"model\":\"t\",\"prompt\":\"hello\",\"max_tokens\":24,\"temperature\":0,"
		       "\"logprobs\":1,\"stream\":true}",
		       self->buf, sizeof(self->buf)));
	dechunk(self->buf, body, sizeof(body));
	n = 0;
	for (char *ev = strstr(body, "data: {"); ev; ev = strstr(ev + 1, "data: {")) {
		char *end = strstr(ev, "\n\n");

		ASSERT_NE(NULL, end);
		*end = 0;
		o = json_tokener_parse(ev + 6);
		*end = '\n';
		ASSERT_NE(NULL, o) TH_LOG("%s", ev);
		lp = logprobs_of(o);
		a = json_object_object_get(lp, "text_offset");
		for (size_t i = 0; i < json_object_array_length(a); i++, n++)
			EXPECT_EQ(n, json_object_get_int(json_object_array_get_idx(a, i)))
		TH_LOG("offset of token %zu", n);
		json_object_put(lp);
		json_object_put(o);
	}
	EXPECT_EQ(24, n);
}

/*
 * A request without max_tokens (chat's default) under a KV budget smaller
 * than the context: it runs to what the budget holds for one sequence
 * instead of being refused for the whole context's blocks.
 */
TEST_F_TIMEOUT(http, default_length_fits_the_kv_budget, 120)
{
	struct json_object *r = NULL, *o;

	/* 4 blocks of 16 tokens (kv_bytes_live: one block is 16384 bytes) */
	ASSERT_EQ(0,
		  dmn_call(&self->d, "set", dmn_args("knob", "kv_bytes", "value", "64K", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		       self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	/* no end-of-sequence id: it ran to the budget's 64 tokens, prompt included */
	EXPECT_EQ(64, json_object_get_int(json_object_object_get(json_object_object_get(o, "usage"),
								 "total_tokens")))
	TH_LOG("%s", self->buf);
	json_object_put(o);
	EXPECT_TRUE(settles(self->port, 60000));
}

/*
 * SIGTERM with a whole answer and a stream in progress: each client gets
 * an end it can see (503 with an error body; an error event, [DONE] and
 * the chunked body's end), not a closed socket, and moemd exits 0.
 */
TEST_F_TIMEOUT(http, shutdown_ends_requests_with_an_error, 120)
{
	const char *whole = "{\"model\":\"t\",\"prompt\":\"w\",\"max_tokens\":20000}";
	const char *stream = "{\"model\":\"t\",\"prompt\":\"s\",\"max_tokens\":20000,"
			     "\"stream\":true}";
	static char got[2][1 << 20];
	const char *body[2] = {whole, stream};
	char head[256];
	int fd[2];

	for (int i = 0; i < 2; i++) {
		snprintf(head, sizeof(head),
			 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s",
			 strlen(body[i]), body[i]);
		fd[i] = tcp(self->port);
		ASSERT_GE(fd[i], 0);
		ASSERT_EQ((ssize_t)strlen(head), send(fd[i], head, strlen(head), MSG_NOSIGNAL));
	}
	/* both running (batch 2) */
	for (uint64_t end = dmn_ms() + 60000;
	     metric(self->port, "moem_running_sequences") < 2 && dmn_ms() < end;)
		dmn_sleep_ms(5);
	ASSERT_EQ(2, metric(self->port, "moem_running_sequences"));
	kill(self->d.pid, SIGTERM);
	for (int i = 0; i < 2; i++) {
		read_all(fd[i], got[i], sizeof(got[i]), 30000);
		close(fd[i]);
	}
	ASSERT_EQ(0, dmn_wait_exit(&self->d, 20000));
	EXPECT_EQ(0, dmn_exit_code(&self->d));
	EXPECT_EQ(0, strncmp(got[0], "HTTP/1.1 503", 12)) TH_LOG("%.300s", got[0]);
	EXPECT_NE(NULL, strstr(got[0], "shutting down")) TH_LOG("%.300s", got[0]);
	EXPECT_EQ(0, strncmp(got[1], "HTTP/1.1 200", 12)) TH_LOG("%.300s", got[1]);
	EXPECT_NE(NULL, strstr(got[1], "data: {\"error\"")) TH_LOG("%.300s", got[1]);
	EXPECT_NE(NULL, strstr(got[1], "data: [DONE]"));
	EXPECT_TRUE(strlen(got[1]) > 5 && !strcmp(got[1] + strlen(got[1]) - 5, "0\r\n\r\n"))
	TH_LOG("the stream's end: %s", got[1] + (strlen(got[1]) > 80 ? strlen(got[1]) - 80 : 0));
}

/* A word model's fixture teardown: moemd stopped (exit 0), its log shown on failure. */
static void word_teardown(struct __test_metadata *_metadata, struct dmn *d, char *dir)
{
	if (d->pid > 0 && !dmn_exited(d)) {
		kill(d->pid, SIGTERM);
		if (dmn_wait_exit(d, 20000))
			kill(d->pid, SIGKILL);
		EXPECT_EQ(0, dmn_exit_code(d));
	}
	if (!_metadata->passed && d->pid > 0)
		dmn_dump_log(d);
	dmn_rm_rf(dir);
	free(dir);
}

/*
 * Clients that leave are noticed among hundreds of live requests: 300
 * long whole-answer requests (2 running, the rest queued), then the 40
 * sent first hang up. Each is counted and cancelled at a step boundary;
 * the oldest are as visible as the newest.
 */
FIXTURE(many)
{
	char *dir;
	struct dmn d;
	int port;
	char buf[65536];
};

FIXTURE_SETUP(many)
{
	const char *const args[] = {"--max-queue",   "512", "--max-batch", "2",
				    "--step-tokens", "64",  NULL};

	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	self->port = serve_tiny(&self->d, self->dir, args, self->buf, sizeof(self->buf));
	ASSERT_GT(self->port, 0)
	TH_LOG("moemd did not serve (%s; log %s)", moem_last_error(), self->d.log);
}

FIXTURE_TEARDOWN(many)
{
	word_teardown(_metadata, &self->d, self->dir);
}

TEST_F_TIMEOUT(many, departed_clients_found_among_hundreds, 300)
{
	const char *req = "{\"model\":\"t\",\"prompt\":\"m\",\"max_tokens\":20000}";
	enum { N = 300, GONE = 40 };
	static int fd[N];
	char head[256];

	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(req), req);
	for (int i = 0; i < N; i++) {
		fd[i] = tcp(self->port);
		ASSERT_GE(fd[i], 0) TH_LOG("connect %d: %s", i, strerror(errno));
		ASSERT_EQ((ssize_t)strlen(head), send(fd[i], head, strlen(head), MSG_NOSIGNAL));
	}
	for (uint64_t end = dmn_ms() + 120000;
	     metric(self->port, "moem_live_requests") < N && dmn_ms() < end;)
		dmn_sleep_ms(20);
	ASSERT_EQ(N, metric(self->port, "moem_live_requests"));
	for (int i = 0; i < GONE; i++)
		close(fd[i]);
	EXPECT_TRUE(reaches(self->port, "moem_client_disconnects_total", GONE, 60000))
	TH_LOG("disconnects seen: %g", metric(self->port, "moem_client_disconnects_total"));
	EXPECT_TRUE(reaches(self->port, "moem_requests_cancelled_total", GONE, 60000));
	EXPECT_EQ(N - GONE, metric(self->port, "moem_live_requests"));
	for (int i = GONE; i < N; i++)
		close(fd[i]);
	EXPECT_TRUE(settles(self->port, 120000));
}

/*
 * Tool calls (chat's tools): a model whose every token is a whole tool call or
 * no text (write_word_tokenizer()), so that the random weights' answer is
 * calls in the order of its tokens. The whole answer, the stream and
 * parallel_tool_calls: false give those calls; tool_choice "none" leaves
 * the tools out of the prompt and the answer as text.
 */
FIXTURE(tools)
{
	char *dir;
	struct dmn d;
	int port;
	char buf[65536];
};

FIXTURE_SETUP(tools)
{
	const char *const args[] = {"--max-batch", "2", "--step-tokens", "64", NULL};

	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	self->port =
		serve_tiny_as(&self->d, self->dir, args, tool_words, self->buf, sizeof(self->buf));
	ASSERT_GT(self->port, 0)
	TH_LOG("moemd did not serve (%s; log %s)", moem_last_error(), self->d.log);
}

FIXTURE_TEARDOWN(tools)
{
	word_teardown(_metadata, &self->d, self->dir);
}

#define TOOLS_JSON                                                                       \
	"[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\"," \
	"\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\"}}}]"

/* The answer's body as JSON (a whole answer), or NULL. */
static struct json_object *answer_json(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");

	return b ? json_tokener_parse(b + 4) : NULL;
}

static struct json_object *choice0(struct json_object *o, const char *key)
{
	return json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), key);
}

/* The calls the tokens of an answer make, by name ("fgf"...), from its logprobs. */
static void calls_of_tokens(struct json_object *o, char *names, size_t cap)
{
	struct json_object *a = json_object_object_get(choice0(o, "logprobs"), "content");
	size_t k = 0;

	for (size_t i = 0; a && i < json_object_array_length(a) && k + 1 < cap; i++) {
		const char *t = json_object_get_string(
			json_object_object_get(json_object_array_get_idx(a, i), "token"));

		if (!strcmp(t, CALL_F))
			names[k++] = 'f';
		else if (!strcmp(t, CALL_G))
			names[k++] = 'g';
	}
	names[k] = 0;
}

static void check_call(struct __test_metadata *_metadata, struct json_object *c, char name)
{
	struct json_object *fn = json_object_object_get(c, "function");
	const char *args = json_object_get_string(json_object_object_get(fn, "arguments"));

	EXPECT_EQ(0, strncmp("call_", json_object_get_string(json_object_object_get(c, "id")), 5));
	EXPECT_STREQ("function", json_object_get_string(json_object_object_get(c, "type")));
	EXPECT_EQ(name, json_object_get_string(json_object_object_get(fn, "name"))[0]);
	EXPECT_STREQ(name == 'f' ? "{}" : "{\"a\":1}", args);
}

/*
 * tool_choice "required" and a named function: the answer is one call in
 * the template's layout, <tool_call>\n{...}\n</tool_call>; of this
 * model's two words only CALL_G is written so, so both constrained
 * answers are that call, whatever the random model prefers (several
 * seeds). What cannot be constrained is refused, naming the field.
 */
TEST_F_TIMEOUT(tools, choice_required_and_named, 180)
{
	static const char *const choices[] = {
		"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"};
	static char req[2048];
	struct json_object *o, *calls;

	for (int c = 0; c < 2; c++) {
		for (int seed = 1; seed <= 4; seed++) {
			snprintf(req, sizeof(req),
				 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
				 "\"go\"}],\"tools\":" TOOLS_JSON ",\"tool_choice\":%s,"
				 "\"max_tokens\":6,\"seed\":%d}",
				 choices[c], seed);
			ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
					    sizeof(self->buf)))
			TH_LOG("%s", self->buf);
			o = answer_json(self->buf);
			ASSERT_NE(NULL, o);
			EXPECT_STREQ("tool_calls",
				     json_object_get_string(choice0(o, "finish_reason")))
			TH_LOG("%s: %s", choices[c], self->buf);
			calls = json_object_object_get(choice0(o, "message"), "tool_calls");
			ASSERT_NE(NULL, calls) TH_LOG("%s: %s", choices[c], self->buf);
			ASSERT_EQ(1u, json_object_array_length(calls));
			check_call(_metadata, json_object_array_get_idx(calls, 0), 'g');
			/* one call, then the answer ends: one token */
			EXPECT_EQ(1, json_object_get_int(json_object_object_get(
					     json_object_object_get(o, "usage"),
					     "completion_tokens")));
			json_object_put(o);
		}
	}
	/* refused, each naming its field */
	{
		static const struct {
			const char *extra, *param, *says;
		} bad[] = {
			{",\"tools\":" TOOLS_JSON ",\"tool_choice\":{\"type\":\"function\","
			 "\"function\":{\"name\":\"h\"}}",
			 "tool_choice.function.name", "'h' is not in 'tools'"},
			{",\"tool_choice\":\"required\"", "tool_choice", "needs 'tools'"},
			{",\"tools\":" TOOLS_JSON ",\"tool_choice\":\"required\","
			 "\"response_format\":{\"type\":\"json_object\"}",
			 "response_format", "both constrain the answer"},
			{",\"tools\":" TOOLS_JSON ",\"tool_choice\":{\"type\":\"function\"}",
			 "tool_choice.function", "must be an object"},
			{",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
			 "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
			 "\"string\",\"pattern\":\"(a\"}}}}}],\"tool_choice\":\"required\"",
			 "tools",
			 "/tools/0/function/parameters/properties/x: 'pattern': a group without "
			 "its ')'"},
		};

		for (size_t i = 0; i < MOEM_ARRAY_SIZE(bad); i++) {
			char p[128];

			snprintf(req, sizeof(req),
				 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
				 "\"go\"}]%s}",
				 bad[i].extra);
			ASSERT_EQ(400, post(self->port, "/v1/chat/completions", req, self->buf,
					    sizeof(self->buf)))
			TH_LOG("%s", req);
			snprintf(p, sizeof(p), "\"param\":\"%s\"", bad[i].param);
			EXPECT_NE(NULL, strstr(self->buf, p)) TH_LOG("%s", self->buf);
			EXPECT_NE(NULL, strstr(self->buf, bad[i].says)) TH_LOG("%s", self->buf);
		}
	}
}

TEST_F_TIMEOUT(tools, calls_whole_streamed_and_one, 180)
{
	static char body[65536], req[1024];
	char names[64] = "", streamed[64] = "";
	struct json_object *o = NULL, *m, *calls;
	int seed, prompt_with;

	/* A seed whose answer makes two calls or more, with no-text tokens among them. */
	for (seed = 1; seed <= 64; seed++) {
		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],"
			 "\"tools\":" TOOLS_JSON ",\"max_tokens\":6,\"seed\":%d,\"logprobs\":true}",
			 seed);
		ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
				    sizeof(self->buf)))
		TH_LOG("%s", self->buf);
		json_object_put(o);
		o = answer_json(self->buf);
		ASSERT_NE(NULL, o);
		calls_of_tokens(o, names, sizeof(names));
		if (strlen(names) >= 2 && strlen(names) < 6)
			break;
	}
	ASSERT_LE(seed, 64) TH_LOG("no seed gave two calls and a token without text");
	m = choice0(o, "message");
	EXPECT_STREQ("tool_calls", json_object_get_string(choice0(o, "finish_reason")));
	EXPECT_TRUE(json_object_object_get_ex(m, "content", &calls) && !calls)
	TH_LOG("content: %s", json_object_to_json_string(m));
	calls = json_object_object_get(m, "tool_calls");
	ASSERT_NE(NULL, calls) TH_LOG("%s", self->buf);
	ASSERT_EQ(strlen(names), json_object_array_length(calls)) TH_LOG("%s", self->buf);
	for (size_t i = 0; i < strlen(names); i++)
		check_call(_metadata, json_object_array_get_idx(calls, i), names[i]);
	prompt_with = json_object_get_int(
		json_object_object_get(json_object_object_get(o, "usage"), "prompt_tokens"));
	json_object_put(o);

	/* The same streamed: the calls arrive in deltas, numbered, then tool_calls. */
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],"
		 "\"tools\":" TOOLS_JSON ",\"max_tokens\":6,\"seed\":%d,\"stream\":true}",
		 seed);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	dechunk(self->buf, body, sizeof(body));
	ASSERT_NE(NULL, strstr(body, "data: [DONE]"));
	for (char *ev = strstr(body, "data: {"); ev; ev = strstr(ev + 1, "data: {")) {
		char *end = strstr(ev, "\n\n");
		struct json_object *d, *f;

		ASSERT_NE(NULL, end);
		*end = 0;
		o = json_tokener_parse(ev + 6);
		*end = '\n';
		ASSERT_NE(NULL, o) TH_LOG("%s", ev);
		d = choice0(o, "delta");
		calls = json_object_object_get(d, "tool_calls");
		for (size_t i = 0; calls && i < json_object_array_length(calls); i++) {
			struct json_object *c = json_object_array_get_idx(calls, i);
			size_t k = strlen(streamed);

			EXPECT_EQ((int)k, json_object_get_int(json_object_object_get(c, "index")));
			check_call(_metadata, c, names[k]);
			streamed[k] = json_object_get_string(json_object_object_get(
				json_object_object_get(c, "function"), "name"))[0];
			streamed[k + 1] = 0;
		}
		f = choice0(o, "finish_reason");
		if (f)
			EXPECT_STREQ("tool_calls", json_object_get_string(f));
		json_object_put(o);
	}
	EXPECT_STREQ(names, streamed);

	/* parallel_tool_calls false: the first call only. */
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],"
		 "\"tools\":" TOOLS_JSON ",\"max_tokens\":6,\"seed\":%d,"
		 "\"parallel_tool_calls\":false}",
		 seed);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	o = answer_json(self->buf);
	ASSERT_NE(NULL, o);
	calls = json_object_object_get(choice0(o, "message"), "tool_calls");
	ASSERT_NE(NULL, calls) TH_LOG("%s", self->buf);
	ASSERT_EQ(1, json_object_array_length(calls)) TH_LOG("%s", self->buf);
	check_call(_metadata, json_object_array_get_idx(calls, 0), names[0]);
	json_object_put(o);

	/* tool_choice none: no tools in the prompt, the answer is text. */
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],"
		 "\"tools\":" TOOLS_JSON ",\"tool_choice\":\"none\",\"max_tokens\":6,"
		 "\"seed\":%d}",
		 seed);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	o = answer_json(self->buf);
	ASSERT_NE(NULL, o);
	EXPECT_FALSE(json_object_object_get_ex(choice0(o, "message"), "tool_calls", NULL));
	EXPECT_NE(NULL,
		  json_object_get_string(json_object_object_get(choice0(o, "message"), "content")));
	/* one token per character, and the tools' JSON is no longer there */
	EXPECT_GT(prompt_with - (int)strlen(TOOLS_JSON) / 2,
		  json_object_get_int(json_object_object_get(json_object_object_get(o, "usage"),
							     "prompt_tokens")));
	json_object_put(o);

	/* A conversation that goes on after a call and its result. */
	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"go\"},"
		       "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
		       "\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
		       "\"{\\\"a\\\": 1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
		       "\"content\":\"ok\"}],\"tools\":" TOOLS_JSON ",\"max_tokens\":2}",
		       self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	EXPECT_TRUE(settles(self->port, 60000));
}

/*
 * logit_bias (this model's token ids are its bytes): -100 keeps the
 * greedy choice from being chosen, 100 makes one token the answer even
 * when sampling; an id outside the vocabulary is refused by name.
 */
TEST_F_TIMEOUT(http, logit_bias_bans_and_forces, 120)
{
	struct json_object *o, *b;
	char req[512];
	int first;

	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		       "\"max_tokens\":1,\"temperature\":0,\"logprobs\":true}",
		       self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	b = json_object_object_get(json_object_array_get_idx(logprobs_content(o), 0), "bytes");
	first = json_object_get_int(json_object_array_get_idx(b, 0));
	json_object_put(o);
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		 "\"max_tokens\":1,\"temperature\":0,\"logprobs\":true,"
		 "\"logit_bias\":{\"%d\":-100}}",
		 first);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	b = json_object_object_get(json_object_array_get_idx(logprobs_content(o), 0), "bytes");
	EXPECT_NE(first, json_object_get_int(json_object_array_get_idx(b, 0)));
	json_object_put(o);

	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hi\",\"max_tokens\":8,\"seed\":3,"
			    "\"logit_bias\":{\"120\":100}}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"text\":\"xxxxxxxx\"")) TH_LOG("%s", self->buf);
	ASSERT_EQ(400, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hi\",\"max_tokens\":2,"
			    "\"logit_bias\":{\"300\":1}}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"logit_bias.300\"")) TH_LOG("%s", self->buf);
}

/* 2: text is one JSON object (strict), 1: a valid start of one, 0: neither. */
static int json_state(const char *text)
{
	struct json_tokener *tok = json_tokener_new_ex(64);
	struct json_object *o;
	enum json_tokener_error err;
	int ret;

	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	err = json_tokener_get_error(tok);
	ret = err == json_tokener_continue ? 1
	      : err == json_tokener_success && json_object_is_type(o, json_type_object) &&
			      json_tokener_get_parse_end(tok) == strlen(text)
		      ? 2
		      : 0;
	json_object_put(o);
	json_tokener_free(tok);
	return ret;
}

/* choices[0] of an answer's JSON body (borrowed from o) */
static struct json_object *first_choice(struct json_object *o)
{
	return json_object_array_get_idx(json_object_object_get(o, "choices"), 0);
}

/* A chat stream's response: its chunks' content joined into out (0), or -1 if an event is no JSON. */
static int stream_content(const char *resp, char *body, size_t bcap, char *out, size_t cap)
{
	out[0] = 0;
	dechunk(resp, body, bcap);
	for (char *ev = strstr(body, "data: {"); ev; ev = strstr(ev + 1, "data: {")) {
		char *end = strstr(ev, "\n\n");
		struct json_object *o, *d, *t;

		if (!end)
			return -1;
		*end = 0;
		o = json_tokener_parse(ev + 6);
		*end = '\n';
		if (!o)
			return -1;
		d = json_object_object_get(first_choice(o), "delta");
		if (json_object_object_get_ex(d, "content", &t) && t)
			strncat(out, json_object_get_string(t), cap - strlen(out) - 1);
		json_object_put(o);
	}
	return 0;
}

/*
 * response_format json_object: whatever the random model would say, the
 * answer is one JSON object (finish_reason stop the moment it closes), or
 * the start of one when max_tokens ends it first; streamed, the same text.
 * logit_bias makes closing likely, so that most answers are whole.
 */
TEST_F_TIMEOUT(http, json_object_answers, 180)
{
	static char body[65536], req[512], whole[8192], streamed[8192];
	int complete = 0;

	for (int seed = 1; seed <= 6; seed++) {
		struct json_object *o, *c;

		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
			 "\"json\"}],\"max_tokens\":300,\"seed\":%d,\"response_format\":{\"type\":"
			 "\"json_object\"},\"logit_bias\":{\"34\":3,\"125\":3,\"93\":3}}",
			 seed);
		ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
				    sizeof(self->buf)))
		TH_LOG("%s", self->buf);
		o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
		ASSERT_NE(NULL, o);
		c = json_object_array_get_idx(json_object_object_get(o, "choices"), 0);
		snprintf(whole, sizeof(whole), "%s",
			 json_object_get_string(json_object_object_get(
				 json_object_object_get(c, "message"), "content")));
		if (!strcmp(json_object_get_string(json_object_object_get(c, "finish_reason")),
			    "stop")) {
			EXPECT_EQ(2, json_state(whole)) TH_LOG("seed %d: %s", seed, whole);
			complete++;
		} else {
			EXPECT_EQ(1, json_state(whole)) TH_LOG("seed %d: %s", seed, whole);
		}
		json_object_put(o);
	}
	EXPECT_GE(complete, 3);

	/* streamed: the chunks add up to the whole answer (seed 6's) */
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"json\"}],"
		 "\"max_tokens\":300,\"seed\":6,\"stream\":true,\"response_format\":{\"type\":"
		 "\"json_object\"},\"logit_bias\":{\"34\":3,\"125\":3,\"93\":3}}");
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	ASSERT_EQ(0, stream_content(self->buf, body, sizeof(body), streamed, sizeof(streamed)));
	EXPECT_STREQ(whole, streamed);

	/* completions, greedy, without help: a whole object or the start of one */
	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"{\",\"max_tokens\":48,\"temperature\":0,"
			    "\"response_format\":{\"type\":\"json_object\"}}",
			    self->buf, sizeof(self->buf)));
	{
		struct json_object *o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);

		ASSERT_NE(NULL, o);
		EXPECT_NE(
			0,
			json_state(json_object_get_string(json_object_object_get(
				json_object_array_get_idx(json_object_object_get(o, "choices"), 0),
				"text"))))
		TH_LOG("%s", self->buf);
		json_object_put(o);
	}
	ASSERT_EQ(400, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"x\",\"response_format\":{\"type\":"
			    "\"xml\"}}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"response_format.type\""));
	EXPECT_TRUE(healthy(_metadata, self));
}

/* Characters of a UTF-8 string. */
static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/*
 * response_format json_schema: whatever the random model would say, the
 * answer is an instance of the schema (its keys in order and no others,
 * one of the enum's values, an integer, at most two strings of at most
 * three characters, a boolean), whole with finish_reason stop; streamed,
 * the same text. A schema moem cannot follow, or a malformed
 * json_schema, gets 400 naming the field and the keyword.
 */
TEST_F_TIMEOUT(http, json_schema_answers, 180)
{
	static const char schema[] =
		"{\"type\":\"object\",\"properties\":{\"city\":{\"enum\":[\"Paris\",\"Rome\"]},"
		"\"n\":{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":40},\"tags\":{"
		"\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"maxItems\":2}"
		","
		"\"ok\":{\"type\":\"boolean\"},\"code\":{\"type\":\"string\",\"pattern\":"
		"\"^[A-Z]{2}[0-9]$\"}},"
		"\"required\":[\"city\",\"n\",\"tags\",\"ok\",\"code\"],\"additionalProperties\":"
		"false}";
	static const char *const keys[] = {"city", "n", "tags", "ok", "code"};
	static char body[65536], req[2048], whole[8192], streamed[8192];

	for (int seed = 1; seed <= 4; seed++) {
		struct json_object *o, *c, *a, *x;
		int k = 0;

		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
			 "\"json\"}],\"max_tokens\":400,\"seed\":%d,\"response_format\":{\"type\":"
			 "\"json_schema\",\"json_schema\":{\"name\":\"answer\",\"strict\":true,"
			 "\"schema\":%s}},\"logit_bias\":{\"34\":3,\"44\":3,\"93\":3}}",
			 seed, schema);
		ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
				    sizeof(self->buf)))
		TH_LOG("%s", self->buf);
		o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
		ASSERT_NE(NULL, o);
		c = first_choice(o);
		snprintf(whole, sizeof(whole), "%s",
			 json_object_get_string(json_object_object_get(
				 json_object_object_get(c, "message"), "content")));
		EXPECT_STREQ("stop",
			     json_object_get_string(json_object_object_get(c, "finish_reason")));
		json_object_put(o);
		o = json_tokener_parse(whole);
		ASSERT_NE(NULL, o) TH_LOG("seed %d: not JSON: %s", seed, whole);
		json_object_object_foreach(o, key, val)
		{
			(void)val;
			ASSERT_LT(k, 5) TH_LOG("seed %d: %s", seed, whole);
			EXPECT_STREQ(keys[k], key) TH_LOG("seed %d: %s", seed, whole);
			k++;
		}
		EXPECT_EQ(5, k) TH_LOG("seed %d: %s", seed, whole);
		x = json_object_object_get(o, "code");
		EXPECT_TRUE(json_object_is_type(x, json_type_string) &&
			    strlen(json_object_get_string(x)) == 3 &&
			    strspn(json_object_get_string(x), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 2 &&
			    isdigit((unsigned char)json_object_get_string(x)[2]))
		TH_LOG("seed %d: %s", seed, whole);
		x = json_object_object_get(o, "city");
		EXPECT_TRUE(x && (!strcmp(json_object_get_string(x), "Paris") ||
				  !strcmp(json_object_get_string(x), "Rome")))
		TH_LOG("seed %d: %s", seed, whole);
		x = json_object_object_get(o, "n");
		EXPECT_TRUE(json_object_is_type(x, json_type_int) &&
			    json_object_get_int64(x) >= -5 && json_object_get_int64(x) < 40)
		TH_LOG("seed %d: %s", seed, whole);
		EXPECT_TRUE(json_object_is_type(json_object_object_get(o, "ok"), json_type_boolean))
		TH_LOG("seed %d: %s", seed, whole);
		a = json_object_object_get(o, "tags");
		ASSERT_TRUE(json_object_is_type(a, json_type_array))
		TH_LOG("seed %d: %s", seed, whole);
		EXPECT_LE(json_object_array_length(a), 2u);
		for (size_t i = 0; i < json_object_array_length(a); i++) {
			x = json_object_array_get_idx(a, i);
			EXPECT_TRUE(json_object_is_type(x, json_type_string) &&
				    utf8_chars(json_object_get_string(x)) <= 3)
			TH_LOG("seed %d: %s", seed, whole);
		}
		json_object_put(o);
	}

	/* streamed: the chunks add up to the whole answer (seed 4's) */
	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"json\"}],"
		 "\"max_tokens\":400,\"seed\":4,\"stream\":true,\"response_format\":{\"type\":"
		 "\"json_schema\",\"json_schema\":{\"name\":\"answer\",\"strict\":true,"
		 "\"schema\":%s}},\"logit_bias\":{\"34\":3,\"44\":3,\"93\":3}}",
		 schema);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf, sizeof(self->buf)));
	ASSERT_EQ(0, stream_content(self->buf, body, sizeof(body), streamed, sizeof(streamed)));
	EXPECT_STREQ(whole, streamed);

	/* what cannot be followed, named */
	ASSERT_EQ(400,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		       "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
		       "\"a\",\"schema\":{\"type\":\"object\",\"properties\":{\"z\":{\"type\":"
		       "\"string\",\"not\":{\"const\":\"a\"}}}}}}}",
		       self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"response_format.json_schema.schema\""));
	EXPECT_NE(NULL, strstr(self->buf, "/properties/z: 'not' is not supported"))
	TH_LOG("%s", self->buf);
	ASSERT_EQ(400, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"x\",\"response_format\":{\"type\":"
			    "\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\"}}}}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"response_format.json_schema.name\""));
	ASSERT_EQ(400, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"x\",\"response_format\":{\"type\":"
			    "\"json_object\",\"json_schema\":{}}}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "response_format.json_schema"));
	EXPECT_TRUE(healthy(_metadata, self));
}

/*
 * n > 1: each choice is sampled on its own, as a request with seed +
 * index would be (so choice i equals the answer to that request alone);
 * the usage counts every choice's tokens and the prompt once. Streamed,
 * each choice's chunks carry its index and add up to its whole text, each
 * ends with one finish_reason, and one usage chunk and one [DONE] end the
 * stream. Greedy choices are equal. Nothing stays live after.
 */
TEST_F_TIMEOUT(http, n_choices_whole_streamed_and_alone, 180)
{
	static char body[65536], req[512], text[2][512], streamed[2][512];
	int finishes[2] = {0}, usage = 0, done = 0;
	struct json_object *o, *ch;

	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"ab\",\"max_tokens\":8,\"seed\":7,"
			    "\"n\":2}",
			    self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	ch = json_object_object_get(o, "choices");
	ASSERT_EQ(2u, json_object_array_length(ch)) TH_LOG("%s", self->buf);
	for (int i = 0; i < 2; i++) {
		struct json_object *c = json_object_array_get_idx(ch, (size_t)i);

		EXPECT_EQ(i, json_object_get_int(json_object_object_get(c, "index")));
		snprintf(text[i], sizeof(text[i]), "%s",
			 json_object_get_string(json_object_object_get(c, "text")));
	}
	EXPECT_EQ(16, json_object_get_int(json_object_object_get(json_object_object_get(o, "usage"),
								 "completion_tokens")));
	EXPECT_EQ(2, json_object_get_int(json_object_object_get(json_object_object_get(o, "usage"),
								"prompt_tokens")));
	json_object_put(o);
	EXPECT_STRNE(text[0], text[1]) TH_LOG("two equal samples");
	/* each choice is the answer alone with seed 7 + its index */
	for (int i = 0; i < 2; i++) {
		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"prompt\":\"ab\",\"max_tokens\":8,\"seed\":%d}", 7 + i);
		ASSERT_EQ(200,
			  post(self->port, "/v1/completions", req, self->buf, sizeof(self->buf)));
		o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
		ASSERT_NE(NULL, o);
		EXPECT_STREQ(text[i], json_object_get_string(
					      json_object_object_get(first_choice(o), "text")))
		TH_LOG("choice %d", i);
		json_object_put(o);
	}

	/* streamed */
	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"ab\",\"max_tokens\":8,\"seed\":7,"
			    "\"n\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
			    self->buf, sizeof(self->buf)));
	dechunk(self->buf, body, sizeof(body));
	memset(streamed, 0, sizeof(streamed));
	for (char *ev = strstr(body, "data: "); ev; ev = strstr(ev + 1, "data: ")) {
		char *end = strstr(ev, "\n\n");
		struct json_object *c, *u;

		ASSERT_NE(NULL, end);
		EXPECT_EQ(0, done) TH_LOG("an event after [DONE]");
		if (!strncmp(ev, "data: [DONE]", 12)) {
			done++;
			continue;
		}
		*end = 0;
		o = json_tokener_parse(ev + 6);
		*end = '\n';
		ASSERT_NE(NULL, o);
		if (json_object_object_get_ex(o, "usage", &u) && u) {
			EXPECT_EQ(16, json_object_get_int(
					      json_object_object_get(u, "completion_tokens")));
			EXPECT_EQ(0u,
				  json_object_array_length(json_object_object_get(o, "choices")));
			usage++;
		} else {
			int k;

			c = first_choice(o);
			k = json_object_get_int(json_object_object_get(c, "index"));
			ASSERT_TRUE(k >= 0 && k < 2);
			EXPECT_EQ(0, usage) TH_LOG("a choice's chunk after the usage");
			strncat(streamed[k],
				json_object_get_string(json_object_object_get(c, "text")),
				sizeof(streamed[k]) - strlen(streamed[k]) - 1);
			if (json_object_get_string(json_object_object_get(c, "finish_reason")))
				finishes[k]++;
		}
		json_object_put(o);
	}
	EXPECT_EQ(1, done);
	EXPECT_EQ(1, usage);
	for (int i = 0; i < 2; i++) {
		EXPECT_STREQ(text[i], streamed[i]) TH_LOG("choice %d", i);
		EXPECT_EQ(1, finishes[i]) TH_LOG("choice %d", i);
	}

	/* greedy: the same choice twice */
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions",
			    "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			    "\"max_tokens\":6,\"temperature\":0,\"n\":2}",
			    self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	ch = json_object_object_get(o, "choices");
	ASSERT_EQ(2u, json_object_array_length(ch));
	EXPECT_STREQ(json_object_get_string(json_object_object_get(
			     json_object_object_get(json_object_array_get_idx(ch, 0), "message"),
			     "content")),
		     json_object_get_string(json_object_object_get(
			     json_object_object_get(json_object_array_get_idx(ch, 1), "message"),
			     "content")));
	json_object_put(o);

	/* bounds: 16 at most; and no more than the queue holds (this server: 2) */
	EXPECT_EQ(400, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"ab\",\"n\":17}", self->buf,
			    sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"n\""));
	EXPECT_EQ(400,
		  post(self->port, "/v1/completions", "{\"model\":\"t\",\"prompt\":\"ab\",\"n\":3}",
		       self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "max-queue 2")) TH_LOG("%s", self->buf);
	EXPECT_EQ(400,
		  post(self->port, "/v1/completions", "{\"model\":\"t\",\"prompt\":\"ab\",\"n\":0}",
		       self->buf, sizeof(self->buf)));
	EXPECT_TRUE(settles(self->port, 30000));
	EXPECT_TRUE(healthy(_metadata, self));
}

/*
 * echo (completions): the answer starts with the prompt, and with
 * logprobs the prompt's tokens come first, the first with null; each
 * prompt token's logprob is the model's, as the sampler gives it for the
 * same token after the same text (the greedy token of "he", put at the
 * end of the prompt). Streamed, the first chunk carries the prompt.
 */
TEST_F_TIMEOUT(http, echo_gives_the_prompt_and_its_logprobs, 120)
{
	static char body[65536], req[512];
	struct json_object *o, *lp, *c;
	const char *text;
	double lp_gen;
	int g;

	/* "he" (ids: bytes), greedy: the token g and its logprob */
	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":[104,101],\"max_tokens\":1,"
			    "\"temperature\":0,\"logprobs\":1}",
			    self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	lp = json_object_object_get(first_choice(o), "logprobs");
	lp_gen = json_object_get_double(
		json_object_array_get_idx(json_object_object_get(lp, "token_logprobs"), 0));
	/* the token's one byte is its id here */
	g = (unsigned char)json_object_get_string(
		json_object_array_get_idx(json_object_object_get(lp, "tokens"), 0))[0];
	json_object_put(o);
	if (g >= 0x80)
		SKIP(return, "the greedy token is no character alone: its id is not its text");

	snprintf(req, sizeof(req),
		 "{\"model\":\"t\",\"prompt\":[104,101,%d],\"max_tokens\":2,\"temperature\":0,"
		 "\"logprobs\":1,\"echo\":true}",
		 g);
	ASSERT_EQ(200, post(self->port, "/v1/completions", req, self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	c = first_choice(o);
	text = json_object_get_string(json_object_object_get(c, "text"));
	EXPECT_EQ(0, strncmp(text, "he", 2)) TH_LOG("%s", text);
	EXPECT_EQ(g, (unsigned char)text[2]);
	lp = json_object_object_get(c, "logprobs");
	EXPECT_EQ(5, json_object_array_length(json_object_object_get(lp, "tokens")));
	EXPECT_EQ(NULL, json_object_array_get_idx(json_object_object_get(lp, "token_logprobs"), 0));
	EXPECT_EQ(NULL, json_object_array_get_idx(json_object_object_get(lp, "top_logprobs"), 0));
	{
		double x = json_object_get_double(
			json_object_array_get_idx(json_object_object_get(lp, "token_logprobs"), 2));

		EXPECT_TRUE(fabs(x - lp_gen) < 2e-3) TH_LOG("prompt %g, sampled %g", x, lp_gen);
	}
	EXPECT_EQ(2, json_object_get_int(json_object_array_get_idx(
			     json_object_object_get(lp, "text_offset"), 2)));
	json_object_put(o);

	/* streamed: the first chunk starts with the prompt */
	ASSERT_EQ(200, post(self->port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hello\",\"max_tokens\":3,\"echo\":true,"
			    "\"stream\":true}",
			    self->buf, sizeof(self->buf)));
	dechunk(self->buf, body, sizeof(body));
	EXPECT_NE(NULL, strstr(body, "data: {")) TH_LOG("%s", body);
	o = json_tokener_parse(strstr(body, "data: {") + 6);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(0,
		  strncmp(json_object_get_string(json_object_object_get(first_choice(o), "text")),
			  "hello", 5));
	json_object_put(o);
}

/*
 * /tokenize and /detokenize (vLLM's): a prompt's ids (this tokenizer's
 * are its bytes), a conversation's as many as a chat answer's
 * prompt_tokens, the text of ids; bad ids, fields and models refused by
 * name.
 */
/* usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens of an answer (-1: absent). */
static void usage_of(const char *resp, int *prompt, int *cached)
{
	struct json_object *o = answer_json(resp), *u, *d, *c;

	*prompt = *cached = -1;
	if (o && json_object_object_get_ex(o, "usage", &u)) {
		*prompt = json_object_get_int(json_object_object_get(u, "prompt_tokens"));
		if (json_object_object_get_ex(u, "prompt_tokens_details", &d) &&
		    json_object_object_get_ex(d, "cached_tokens", &c))
			*cached = json_object_get_int(c);
	}
	json_object_put(o);
}

/* The answer's first choice's text and token logprobs as JSON, into out. */
static void answer_of(const char *resp, char *out, size_t cap)
{
	struct json_object *o = answer_json(resp);
	struct json_object *c = o ? first_choice(o) : NULL;

	snprintf(out, cap, "%s", c ? json_object_to_json_string(c) : "(none)");
	json_object_put(o);
}

#define PC_LONG                                                                             \
	"The quick brown fox jumps over the lazy dog, and the dog sleeps on; the fox runs " \
	"far away into the woods."

/*
 * A prompt that begins as an earlier one did takes that beginning's KV
 * from the prefix cache, in whole blocks of 16 tokens with at least its
 * last token computed: the same answer, token logprobs included (CPU
 * backend, temperature 0), usage.prompt_tokens_details.cached_tokens and
 * the /metrics counter say how many; the other choices of n > 1 take the
 * first's prompt; the next turn of a chat takes the turns before it.
 */
TEST_F_TIMEOUT(http, prefix_cache_reuses_a_prompts_beginning, 180)
{
	const char *req = "{\"model\":\"t\",\"prompt\":\"" PC_LONG "\",\"max_tokens\":4,"
			  "\"temperature\":0,\"logprobs\":2}";
	static char first[16384], again[16384], turn2[4096];
	int prompt, cached, p2, c2;
	struct json_object *o;
	const char *answer;

	ASSERT_EQ(200, post(self->port, "/v1/completions", req, self->buf, sizeof(self->buf)));
	usage_of(self->buf, &prompt, &cached);
	ASSERT_GT(prompt, 32) TH_LOG("%s", self->buf);
	EXPECT_EQ(0, cached) TH_LOG("%s", self->buf);
	answer_of(self->buf, first, sizeof(first));
	ASSERT_EQ(200, post(self->port, "/v1/completions", req, self->buf, sizeof(self->buf)));
	usage_of(self->buf, &p2, &cached);
	EXPECT_EQ(prompt, p2);
	EXPECT_EQ((prompt - 1) / 16 * 16, cached) TH_LOG("%s", self->buf);
	answer_of(self->buf, again, sizeof(again));
	EXPECT_STREQ(first, again);
	EXPECT_EQ((double)cached, metric(self->port, "moem_prefix_cache_hit_tokens_total"));
	EXPECT_GT(metric(self->port, "moem_prefix_cache_bytes"), 0);

	/*
	 * n = 2 on a new prompt (max-queue is 2 here): the second choice waits
	 * for the first's prefill and takes its whole blocks, and is still the
	 * answer its seed gives alone
	 */
	{
		const char *nreq = "{\"model\":\"t\",\"prompt\":\"Again: " PC_LONG
				   "\",\"max_tokens\":6,\"seed\":5,\"n\":2}";
		const char *alone = "{\"model\":\"t\",\"prompt\":\"Again: " PC_LONG
				    "\",\"max_tokens\":6,\"seed\":6}";
		double before = metric(self->port, "moem_prefix_cache_hit_tokens_total");
		struct json_object *ch1;
		int np, nc;

		ASSERT_EQ(200, post(self->port, "/v1/completions", nreq, first, sizeof(first)));
		usage_of(first, &np, &nc);
		EXPECT_EQ(0, nc) TH_LOG("%s", first);
		EXPECT_EQ(before + (np - 1) / 16 * 16,
			  metric(self->port, "moem_prefix_cache_hit_tokens_total"));
		o = answer_json(first);
		ASSERT_NE(NULL, o);
		ch1 = json_object_array_get_idx(json_object_object_get(o, "choices"), 1);
		ASSERT_NE(NULL, ch1);
		snprintf(again, sizeof(again), "%s",
			 json_object_get_string(json_object_object_get(ch1, "text")));
		json_object_put(o);
		ASSERT_EQ(200,
			  post(self->port, "/v1/completions", alone, self->buf, sizeof(self->buf)));
		o = answer_json(self->buf);
		ASSERT_NE(NULL, o);
		EXPECT_STREQ(again, json_object_get_string(choice0(o, "text")));
		json_object_put(o);
	}

	/* chat: the second turn repeats the first and its answer */
	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"" PC_LONG
		       "\"}],\"max_tokens\":8,\"temperature\":0}",
		       self->buf, sizeof(self->buf)));
	usage_of(self->buf, &prompt, &cached);
	o = answer_json(self->buf);
	ASSERT_NE(NULL, o);
	answer = json_object_get_string(json_object_object_get(choice0(o, "message"), "content"));
	ASSERT_NE(NULL, answer);
	{
		struct json_object *m = json_object_new_array(), *msg;
		struct json_object *body = json_object_new_object();

		msg = json_object_new_object();
		json_object_object_add(msg, "role", json_object_new_string("user"));
		json_object_object_add(msg, "content", json_object_new_string(PC_LONG));
		json_object_array_add(m, msg);
		msg = json_object_new_object();
		json_object_object_add(msg, "role", json_object_new_string("assistant"));
		json_object_object_add(msg, "content", json_object_new_string(answer));
		json_object_array_add(m, msg);
		msg = json_object_new_object();
		json_object_object_add(msg, "role", json_object_new_string("user"));
		json_object_object_add(msg, "content", json_object_new_string("and then?"));
		json_object_array_add(m, msg);
		json_object_object_add(body, "model", json_object_new_string("t"));
		json_object_object_add(body, "messages", m);
		json_object_object_add(body, "max_tokens", json_object_new_int(4));
		snprintf(turn2, sizeof(turn2), "%s", json_object_to_json_string(body));
		json_object_put(body);
	}
	json_object_put(o);
	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions", turn2, self->buf, sizeof(self->buf)));
	usage_of(self->buf, &p2, &c2);
	EXPECT_GT(p2, prompt);
	/* at least the first turn's whole blocks; never the last token */
	EXPECT_GE(c2, (prompt - 1) / 16 * 16) TH_LOG("%s", self->buf);
	EXPECT_LT(c2, p2);
}

TEST_F_TIMEOUT(http, tokenize_and_detokenize, 120)
{
	struct json_object *o;
	int prompt_tokens;

	ASSERT_EQ(200, post(self->port, "/tokenize", "{\"prompt\":\"hello\"}", self->buf,
			    sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "\"count\":5,")) TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "\"tokens\":[104,101,108,108,111]"));
	EXPECT_NE(NULL, strstr(self->buf, "\"max_model_len\":32768"));

	ASSERT_EQ(200,
		  post(self->port, "/v1/chat/completions",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		       "\"max_tokens\":1}",
		       self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	prompt_tokens = json_object_get_int(
		json_object_object_get(json_object_object_get(o, "usage"), "prompt_tokens"));
	json_object_put(o);
	ASSERT_EQ(200,
		  post(self->port, "/tokenize",
		       "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
		       self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(prompt_tokens, json_object_get_int(json_object_object_get(o, "count")));
	json_object_put(o);
	/* without the generation prompt ("assistant:"): 10 bytes fewer */
	ASSERT_EQ(200, post(self->port, "/tokenize",
			    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
			    "\"add_generation_prompt\":false}",
			    self->buf, sizeof(self->buf)));
	o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(prompt_tokens - 10, json_object_get_int(json_object_object_get(o, "count")));
	json_object_put(o);

	ASSERT_EQ(200, post(self->port, "/detokenize", "{\"tokens\":[104,105]}", self->buf,
			    sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "{\"prompt\":\"hi\"}")) TH_LOG("%s", self->buf);

	ASSERT_EQ(400, post(self->port, "/detokenize", "{\"tokens\":[104,300]}", self->buf,
			    sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"tokens[1]\"")) TH_LOG("%s", self->buf);
	ASSERT_EQ(400, post(self->port, "/detokenize", "{\"tokens\":[1],\"x\":1}", self->buf,
			    sizeof(self->buf)));
	ASSERT_EQ(400,
		  post(self->port, "/tokenize", "{\"prompt\":7}", self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"prompt\"")) TH_LOG("%s", self->buf);
	ASSERT_EQ(400, post(self->port, "/tokenize", "[1]", self->buf, sizeof(self->buf)));
	ASSERT_EQ(404, post(self->port, "/tokenize", "{\"model\":\"other\",\"prompt\":\"x\"}",
			    self->buf, sizeof(self->buf)));
	ASSERT_EQ(405, get(self->port, "/tokenize", self->buf, sizeof(self->buf)));
	EXPECT_TRUE(healthy(_metadata, self));
}

/*
 * Tools for a model whose chat template asks for no tool-call format this
 * server reads: refused by name, unless tool_choice is "none".
 */
TEST_F_TIMEOUT(http, tools_need_a_format_the_server_reads, 120)
{
	ASSERT_EQ(400, post(self->port, "/v1/chat/completions",
			    "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
			    "\"x\"}],\"tools\":" TOOLS_JSON ",\"max_tokens\":2}",
			    self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "\"param\":\"tools\"")) TH_LOG("%s", self->buf);
	ASSERT_EQ(200, post(self->port, "/v1/chat/completions",
			    "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":"
			    "\"x\"}],\"tools\":" TOOLS_JSON ",\"tool_choice\":\"none\","
			    "\"max_tokens\":2}",
			    self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	EXPECT_TRUE(healthy(_metadata, self));
}

/*
 * --reasoning-parser qwen3 on a three-token model whose words are a whole
 * think block and "ok": an answer that starts with the block gives its
 * text as reasoning_content and the rest as content; one that does not
 * is all content (reasoning_content null). Streamed: the deltas add up to
 * the whole answer's two texts.
 */
static const char *const think_words[] = {"<think>why</think>", "ok", "<unk>"};

FIXTURE(think)
{
	char *dir;
	struct dmn d;
	int port;
	char buf[65536];
};

FIXTURE_SETUP(think)
{
	const char *const args[] = {"--reasoning-parser", "qwen3", NULL};

	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	self->port =
		serve_tiny_as(&self->d, self->dir, args, think_words, self->buf, sizeof(self->buf));
	ASSERT_GT(self->port, 0)
	TH_LOG("moemd did not serve (%s; log %s)", moem_last_error(), self->d.log);
}

FIXTURE_TEARDOWN(think)
{
	word_teardown(_metadata, &self->d, self->dir);
}

TEST_F_TIMEOUT(think, reasoning_split_whole_and_streamed, 180)
{
	static char body[65536], req[512], text[512], want_r[512], want_c[512], got_r[512],
		got_c[512];
	bool with = false, without = false;

	for (int seed = 1; seed <= 40 && !(with && without); seed++) {
		struct json_object *o, *a, *m, *x;
		const char *end;

		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
			 "\"max_tokens\":5,\"seed\":%d,\"logprobs\":true%s}",
			 seed, "");
		ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
				    sizeof(self->buf)))
		TH_LOG("%s", self->buf);
		o = json_tokener_parse(strstr(self->buf, "\r\n\r\n") + 4);
		ASSERT_NE(NULL, o);
		/* the text the tokens make (the unknown token has none) */
		a = json_object_object_get(json_object_object_get(first_choice(o), "logprobs"),
					   "content");
		text[0] = 0;
		for (size_t i = 0; i < json_object_array_length(a); i++) {
			const char *t = json_object_get_string(
				json_object_object_get(json_object_array_get_idx(a, i), "token"));

			if (strcmp(t, "<unk>"))
				strcat(text, t);
		}
		want_r[0] = 0;
		snprintf(want_c, sizeof(want_c), "%s", text);
		end = strstr(text, "</think>");
		if (!strncmp(text, "<think>", 7) && end) {
			snprintf(want_r, sizeof(want_r), "%.*s", (int)(end - text - 7), text + 7);
			snprintf(want_c, sizeof(want_c), "%s", end + 8);
		}
		m = json_object_object_get(first_choice(o), "message");
		ASSERT_TRUE(json_object_object_get_ex(m, "reasoning_content", &x));
		if (want_r[0]) {
			EXPECT_STREQ(want_r, json_object_get_string(x)) TH_LOG("%s", text);
			with = true;
		} else {
			EXPECT_EQ(NULL, x) TH_LOG("%s", text);
			without = true;
		}
		EXPECT_STREQ(want_c, json_object_get_string(json_object_object_get(m, "content")))
		TH_LOG("%s", text);
		json_object_put(o);

		/* the same streamed */
		snprintf(req, sizeof(req),
			 "{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
			 "\"max_tokens\":5,\"seed\":%d,\"stream\":true}",
			 seed);
		ASSERT_EQ(200, post(self->port, "/v1/chat/completions", req, self->buf,
				    sizeof(self->buf)));
		dechunk(self->buf, body, sizeof(body));
		got_r[0] = got_c[0] = 0;
		for (char *ev = strstr(body, "data: {"); ev; ev = strstr(ev + 1, "data: {")) {
			char *e2 = strstr(ev, "\n\n");
			struct json_object *d;

			ASSERT_NE(NULL, e2);
			*e2 = 0;
			o = json_tokener_parse(ev + 6);
			*e2 = '\n';
			ASSERT_NE(NULL, o);
			d = json_object_object_get(first_choice(o), "delta");
			if (json_object_object_get_ex(d, "reasoning_content", &x) && x)
				strcat(got_r, json_object_get_string(x));
			if (json_object_object_get_ex(d, "content", &x) && x)
				strcat(got_c, json_object_get_string(x));
			json_object_put(o);
		}
		EXPECT_STREQ(want_r, got_r);
		EXPECT_STREQ(want_c, got_c);
	}
	EXPECT_TRUE(with && without)
	TH_LOG("seeds gave: with a block %d, without %d", with, without);
}

/*
 * The decoder's dense precision (--dense-prec): served with the
 * attention projections and lm_head in q8, shown by status and by
 * `moemctl status`; refused with a message when the name is no
 * precision (a usage error, exit 64) or the model's matrices
 * cannot take it (hidden 192 is no whole number of q8's groups of 128:
 * moemd stays up and says why it serves no model).
 */
FIXTURE(dense)
{
	char *dir;
	struct dmn d;
	char pack[512];
	char buf[65536];
};

FIXTURE_SETUP(dense)
{
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	snprintf(self->pack, sizeof(self->pack), "%s/t.moem", self->dir);
	self->d.pid = -1;
}

FIXTURE_TEARDOWN(dense)
{
	if (self->d.pid > 0 && !dmn_exited(&self->d)) {
		kill(self->d.pid, SIGKILL);
		for (uint64_t end = dmn_ms() + 20000; !dmn_exited(&self->d) && dmn_ms() < end;)
			dmn_sleep_ms(5);
	}
	if (!_metadata->passed && self->d.pid > 0)
		dmn_dump_log(&self->d);
	dmn_rm_rf(self->dir);
	free(self->dir);
}

/* moemd in self->dir on self->pack with the decoder's dense precision. */
static int start_dense(FIXTURE_DATA(dense) * self, const char *prec)
{
	return dmn_start(&self->d, self->dir, "--pack", self->pack, "--pool", "thp", "--listen",
			 "127.0.0.1:0", "--max-batch", "2", "--step-tokens", "64", "--dense-prec",
			 prec, NULL);
}

/* `moemctl status` against the daemon, its output in buf. */
static int moemctl_status(const struct dmn *d, char *buf, size_t cap)
{
	char cmd[1024];
	size_t n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s/bin/moemctl --socket '%s' status 2>&1",
		 getenv("MOEM_BUILD") ? getenv("MOEM_BUILD") : "build", d->sock);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	while (n + 1 < cap && !feof(f))
		n += fread(buf + n, 1, cap - 1 - n, f);
	buf[n] = 0;
	return pclose(f) == 0 ? 0 : -EIO;
}

/* SIGTERM, and a clean exit. */
static void stop_ok(struct __test_metadata *_metadata, struct dmn *d)
{
	kill(d->pid, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(d, 20000));
	EXPECT_EQ(0, dmn_exit_code(d));
}

TEST_F_TIMEOUT(dense, q8_served_and_shown, 180)
{
	struct json_object *r;
	int port;

	ASSERT_EQ(0, make_pack(self->dir, self->pack, 128)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, start_dense(self, "q8"));
	port = wait_port(&self->d, 60000);
	ASSERT_GT(port, 0) TH_LOG("moemd did not listen (log %s)", self->d.log);
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end;) {
		if (get(port, "/health", self->buf, sizeof(self->buf)) == 200)
			break;
		dmn_sleep_ms(10);
	}
	ASSERT_EQ(200, get(port, "/health", self->buf, sizeof(self->buf))) TH_LOG("%s", self->buf);
	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_STREQ("q8", dmn_str(r, "serving.dense_prec"));
	json_object_put(r);
	EXPECT_EQ(200, post(port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hi\",\"max_tokens\":4}", self->buf,
			    sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	ASSERT_EQ(0, moemctl_status(&self->d, self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "dense weights (attention projections, lm_head) q8"))
	TH_LOG("%s", self->buf);
	stop_ok(_metadata, &self->d);
}

/* --prefix-cache no: every prompt computed whole, and said so; a bad value is a usage error. */
TEST_F_TIMEOUT(dense, prefix_cache_off, 180)
{
	const char *req = "{\"model\":\"t\",\"prompt\":\"" PC_LONG "\",\"max_tokens\":2}";
	struct json_object *r;
	int port, prompt, cached;

	ASSERT_EQ(0, make_pack(self->dir, self->pack, 128)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, dmn_start(&self->d, self->dir, "--pack", self->pack, "--pool", "thp",
			       "--listen", "127.0.0.1:0", "--prefix-cache", "maybe", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->d, 20000));
	EXPECT_EQ(64, dmn_exit_code(&self->d));
	EXPECT_TRUE(dmn_log_has(&self->d, "prefix-cache 'maybe': want yes or no"));
	ASSERT_EQ(0, dmn_start(&self->d, self->dir, "--pack", self->pack, "--pool", "thp",
			       "--listen", "127.0.0.1:0", "--prefix-cache", "no", NULL));
	port = wait_port(&self->d, 60000);
	ASSERT_GT(port, 0) TH_LOG("moemd did not listen (log %s)", self->d.log);
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end; dmn_sleep_ms(10))
		if (get(port, "/health", self->buf, sizeof(self->buf)) == 200)
			break;
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(200, post(port, "/v1/completions", req, self->buf, sizeof(self->buf)));
		usage_of(self->buf, &prompt, &cached);
		EXPECT_GT(prompt, 32);
		EXPECT_EQ(0, cached) TH_LOG("%s", self->buf);
	}
	EXPECT_EQ(0, metric(port, "moem_prefix_cache_hit_tokens_total"));
	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "serving.prefix_cache")));
	json_object_put(r);
	ASSERT_EQ(0, moemctl_status(&self->d, self->buf, sizeof(self->buf)));
	EXPECT_NE(NULL, strstr(self->buf, "prefix    cache off; 0 prompt tokens"))
	TH_LOG("%s", self->buf);
	stop_ok(_metadata, &self->d);
}

TEST_F_TIMEOUT(dense, refused_with_a_reason, 180)
{
	struct json_object *r = NULL;
	const char *why = "";

	ASSERT_EQ(0, make_pack(self->dir, self->pack, 192)) TH_LOG("%s", moem_last_error());
	/* no such precision: a usage error (64), as any bad flag */
	ASSERT_EQ(0, start_dense(self, "q3"));
	ASSERT_EQ(0, dmn_wait_exit(&self->d, 20000));
	EXPECT_EQ(64, dmn_exit_code(&self->d));
	EXPECT_TRUE(dmn_log_has(&self->d, "dense-prec: unknown precision 'q3'"));
	/* a model whose projections cannot be q8: up, serving no model, saying why */
	ASSERT_EQ(0, start_dense(self, "q8"));
	ASSERT_GT(wait_port(&self->d, 60000), 0) TH_LOG("moemd did not listen");
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end; dmn_sleep_ms(10)) {
		json_object_put(r);
		r = NULL;
		why = "";
		if (dmn_call(&self->d, "status", NULL, &r))
			continue;
		why = dmn_str(r, "serving.why_not");
		if (why && *why)
			break;
	}
	ASSERT_NE(NULL, r);
	EXPECT_NE(NULL, strstr(why, "q_proj")) TH_LOG("why_not: %s", why);
	EXPECT_NE(NULL, strstr(why, "--dense-prec")) TH_LOG("why_not: %s", why);
	EXPECT_NE(NULL, strstr(why, "multiple of 128")) TH_LOG("why_not: %s", why);
	EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "serving.ready")));
	json_object_put(r);
	ASSERT_EQ(0, moemctl_status(&self->d, self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "not serving")) TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "q_proj")) TH_LOG("%s", self->buf);
	stop_ok(_metadata, &self->d);
}

/*
 * A KV budget below one block at start: moemd comes up serving no model
 * and says why; raising kv_bytes over the control socket opens the model
 * (it stayed unserved until a restart before).
 */
TEST_F_TIMEOUT(dense, kv_budget_raised_opens_the_model, 180)
{
	struct json_object *r = NULL;
	int port, code = 0;

	ASSERT_EQ(0, make_pack(self->dir, self->pack, 128)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, dmn_start(&self->d, self->dir, "--pack", self->pack, "--pool", "thp",
			       "--listen", "127.0.0.1:0", "--max-batch", "2", "--step-tokens", "64",
			       "--kv", "1", NULL));
	port = wait_port(&self->d, 60000);
	ASSERT_GT(port, 0) TH_LOG("moemd did not listen (log %s)", self->d.log);
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end; dmn_sleep_ms(10)) {
		code = get(port, "/health", self->buf, sizeof(self->buf));
		if (code == 503 && strstr(self->buf, "holds no"))
			break;
	}
	ASSERT_EQ(503, code) TH_LOG("%s", self->buf);
	EXPECT_NE(NULL, strstr(self->buf, "kv budget of 1 bytes")) TH_LOG("%s", self->buf);
	ASSERT_EQ(0,
		  dmn_call(&self->d, "set", dmn_args("knob", "kv_bytes", "value", "64K", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	for (uint64_t end = dmn_ms() + 60000; dmn_ms() < end; dmn_sleep_ms(10)) {
		code = get(port, "/health", self->buf, sizeof(self->buf));
		if (code == 200)
			break;
	}
	ASSERT_EQ(200, code) TH_LOG("%s", self->buf);
	EXPECT_EQ(200, post(port, "/v1/completions",
			    "{\"model\":\"t\",\"prompt\":\"hi\",\"max_tokens\":4}", self->buf,
			    sizeof(self->buf)))
	TH_LOG("%s", self->buf);
	ASSERT_EQ(0, dmn_call(&self->d, "status", NULL, &r));
	EXPECT_EQ(65536u, dmn_u64(r, "serving.kv_budget"));
	json_object_put(r);
	stop_ok(_metadata, &self->d);
}

TEST_HARNESS_MAIN
