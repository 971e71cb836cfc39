// SPDX-License-Identifier: GPL-2.0-only
/*
 * The HTTP listener, on GNU libmicrohttpd (Debian's libmicrohttpd12):
 * a small, long-maintained C server library with its own threads (a
 * pool over epoll), suspend/resume for answers that come later (the
 * worker produces tokens; a connection waits without a thread), and the
 * limits an exposed server needs built in: connection count, idle and
 * slow-client timeouts, per-connection memory for headers (a header
 * flood is refused with 431). Documentation/admin-guide.md says why it
 * was chosen over the alternatives.
 *
 * Here: the socket (--listen), routing, the API key, body collection
 * with its limit (413), and counting answers by status for /metrics.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

struct hreq {
	enum moemd_ep ep;
	enum moem_oai_endpoint oep;
	char *body;
	size_t len, cap;
	bool too_big;
	struct moemd_sreq *sreq;
};

static unsigned int status_slot(unsigned int status)
{
	static const unsigned int known[] = {200, 400, 401, 404, 405, 413, 429, 500, 503};

	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(known); i++)
		if (known[i] == status)
			return i;
	return MOEMD_STATUS_NR - 1;
}

void moemd_http_count(struct moemd_srv *s, enum moemd_ep ep, unsigned int status)
{
	pthread_mutex_lock(&s->lock);
	s->http_status[ep][status_slot(status)]++;
	pthread_mutex_unlock(&s->lock);
}

void moemd_http_resume(struct MHD_Connection *c)
{
	MHD_resume_connection(c);
}

int moemd_http_conn_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

	return ci ? ci->connect_fd : -1;
}

int moemd_api_error(struct MHD_Connection *c, const struct moem_oai_error *e)
{
	struct MHD_Response *resp;
	size_t len;
	char *body = moem_oai_error_body(e, &len);
	int ret;

	if (!body)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (e->status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (e->status == 429 || e->status == 503)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	ret = MHD_queue_response(c, (unsigned int)e->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static int fail(struct moemd_srv *s, struct MHD_Connection *c, enum moemd_ep ep, int status,
		const char *type, const char *param, const char *code, const char *msg)
{
	struct moem_oai_error e;

	moem_oai_errorf(&e, status, type, param, "%s", msg);
	if (code)
		snprintf(e.code, sizeof(e.code), "%s", code);
	moemd_http_count(s, ep, (unsigned int)status);
	return moemd_api_error(c, &e);
}

/* Constant time, so the key cannot be guessed byte by byte from timings. */
static bool key_ok(const char *want, const char *auth)
{
	size_t wl = strlen(want), al;
	unsigned char diff = 0;

	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return false;
	auth += 7;
	al = strlen(auth);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < al ? auth[i] : 0);
	return !diff && al == wl;
}

static enum moemd_ep route(const char *url, const char *method, enum moem_oai_endpoint *oep,
			   bool *method_ok)
{
	static const struct {
		const char *url;
		const char *method;
		enum moemd_ep ep;
	} routes[] = {
		{"/v1/completions", "POST", EP_COMPLETIONS},
		{"/v1/chat/completions", "POST", EP_CHAT},
		{"/v1/models", "GET", EP_MODELS},
		{"/health", "GET", EP_HEALTH},
		{"/metrics", "GET", EP_METRICS},
		{"/tokenize", "POST", EP_TOKENIZE},
		{"/detokenize", "POST", EP_DETOKENIZE},
	};

	*method_ok = true;
	*oep = MOEM_OAI_COMPLETIONS;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(routes); i++) {
		if (strcmp(url, routes[i].url))
			continue;
		*method_ok = !strcmp(method, routes[i].method) ||
			     (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET"));
		if (routes[i].ep == EP_CHAT)
			*oep = MOEM_OAI_CHAT;
		return routes[i].ep;
	}
	return EP_OTHER;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **req_cls)
{
	struct moemd_srv *s = cls;
	struct hreq *h = *req_cls;
	bool method_ok;
	int ret;

	(void)version;
	if (!h) {
		const char *cl;

		h = calloc(1, sizeof(*h));
		if (!h)
			return MHD_NO;
		*req_cls = h;
		h->ep = route(url, method, &h->oep, &method_ok);
		if (h->ep == EP_OTHER)
			return (enum MHD_Result)fail(s, c, h->ep, 404, "invalid_request_error",
						     NULL, "unknown_url", "no such endpoint");
		if (!method_ok)
			return (enum MHD_Result)fail(s, c, h->ep, 405, "invalid_request_error",
						     NULL, NULL, "method not allowed here");
		if (h->ep == EP_HEALTH)
			return (enum MHD_Result)moemd_api_health(s, c);
		if (h->ep == EP_METRICS)
			return (enum MHD_Result)moemd_api_metrics(s, c);
		if (s->cfg.api_key &&
		    !key_ok(s->cfg.api_key,
			    MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							MHD_HTTP_HEADER_AUTHORIZATION)))
			return (enum MHD_Result)fail(
				s, c, h->ep, 401, "authentication_error", NULL, "invalid_api_key",
				"Incorrect API key provided: send 'Authorization: Bearer KEY'");
		if (h->ep == EP_MODELS)
			return (enum MHD_Result)moemd_api_models(s, c);
		/* A generation request: refuse a too-big body before reading it. */
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
			return (enum MHD_Result)fail(s, c, h->ep, 413, "invalid_request_error",
						     NULL, NULL, "the request body is too large");
		return MHD_YES;
	}
	if (h->sreq)
		return (enum MHD_Result)moemd_api_resume(s, c, h->sreq);
	if (*upload_size) {
		size_t n = *upload_size;

		*upload_size = 0;
		if (h->too_big || h->len + n > s->cfg.max_body) {
			/* A body without a length (chunked) that grew too big:
			 * libmicrohttpd answers only once the body is read, so
			 * read on without keeping it, up to four times the
			 * limit, then hang up. */
			h->too_big = true;
			free(h->body);
			h->body = NULL;
			h->cap = 0;
			h->len += n;
			return h->len > 4 * s->cfg.max_body ? MHD_NO : MHD_YES;
		}
		if (h->len + n + 1 > h->cap) {
			size_t cap = moem_max(h->cap * 2, h->len + n + 1);
			char *b = realloc(h->body, cap);

			if (!b)
				return MHD_NO;
			h->body = b;
			h->cap = cap;
		}
		memcpy(h->body + h->len, upload, n);
		h->len += n;
		return MHD_YES;
	}
	if (h->too_big)
		return (enum MHD_Result)fail(s, c, h->ep, 413, "invalid_request_error", NULL, NULL,
					     "the request body is too large");
	if (h->ep == EP_TOKENIZE || h->ep == EP_DETOKENIZE)
		return (enum MHD_Result)moemd_api_tokens(s, c, h->ep, h->body ? h->body : "",
							 h->len);
	ret = moemd_api_generate(s, c, h->oep, h->body ? h->body : "", h->len, &h->sreq);
	if (h->sreq) {
		/* counted until on_completed(): shutdown waits for its answer */
		pthread_mutex_lock(&s->lock);
		s->gen_conns++;
		pthread_mutex_unlock(&s->lock);
	}
	return (enum MHD_Result)ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct moemd_srv *s = cls;
	struct hreq *h = *req_cls;

	(void)c;
	(void)toe;
	if (!h)
		return;
	if (h->sreq) {
		moemd_api_closed(s, h->sreq);
		pthread_mutex_lock(&s->lock);
		s->gen_conns--;
		pthread_cond_broadcast(&s->conns_cond);
		pthread_mutex_unlock(&s->lock);
	}
	free(h->body);
	free(h);
	*req_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	moem_dbg("http: %s", msg);
}

/* "ADDR:PORT" or "[ADDR]:PORT" into a bound, listening socket. */
static int open_listener(struct moemd_srv *s, const char *spec)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST};
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[64], port[16], hbuf[64], pbuf[16];
	const char *colon = strrchr(spec, ':');
	int fd = -1, one = 1, sndbuf, ret;

	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host) ||
	    strlen(colon + 1) >= sizeof(port) || !colon[1])
		return moem_errf(EINVAL, "listen '%s': give ADDR:PORT (e.g. 127.0.0.1:8000)", spec);
	if (spec[0] == '[') {
		if (colon[-1] != ']')
			return moem_errf(EINVAL, "listen '%s': give [IPv6]:PORT", spec);
		snprintf(host, sizeof(host), "%.*s", (int)(colon - spec - 2), spec + 1);
	} else {
		snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	/* getaddrinfo() takes any number and wraps it (99999 -> 34463) */
	if (strspn(port, "0123456789") != strlen(port) || strtoul(port, NULL, 10) > 65535)
		return moem_errf(EINVAL, "listen '%s': the port must be 0..65535", spec);
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret)
		return moem_errf(EINVAL, "listen '%s': %s (a numeric address and port)", spec,
				 gai_strerror(ret));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = moem_errf(errno, "listen '%s': socket: %s", spec, strerror(errno));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/*
	 * Accepted connections inherit a fixed send buffer. Left to autotuning
	 * the kernel grows each one to tcp_wmem's maximum (4 MiB): 1024 clients
	 * that stop reading would pin 4 GiB of kernel memory, and a stream would
	 * be cancelled only after megabytes more than stream-buffer said.
	 */
	sndbuf = (int)moem_min(moem_max(s->cfg.stream_buffer, (uint64_t)(64 * 1024)),
			       (uint64_t)MOEM_MiB);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
		ret = moem_errf(errno, "listen '%s': %s", spec, strerror(errno));
		close(fd);
		goto out;
	}
	if (!getsockname(fd, (struct sockaddr *)&ss, &sl) &&
	    !getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf, sizeof(pbuf),
			 NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(s->listen_addr, sizeof(s->listen_addr),
			 ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, pbuf);
	s->listen_fd = fd;
	ret = 0;
out:
	freeaddrinfo(ai);
	return ret;
}

int moemd_http_start(struct moemd *d)
{
	struct moemd_srv *s = d->srv;
	int ret;

	if (!strcmp(s->cfg.listen, "none")) {
		moem_info("http: off (listen = none)");
		return 0;
	}
	ret = open_listener(s, s->cfg.listen);
	if (ret) {
		if (s->cfg.listen_given)
			return ret;
		/* The default address is taken (another server, a test):
		 * serve the control socket only and say so. */
		moem_warn("http: %s: not serving HTTP (give --listen ADDR:PORT, or 'none')",
			  moem_strerror(ret));
		return 0;
	}
	s->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
			MHD_USE_ERROR_LOG | MHD_USE_TURBO,
		0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_LISTEN_SOCKET, s->listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
		(unsigned int)s->cfg.threads, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned int)s->cfg.max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned int)s->cfg.timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
		(size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
	if (!s->mhd) {
		close(s->listen_fd);
		s->listen_fd = -1;
		return moem_errf(EIO, "http: libmicrohttpd did not start on %s", s->listen_addr);
	}
	moem_info("http: OpenAI API on http://%s/v1 (model '%s'%s), %u threads, %u connections "
		  "at most",
		  s->listen_addr, s->cfg.model_name, s->cfg.api_key ? ", API key required" : "",
		  s->cfg.threads, s->cfg.max_conns);
	return 0;
}

/* How long (s) shutdown waits for the last answers to reach clients that read them. */
#define HTTP_FLUSH_S 2

void moemd_http_stop(struct moemd *d)
{
	struct moemd_srv *s = d->srv;
	struct timespec until;

	if (!s || !s->mhd)
		return;
	/*
	 * No new connections; every request not finished ends with an error
	 * its client sees (serve.c), and the waiting connections are woken to
	 * send it: a suspended one would also keep MHD_stop_daemon from
	 * returning, and that closes every connection whatever it still has
	 * to send. So wait for them to complete first, for a bounded time (a
	 * client that does not read).
	 */
	MHD_quiesce_daemon(s->mhd);
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	pthread_mutex_unlock(&s->lock);
	moemd_serve_end_all(s);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += HTTP_FLUSH_S;
	pthread_mutex_lock(&s->lock);
	while (s->gen_conns)
		if (pthread_cond_timedwait(&s->conns_cond, &s->lock, &until) == ETIMEDOUT)
			break;
	if (s->gen_conns)
		moem_warn("http: %u connections still sending at exit: closed", s->gen_conns);
	pthread_mutex_unlock(&s->lock);
	MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	s->listen_fd = -1;
}
