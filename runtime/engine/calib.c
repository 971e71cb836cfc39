// SPDX-License-Identifier: GPL-2.0-only
/* This machine's figures for hybrid execution, measured and cached (calib.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/backend.h>
#include <moem/calib.h>
#include <moem/error.h>
#include <moem/json.h>
#include <moem/util.h>

/* The CPU measurement's buffer: larger than any last-level cache we expect. */
#define CAL_MIN_BYTES (64ull << 20)
#define CAL_MAX_BYTES (512ull << 20)
#define LINK_BYTES    (256ull << 20)
#define FORMAT	      "moem-calibration"
#define MAX_FILE      (64u << 10)

int moem_calib_machine(uint32_t threads, enum moem_cpu_isa isa, struct moem_calib *c)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	memset(c, 0, sizeof(*c));
	c->version = MOEM_CALIB_VERSION;
	c->threads = threads;
	c->isa = isa;
	snprintf(c->cpu_model, sizeof(c->cpu_model), "unknown");
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		size_t n;

		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		n = strcspn(colon, "\n");
		snprintf(c->cpu_model, sizeof(c->cpu_model), "%.*s", (int)n, colon);
		break;
	}
	if (f)
		fclose(f);
	return 0;
}

/* Time one pass of the batch-1 FFN over n copies of an expert blob. */
static int cal_pass(struct moem_backend *be, enum moem_prec prec, uint32_t H, uint32_t I,
		    uint8_t *buf, uint64_t stride, uint64_t n, moem_dptr x, moem_dptr out,
		    uint64_t *ns)
{
	struct moem_ffn_expert ex[MOEM_BE_MAX_SLOTS];
	struct moem_ffn_assign as[MOEM_BE_MAX_SLOTS];
	uint64_t t0 = moem_now_ns();
	int ret = 0;

	for (uint64_t i = 0; i < n && !ret;) {
		uint32_t k = (uint32_t)moem_min(n - i, (uint64_t)MOEM_BE_MAX_SLOTS);
		struct moem_ffn_args a = {.B = 1,
					  .H = H,
					  .I = I,
					  .n_slots = MOEM_BE_MAX_SLOTS,
					  .x = x,
					  .out = out,
					  .n_experts = k,
					  .experts = ex,
					  .n_assign = k,
					  .assign = as};

		for (uint32_t j = 0; j < k; j++) {
			ex[j] = (struct moem_ffn_expert){
				(moem_dptr)(uintptr_t)(buf + (i + j) * stride), prec, j, 1};
			as[j] = (struct moem_ffn_assign){0, (uint16_t)j};
		}
		ret = moem_op_ffn(be, NULL, &a);
		i += k;
	}
	*ns = moem_now_ns() - t0;
	return ret;
}

/* One expert of B tokens (x's first B rows, assignments as), one slot a token. */
static int ffn_one(struct moem_backend *be, const struct moem_ffn_expert *ex, uint32_t H,
		   uint32_t I, moem_dptr x, moem_dptr out, const struct moem_ffn_assign *as)
{
	struct moem_ffn_args a = {.B = ex->n,
				  .H = H,
				  .I = I,
				  .n_slots = 1,
				  .x = x,
				  .out = out,
				  .n_experts = 1,
				  .experts = ex,
				  .n_assign = ex->n,
				  .assign = as};

	return moem_op_ffn(be, NULL, &a);
}

/*
 * Calls of one expert each at batch 1, over the first n experts of buf
 * (distinct weights, as a layer's CPU expert is not in the cache), each
 * made as the engine makes a layer's: after the pool has gone idle (a
 * decode layer's CPU experts are a layer's time apart, longer than the
 * workers poll), woken CAL_LEAD_NS ahead (the engine wakes it at the
 * split and issues the device's work before it calls). Back to back, the
 * workers still polling, a call cost 32-40 us on an H200 host's 16 CPUs;
 * made this way 73-83 us, and 67-111 us while the link copied: the cost
 * model priced the engine's batch-1 CPU experts at half what they took.
 * The mean ns of a call, the idle gaps not counted.
 */
#define CAL_IDLE_NS 300000u /* 3 x the pool's polling time (MOEM_TPOOL_SPIN_NS) */
#define CAL_LEAD_NS 50000u

static int cal_calls(struct moem_backend *be, enum moem_prec prec, uint32_t H, uint32_t I,
		     uint8_t *buf, uint64_t stride, uint64_t n, moem_dptr x, moem_dptr out,
		     uint64_t *ns)
{
	const struct moem_ffn_assign as = {0, 0};
	const struct timespec idle = {0, CAL_IDLE_NS};
	uint64_t sum = 0;
	int ret = 0;

	for (uint64_t i = 0; i < n && !ret; i++) {
		struct moem_ffn_expert ex = {(moem_dptr)(uintptr_t)(buf + i * stride), prec, 0, 1};
		uint64_t t0;

		nanosleep(&idle, NULL); /* a measurement's idle gap, not a wait for an event */
		t0 = moem_now_ns();
		moem_be_wake(be);
		while (moem_now_ns() - t0 < CAL_LEAD_NS)
			; /* the engine issues the device's work meanwhile */
		t0 = moem_now_ns();
		ret = ffn_one(be, &ex, H, I, x, out, &as);
		sum += moem_now_ns() - t0;
	}
	*ns = sum / moem_max(n, (uint64_t)1);
	return ret;
}

/* One expert used by every one of B tokens: the per-token compute cost. */
static int cal_tokens(struct moem_backend *be, enum moem_prec prec, uint32_t H, uint32_t I,
		      uint8_t *blob, uint32_t B, moem_dptr x, moem_dptr out, uint64_t *ns)
{
	const struct moem_ffn_expert ex = {(moem_dptr)(uintptr_t)blob, prec, 0, B};
	struct moem_ffn_assign as[MOEM_BE_MAX_TOKENS];
	uint64_t t0;
	int ret;

	for (uint32_t t = 0; t < B; t++)
		as[t] = (struct moem_ffn_assign){(uint16_t)t, 0};
	t0 = moem_now_ns();
	ret = ffn_one(be, &ex, H, I, x, out, as);
	*ns = moem_now_ns() - t0;
	return ret;
}

int moem_calib_cpu_measure(struct moem_backend *be, enum moem_prec prec, uint32_t hidden,
			   uint32_t inter, struct moem_calib_cpu *out, uint64_t *buf_bytes)
{
	const uint32_t B = MOEM_CALIB_TOKENS;
	struct moem_expert_layout l;
	uint64_t stride, want, n, best = 0, tok = 0, call = 0;
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
	size_t xbytes, obytes;
	uint8_t *buf = NULL, *x = NULL, *o = NULL;
	int ret;

	memset(out, 0, sizeof(*out));
	if (moem_backend_kind(be) != MOEM_BACKEND_CPU)
		return moem_errf(EINVAL, "calibration: the CPU kernels are measured on the CPU "
					 "backend");
	ret = moem_expert_layout(prec, hidden, inter, &l);
	if (ret)
		return ret;
	stride = moem_align_up(l.bytes, 4096);
	want = moem_min(moem_max(CAL_MIN_BYTES, llc > 0 ? 4 * (uint64_t)llc : 0), CAL_MAX_BYTES);
	n = moem_max((uint64_t)1, want / stride);
	xbytes = (size_t)B * hidden * 2;
	obytes = (size_t)moem_max((uint64_t)MOEM_BE_MAX_SLOTS, (uint64_t)B) * hidden * 4;
	buf = aligned_alloc(4096, n * stride);
	x = aligned_alloc(256, moem_align_up(xbytes, 256));
	o = aligned_alloc(256, moem_align_up(obytes, 256));
	ret = -ENOMEM;
	if (!buf || !x || !o)
		goto out;
	/* a constant bf16 / fp16 pattern (1.05): no NaN or subnormal to slow a kernel down */
	memset(buf, 0x3c, n * stride);
	memset(x, 0x3c, xbytes);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t ns;

		ret = cal_pass(be, prec, hidden, inter, buf, stride, n, (moem_dptr)(uintptr_t)x,
			       (moem_dptr)(uintptr_t)o, &ns);
		if (ret)
			goto out;
		if (!best || ns < best)
			best = ns;
		ret = cal_tokens(be, prec, hidden, inter, buf, B, (moem_dptr)(uintptr_t)x,
				 (moem_dptr)(uintptr_t)o, &ns);
		if (ret)
			goto out;
		if (!tok || ns < tok)
			tok = ns;
		/* after the pass over the whole buffer: cold again, but for the
		 * first expert, which cal_tokens() just read */
		ret = cal_calls(be, prec, hidden, inter, buf + (n > 1 ? stride : 0), stride,
				moem_min(n > 1 ? n - 1 : 1, (uint64_t)16), (moem_dptr)(uintptr_t)x,
				(moem_dptr)(uintptr_t)o, &ns);
		if (ret)
			goto out;
		if (!call || ns < call)
			call = ns;
	}
	out->gbps = (double)(n * l.bytes) / (double)moem_max(best, (uint64_t)1);
	out->token_ns = moem_max(tok / B, (uint64_t)1);
	/* what a one-expert call takes beyond its reads at the batch-1 rate */
	out->call_ns = (uint64_t)fmax(0.0, (double)call - (double)l.bytes / out->gbps);
	out->valid = true;
	if (buf_bytes)
		*buf_bytes = n * stride;
	ret = 0;
out:
	free(buf);
	free(x);
	free(o);
	return ret;
}

int moem_calib_link(struct moem_calib *c)
{
	struct moem_backend *be = NULL;
	moem_dptr dev = 0;
	void *host = NULL;
	bool registered = false;
	uint64_t best = 0;
	int ret;

	c->link_gbps = 0;
	c->link_note[0] = 0;
	ret = moem_backend_open("cuda", NULL, &be);
	if (ret) {
		snprintf(c->link_note, sizeof(c->link_note), "%s", moem_last_error());
		return -ENODEV;
	}
	host = aligned_alloc(4096, LINK_BYTES);
	ret = host ? moem_be_alloc(be, LINK_BYTES, &dev) : -ENOMEM;
	if (ret)
		goto out;
	memset(host, 0x5a, LINK_BYTES);
	ret = moem_be_host_register(be, host, LINK_BYTES);
	if (ret)
		goto out;
	registered = true;
	for (int i = 0; i < 3 && !ret; i++) {
		uint64_t t0 = moem_now_ns(), ns;

		ret = moem_be_htod(be, dev, host, LINK_BYTES, NULL);
		if (!ret)
			ret = moem_be_stream_sync(be, NULL);
		ns = moem_now_ns() - t0;
		if (!ret && (!best || ns < best))
			best = ns;
	}
	if (!ret)
		c->link_gbps = (double)LINK_BYTES / (double)moem_max(best, (uint64_t)1);
out:
	if (ret)
		snprintf(c->link_note, sizeof(c->link_note), "measuring the link failed: %s",
			 moem_last_error());
	if (registered)
		moem_be_host_unregister(be, host);
	if (dev)
		moem_be_free(be, dev);
	moem_backend_close(be);
	free(host);
	return ret;
}

int moem_calib_default_path(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	int n;

	/* XDG: a relative value is invalid and is ignored */
	if (xdg && xdg[0] == '/')
		n = snprintf(buf, size, "%s/moem/calibration.json", xdg);
	else if (home && home[0])
		n = snprintf(buf, size, "%s/.cache/moem/calibration.json", home);
	else
		return moem_errf(ENOENT, "calibration: neither XDG_CACHE_HOME nor HOME is set");
	if (n < 0 || (size_t)n >= size)
		return moem_errf(ENAMETOOLONG, "calibration: the cache path is too long");
	return 0;
}

/* mkdir -p of path's directory, 0755 (the cache directory is the user's). */
static int make_parent(const char *path)
{
	char dir[4096];
	char *slash;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return moem_errf(ENAMETOOLONG, "%s: path too long", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return moem_errf(errno, "%s: %s", dir, strerror(errno));
		*p = '/';
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return moem_errf(errno, "%s: %s", dir, strerror(errno));
	return 0;
}

static struct json_object *to_json(const struct moem_calib *c)
{
	struct json_object *o = json_object_new_object(), *m = json_object_new_object();
	struct json_object *cpu = json_object_new_object(), *link = json_object_new_object();

	json_object_object_add(o, "format", json_object_new_string(FORMAT));
	json_object_object_add(o, "version", json_object_new_int(MOEM_CALIB_VERSION));
	json_object_object_add(o, "created", json_object_new_int64(c->created));
	json_object_object_add(m, "cpu_model", json_object_new_string(c->cpu_model));
	json_object_object_add(m, "threads", json_object_new_int64(c->threads));
	json_object_object_add(m, "isa", json_object_new_string(moem_cpu_isa_name(c->isa)));
	json_object_object_add(o, "machine", m);
	json_object_object_add(o, "hidden", json_object_new_int64(c->hidden));
	json_object_object_add(o, "inter", json_object_new_int64(c->inter));
	json_object_object_add(o, "token_batch", json_object_new_int(MOEM_CALIB_TOKENS));
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct json_object *e;

		if (!c->cpu[p].valid)
			continue;
		e = json_object_new_object();
		json_object_object_add(e, "gbps", json_object_new_double(c->cpu[p].gbps));
		json_object_object_add(e, "token_ns",
				       json_object_new_int64((int64_t)c->cpu[p].token_ns));
		json_object_object_add(e, "call_ns",
				       json_object_new_int64((int64_t)c->cpu[p].call_ns));
		json_object_object_add(cpu, moem_prec_name((enum moem_prec)p), e);
	}
	json_object_object_add(o, "cpu", cpu);
	json_object_object_add(link, "h2d_gbps", json_object_new_double(c->link_gbps));
	json_object_object_add(link, "note", json_object_new_string(c->link_note));
	json_object_object_add(o, "link", link);
	return o;
}

char *moem_calib_to_json(const struct moem_calib *c, bool pretty)
{
	struct json_object *o = to_json(c);
	char *text = o ? strdup(json_object_to_json_string_ext(
				 o, (pretty ? JSON_C_TO_STRING_PRETTY : JSON_C_TO_STRING_PLAIN) |
					    JSON_C_TO_STRING_NOSLASHESCAPE))
		       : NULL;

	json_object_put(o);
	return text;
}

int moem_calib_write(const char *path, const struct moem_calib *c)
{
	char *text;
	char *tmp = NULL;
	size_t len;
	int fd = -1, ret;

	ret = make_parent(path);
	if (!ret)
		ret = moem_check_out_path("calibration", path, NULL, 0);
	if (ret)
		return ret;
	if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
		return -ENOMEM;
	fd = mkstemp(tmp);
	if (fd < 0) {
		ret = moem_errf(errno, "%s: cannot create a file next to it: %s", path,
				strerror(errno));
		free(tmp);
		return ret;
	}
	text = moem_calib_to_json(c, true);
	if (!text) {
		close(fd);
		unlink(tmp);
		free(tmp);
		return -ENOMEM;
	}
	len = strlen(text);
	ret = fchmod(fd, 0644) < 0 ? -errno : 0;
	for (size_t off = 0; !ret && off < len;) {
		ssize_t w = write(fd, text + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			ret = w < 0 ? -errno : -EIO;
		else
			off += (size_t)w;
	}
	if (!ret && (write(fd, "\n", 1) != 1 || fsync(fd) < 0))
		ret = -(errno ? errno : EIO);
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (!ret && rename(tmp, path) < 0)
		ret = -errno;
	if (ret) {
		unlink(tmp);
		ret = moem_errf(-ret, "%s: write: %s", path, strerror(-ret));
	}
	free(text);
	free(tmp);
	return ret;
}

/* A member of o of type t, or NULL. */
static struct json_object *member(struct json_object *o, const char *key, enum json_type t)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, t))
		return NULL;
	return v;
}

static bool num(struct json_object *o, const char *key, double lo, double hi, double *out)
{
	struct json_object *v;
	double d;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
		return false;
	d = json_object_get_double(v);
	if (!isfinite(d) || d < lo || d > hi)
		return false;
	*out = d;
	return true;
}

static int from_json(const char *path, struct json_object *o, struct moem_calib *c)
{
	struct json_object *m = member(o, "machine", json_type_object);
	struct json_object *cpu = member(o, "cpu", json_type_object);
	struct json_object *link = member(o, "link", json_type_object);
	struct json_object *fmt = member(o, "format", json_type_string), *s;
	double v, th, h, i;
	bool any = false;

	memset(c, 0, sizeof(*c));
	if (!fmt || strcmp(json_object_get_string(fmt), FORMAT))
		return moem_errf(EINVAL, "%s: not a moem calibration file", path);
	if (!num(o, "version", 0, 1e9, &v))
		return moem_errf(EINVAL, "%s: no version", path);
	if ((uint32_t)v != MOEM_CALIB_VERSION)
		return moem_errf(ESTALE,
				 "%s: format version %u, this moem reads %u (run moem "
				 "calibrate again)",
				 path, (uint32_t)v, MOEM_CALIB_VERSION);
	c->version = (uint32_t)v;
	if (!m || !(s = member(m, "cpu_model", json_type_string)) ||
	    !num(m, "threads", 1, 4096, &th) || !member(m, "isa", json_type_string) ||
	    moem_cpu_isa_parse(json_object_get_string(member(m, "isa", json_type_string)),
			       &c->isa) ||
	    c->isa == MOEM_CPU_ISA_AUTO)
		return moem_errf(EINVAL, "%s: \"machine\" wants cpu_model, threads and isa", path);
	snprintf(c->cpu_model, sizeof(c->cpu_model), "%s", json_object_get_string(s));
	c->threads = (uint32_t)th;
	if (!num(o, "hidden", 1, 65536, &h) || !num(o, "inter", 1, 65536, &i))
		return moem_errf(EINVAL, "%s: no expert shape (hidden, inter)", path);
	c->hidden = (uint32_t)h;
	c->inter = (uint32_t)i;
	if (num(o, "created", 0, 1e12, &v))
		c->created = (int64_t)v;
	if (!cpu)
		return moem_errf(EINVAL, "%s: no \"cpu\" figures", path);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct json_object *e =
			member(cpu, moem_prec_name((enum moem_prec)p), json_type_object);
		double g, t, k;

		if (!e)
			continue;
		if (!num(e, "gbps", 1e-6, 1e5, &g) || !num(e, "token_ns", 1, 1e9, &t) ||
		    !num(e, "call_ns", 0, 1e9, &k))
			return moem_errf(EINVAL,
					 "%s: cpu.%s wants gbps in (0, 1e5), token_ns "
					 "in 1..1e9 and call_ns in 0..1e9",
					 path, moem_prec_name((enum moem_prec)p));
		c->cpu[p] = (struct moem_calib_cpu){true, g, (uint64_t)t, (uint64_t)k};
		any = true;
	}
	if (!any)
		return moem_errf(EINVAL, "%s: no precision in \"cpu\"", path);
	if (link && num(link, "h2d_gbps", 0, 1e5, &v))
		c->link_gbps = v;
	if (link && (s = member(link, "note", json_type_string)))
		snprintf(c->link_note, sizeof(c->link_note), "%s", json_object_get_string(s));
	return 0;
}

int moem_calib_read(const char *path, struct moem_calib *c)
{
	struct json_object *o = NULL;
	char *buf = NULL;
	struct stat st;
	ssize_t n;
	int fd, ret;

	memset(c, 0, sizeof(*c));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT
				       : moem_errf(errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
		close(fd);
		return moem_errf(EINVAL,
				 "%s: not a calibration file (a regular file of at most "
				 "%u bytes)",
				 path, MAX_FILE);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = read(fd, buf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return moem_errf(EIO, "%s: short read", path);
	}
	ret = moem_json_parse(buf, (size_t)n, MAX_FILE, 8, path, &o);
	free(buf);
	if (ret)
		return ret;
	ret = json_object_is_type(o, json_type_object)
		      ? from_json(path, o, c)
		      : moem_errf(EINVAL, "%s: not a moem calibration file", path);
	json_object_put(o);
	if (ret)
		memset(c, 0, sizeof(*c));
	return ret;
}

bool moem_calib_matches(const struct moem_calib *c, const struct moem_calib *here, char *why,
			size_t size)
{
	const char *what = NULL;

	if (strcmp(c->cpu_model, here->cpu_model))
		what = "CPU model";
	else if (c->threads != here->threads)
		what = "thread count";
	else if (c->isa != here->isa)
		what = "instruction set";
	if (what && why)
		snprintf(why, size, "measured on another %s (%s, %u threads, %s; here %s, %u, %s)",
			 what, c->cpu_model, c->threads, moem_cpu_isa_name(c->isa), here->cpu_model,
			 here->threads, moem_cpu_isa_name(here->isa));
	return !what;
}

int moem_calib_cpu_for(const struct moem_calib *c, enum moem_prec prec, uint32_t hidden,
		       uint32_t inter, double *gbps, uint64_t *token_ns, uint64_t *call_ns)
{
	double scale;

	if ((unsigned int)prec >= MOEM_PREC_NR || !c->cpu[prec].valid)
		return moem_errf(ENOENT, "calibration: no %s figures", moem_prec_name(prec));
	scale = ((double)hidden * inter) / ((double)c->hidden * c->inter);
	*gbps = c->cpu[prec].gbps;
	*token_ns = moem_max((uint64_t)(c->cpu[prec].token_ns * scale + 0.5), (uint64_t)1);
	if (call_ns)
		*call_ns = c->cpu[prec].call_ns;
	return 0;
}
