// SPDX-License-Identifier: GPL-2.0-only
/*
 * The model server's settings: flags and config-file keys of the same
 * names (Documentation/admin-guide.md, "Serving the OpenAI API").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

void moemd_http_cfg_init(struct moemd_http_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->max_body = 8 * MOEM_MiB;
	c->threads = 4;
	c->max_conns = 1024;
	c->timeout_s = 60;
	c->stream_buffer = 4 * MOEM_MiB;
}

void moemd_http_cfg_free(struct moemd_http_cfg *c)
{
	free(c->listen);
	if (c->api_key)
		memset(c->api_key, 0, strlen(c->api_key));
	free(c->api_key);
	free(c->model_name);
	memset(c, 0, sizeof(*c));
}

static int set_str(char **field, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

static int set_u32(const char *name, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (!*v || *end || errno || x < lo || x > hi || *v == '-')
		return moem_errf(EINVAL, "%s '%s': an integer %u..%u", name, v, lo, hi);
	*out = (uint32_t)x;
	return 0;
}

/* The key: printable ASCII without spaces, 8..256 bytes. */
static int check_key(const char *k, const char *from)
{
	size_t n = strlen(k);

	if (n < 8 || n > 256)
		return moem_errf(EINVAL, "api key (%s): 8..256 bytes, not %zu", from, n);
	for (size_t i = 0; i < n; i++)
		if (k[i] <= ' ' || k[i] > '~')
			return moem_errf(EINVAL,
					 "api key (%s): printable ASCII without spaces only", from);
	return 0;
}

static int read_key_file(struct moemd_http_cfg *c, const char *path)
{
	char buf[300];
	struct stat st;
	ssize_t n;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return moem_errf(errno, "api-key-file %s: %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return moem_errf(EINVAL, "api-key-file %s: not a regular file", path);
	}
	if (st.st_mode & 0077)
		moem_warn("api-key-file %s can be read by others (mode %03o): chmod 600 it", path,
			  (unsigned int)(st.st_mode & 0777));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return moem_errf(errno, "api-key-file %s: %s", path, strerror(errno));
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = 0;
	ret = check_key(buf, path);
	if (!ret)
		ret = set_str(&c->api_key, buf);
	memset(buf, 0, sizeof(buf));
	return ret;
}

int moemd_http_cfg_set(struct moemd_http_cfg *c, struct moem_sched_opts *so, const char *name,
		       const char *v)
{
	uint64_t bytes;
	int ret;

	if (!strcmp(name, "listen")) {
		if (!*v || strlen(v) > 70)
			return moem_errf(EINVAL, "listen '%s': ADDR:PORT or none", v);
		c->listen_given = true;
		return set_str(&c->listen, v);
	}
	if (!strcmp(name, "api-key")) {
		ret = check_key(v, "--api-key");
		return ret ? ret : set_str(&c->api_key, v);
	}
	if (!strcmp(name, "api-key-file"))
		return read_key_file(c, v);
	if (!strcmp(name, "model-name")) {
		if (!*v || strlen(v) > 128 || strpbrk(v, "\"\\\n\r\t"))
			return moem_errf(EINVAL,
					 "model-name '%s': 1..128 bytes, no quotes or "
					 "control characters",
					 v);
		return set_str(&c->model_name, v);
	}
	if (!strcmp(name, "reasoning-parser")) {
		if (moem_oai_reasoning_parse(v, &c->reasoning))
			return moem_errf(EINVAL,
					 "reasoning-parser '%s': none, qwen3 or deepseek_r1", v);
		return 0;
	}
	if (!strcmp(name, "max-body")) {
		ret = moem_parse_size(v, NULL, &bytes);
		if (!ret && (bytes < 1024 || bytes > 1024 * MOEM_MiB))
			ret = moem_errf(EINVAL, "max-body '%s': 1K..1G", v);
		if (!ret)
			c->max_body = bytes;
		return ret;
	}
	if (!strcmp(name, "stream-buffer")) {
		ret = moem_parse_size(v, NULL, &bytes);
		if (!ret && (bytes < 64 * 1024 || bytes > 1024 * MOEM_MiB))
			ret = moem_errf(EINVAL, "stream-buffer '%s': 64K..1G", v);
		if (!ret)
			c->stream_buffer = bytes;
		return ret;
	}
	if (!strcmp(name, "http-threads"))
		return set_u32(name, v, 1, 64, &c->threads);
	if (!strcmp(name, "http-connections"))
		return set_u32(name, v, 4, 100000, &c->max_conns);
	if (!strcmp(name, "http-timeout"))
		return set_u32(name, v, 1, 86400, &c->timeout_s);
	if (!strcmp(name, "max-queue"))
		return set_u32(name, v, 1, 1000000, &so->max_waiting);
	if (!strcmp(name, "max-batch"))
		return set_u32(name, v, 1, 4096, &so->max_running);
	if (!strcmp(name, "step-tokens"))
		return set_u32(name, v, 1, 1u << 20, &so->step_tokens);
	if (!strcmp(name, "prefill-chunk"))
		return set_u32(name, v, 1, 1u << 20, &so->prefill_chunk);
	if (!strcmp(name, "prefix-cache")) {
		bool on;

		ret = moem_arg_bool(name, v, &on);
		if (!ret)
			c->no_prefix_cache = !on;
		return ret;
	}
	if (!strcmp(name, "dense-prec")) {
		ret = moem_prec_parse(v, &c->dense_prec);
		return ret ? moem_err_prefix(-ret, "dense-prec") : 0;
	}
	return -ENOENT;
}
