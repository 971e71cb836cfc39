// SPDX-License-Identifier: GPL-2.0-only
/*
 * Streaming trace writer (trace.h). Records are assembled in memory one at
 * a time, checksummed and appended through a 1 MiB output buffer. A named
 * trace is written to a temporary file and renamed into place only after
 * a successful close. The temporary file is unnamed (O_TMPFILE) where the
 * file system allows it, so a writer killed mid-trace leaves nothing
 * behind; elsewhere it is "<path>.XXXXXX".
 *
 * MOEM_TRACE_W_EXCL (a daemon writing where a client said) links the
 * trace in without replacing anything but a trace an earlier exclusive
 * writer of this process wrote there: those files' (device, inode) pairs
 * are remembered, the last WRITTEN_MAX of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/route.h>
#include <moem/trace.h>

#include "trace_fmt.h"

#define WBUF_BYTES (1u << 20)

struct moem_trace_writer {
	struct moem_trace_info info;
	int fd;
	bool excl;	  /* MOEM_TRACE_W_EXCL */
	char *path, *tmp; /* NULL in fd mode */
	bool anon;	  /* fd is an O_TMPFILE: tmp is only a name to link it to */
	uint8_t *rec;	  /* current record */
	size_t rec_cap;
	uint8_t *wbuf;
	size_t wlen;
	int err; /* first I/O error, sticky */
	uint64_t count;
	uint64_t last_step;
	uint32_t last_layer;
	uint32_t max_tokens;
};

int moem_trc_check_info(const char *what, uint32_t flags, uint32_t source, uint32_t n_layers,
			uint32_t n_experts, uint32_t top_k, uint32_t max_tokens)
{
	if (flags & ~MOEM_TRACE_F_KNOWN)
		return moem_errf(EPROTO, "%s: unknown header flags 0x%x", what,
				 flags & ~MOEM_TRACE_F_KNOWN);
	if (source >= MOEM_TRACE_SRC_NR)
		return moem_errf(EBADMSG, "%s: unknown source %u", what, source);
	if (!n_layers || n_layers > MOEM_TRACE_MAX_LAYERS)
		return moem_errf(EBADMSG, "%s: %u MoE layers, want 1..%u", what, n_layers,
				 MOEM_TRACE_MAX_LAYERS);
	if (n_experts < 2 || n_experts > MOEM_TRACE_MAX_EXPERTS)
		return moem_errf(EBADMSG, "%s: %u experts, want 2..%u", what, n_experts,
				 MOEM_TRACE_MAX_EXPERTS);
	if (!top_k || top_k > n_experts || top_k > MOEM_TRACE_MAX_TOPK)
		return moem_errf(EBADMSG, "%s: top_k %u, want 1..min(%u, experts)", what, top_k,
				 MOEM_TRACE_MAX_TOPK);
	if (max_tokens > MOEM_TRACE_MAX_TOKENS)
		return moem_errf(EBADMSG, "%s: max_tokens %u exceeds %u", what, max_tokens,
				 MOEM_TRACE_MAX_TOKENS);
	return 0;
}

int moem_trc_check_ext(const char *what, uint32_t hidden, uint32_t inter, uint32_t depth)
{
	if (hidden > 65536 || inter > 65536 || !hidden != !inter)
		return moem_errf(EBADMSG, "%s: expert shape %ux%u (0x0 or up to 65536)", what,
				 hidden, inter);
	if (depth > MOEM_TRACE_MAX_PREGATE)
		return moem_errf(EBADMSG, "%s: pre-gate depth %u exceeds %u", what, depth,
				 MOEM_TRACE_MAX_PREGATE);
	return 0;
}

int moem_trc_check_groups(const struct moem_trace_info *in)
{
	const struct moem_route_cfg rc = {.n_experts = in->n_experts,
					  .top_k = in->top_k,
					  .n_group = in->n_group,
					  .topk_group = in->topk_group};

	if (moem_route_groups_check(&rc))
		return moem_err_prefix(EBADMSG, "expert groups");
	return 0;
}

const char *moem_trace_source_name(enum moem_trace_source s)
{
	static const char *const names[] = {"unknown", "synthetic", "engine", "bpf", "import"};

	return (unsigned)s < MOEM_TRACE_SRC_NR ? names[s] : "invalid";
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int flush(struct moem_trace_writer *w)
{
	int ret;

	if (w->err || !w->wlen)
		return w->err;
	ret = write_all(w->fd, w->wbuf, w->wlen);
	w->wlen = 0;
	if (ret)
		w->err = moem_errf(-ret, "trace %s: write: %s", w->path ? w->path : "(fd)",
				   strerror(-ret));
	return w->err;
}

static int emit(struct moem_trace_writer *w, const uint8_t *p, size_t n)
{
	while (n && !w->err) {
		size_t c = WBUF_BYTES - w->wlen;

		if (c > n)
			c = n;
		memcpy(w->wbuf + w->wlen, p, c);
		w->wlen += c;
		p += c;
		n -= c;
		if (w->wlen == WBUF_BYTES)
			flush(w);
	}
	return w->err;
}

static void fill_header(const struct moem_trace_writer *w, uint8_t *h)
{
	const struct moem_trace_info *i = &w->info;

	memset(h, 0, TRC_HDR_BYTES_1);
	memcpy(h + TRC_H_MAGIC, TRC_MAGIC, 8);
	trc_put16(h + TRC_H_MAJOR, MOEM_TRACE_VERSION_MAJOR);
	trc_put16(h + TRC_H_MINOR, MOEM_TRACE_VERSION_MINOR);
	trc_put32(h + TRC_H_BYTES, TRC_HDR_BYTES_1);
	trc_put32(h + TRC_H_FLAGS, i->flags);
	trc_put32(h + TRC_H_SOURCE, i->source);
	trc_put32(h + TRC_H_LAYERS, i->n_layers);
	trc_put32(h + TRC_H_EXPERTS, i->n_experts);
	trc_put32(h + TRC_H_TOPK, i->top_k);
	trc_put32(h + TRC_H_MAXTOK, w->max_tokens);
	trc_put64(h + TRC_H_SEED, i->seed);
	memcpy(h + TRC_H_DESC, i->desc, strnlen(i->desc, MOEM_TRACE_DESC_MAX - 1));
	trc_put32(h + TRC_H_HIDDEN, i->hidden);
	trc_put32(h + TRC_H_INTER, i->moe_inter);
	trc_put32(h + TRC_H_PREGATE, i->pregate_depth);
	trc_put16(h + TRC_H_NGROUP, (uint16_t)i->n_group);
	trc_put16(h + TRC_H_TOPKGROUP, (uint16_t)i->topk_group);
	trc_put64(h + TRC_HDR_CSUM_OFF, XXH64(h, TRC_HDR_BYTES_1, 0));
}

static int writer_new(const struct moem_trace_info *info, struct moem_trace_writer **out)
{
	struct moem_trace_writer *w;
	int ret;

	ret = moem_trc_check_info("trace", info->flags, info->source, info->n_layers,
				  info->n_experts, info->top_k, info->max_tokens);
	if (!ret)
		ret = moem_trc_check_ext("trace", info->hidden, info->moe_inter,
					 info->pregate_depth);
	if (!ret)
		ret = moem_trc_check_groups(info);
	if (ret)
		return ret == -EBADMSG ? -EINVAL : ret;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->wbuf = malloc(WBUF_BYTES);
	if (!w->wbuf) {
		free(w);
		return -ENOMEM;
	}
	w->info = *info;
	w->info.desc[MOEM_TRACE_DESC_MAX - 1] = 0;
	w->max_tokens = info->max_tokens;
	w->fd = -1;
	*out = w;
	return 0;
}

static void writer_free(struct moem_trace_writer *w)
{
	free(w->path);
	free(w->tmp);
	free(w->rec);
	free(w->wbuf);
	free(w);
}

static int start(struct moem_trace_writer *w)
{
	uint8_t h[TRC_HDR_BYTES_1];

	fill_header(w, h);
	return emit(w, h, sizeof(h));
}

/*
 * Files exclusive writers of this process wrote: those they may replace.
 * An inode number alone is not a file (a deleted trace's number is
 * reused), so the size and modification time it had when it was linked
 * in are part of its identity: a file changed since is not ours anymore.
 */
#define WRITTEN_MAX 256
struct written_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};
static struct {
	pthread_mutex_t lock;
	struct written_id id[WRITTEN_MAX];
	unsigned int n, next;
} written = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool same_file(const struct written_id *w, const struct stat *st)
{
	return w->dev == st->st_dev && w->ino == st->st_ino && w->size == st->st_size &&
	       w->mtime.tv_sec == st->st_mtim.tv_sec && w->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static void written_add(const struct stat *st)
{
	pthread_mutex_lock(&written.lock);
	written.id[written.next] =
		(struct written_id){st->st_dev, st->st_ino, st->st_size, st->st_mtim};
	written.next = (written.next + 1) % WRITTEN_MAX;
	if (written.n < WRITTEN_MAX)
		written.n++;
	pthread_mutex_unlock(&written.lock);
}

/* Is st a file we wrote? forget: and drop it (it is being removed). */
static bool written_here(const struct stat *st, bool forget)
{
	bool found = false;

	pthread_mutex_lock(&written.lock);
	for (unsigned int i = 0; i < written.n && !found; i++) {
		found = same_file(&written.id[i], st);
		if (found && forget)
			memset(&written.id[i], 0, sizeof(written.id[i]));
	}
	pthread_mutex_unlock(&written.lock);
	return found;
}

/* What is at path now: 0 (nothing, or a trace we wrote: *ours says which),
 * or -EEXIST for anything else. The name itself is never followed. */
static int excl_target(const char *path, bool forget, bool *ours)
{
	struct stat st;

	*ours = false;
	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		return moem_errf(errno, "trace %s: %s", path, strerror(errno));
	}
	if (S_ISREG(st.st_mode) && st.st_nlink == 1 && written_here(&st, forget)) {
		*ours = true;
		return 0;
	}
	return moem_errf(EEXIST,
			 "trace %s: a %s is there that moem did not write: not replacing it "
			 "(remove it, or choose another name)",
			 path, S_ISLNK(st.st_mode) ? "symbolic link" : "file");
}

int moem_trace_dest_check(const char *path)
{
	char *copy = strdup(path), *dir;
	struct stat st;
	bool ours;
	int ret;

	if (!copy)
		return -ENOMEM;
	dir = dirname(copy);
	if (stat(dir, &st))
		ret = moem_errf(errno, "trace directory %s: %s", dir, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		ret = moem_errf(ENOTDIR, "trace directory %s: not a directory", dir);
	else if (access(dir, W_OK | X_OK))
		ret = moem_errf(errno, "trace directory %s: %s", dir, strerror(errno));
	else
		ret = excl_target(path, false, &ours);
	free(copy);
	return ret;
}

int moem_trace_writer_open(const char *path, const struct moem_trace_info *info,
			   struct moem_trace_writer **out)
{
	return moem_trace_writer_open_ex(path, 0, info, out);
}

int moem_trace_writer_open_ex(const char *path, unsigned int flags,
			      const struct moem_trace_info *info, struct moem_trace_writer **out)
{
	struct moem_trace_writer *w;
	int ret;

	if (flags & ~MOEM_TRACE_W_EXCL)
		return moem_errf(EINVAL, "trace %s: unknown flags 0x%x", path, flags);
	/* renamed over at the end: a device or FIFO there would be replaced */
	ret = moem_check_out_path("trace", path, NULL, 0);
	if (ret)
		return ret;
	ret = writer_new(info, &w);
	if (ret)
		return ret;
	w->excl = flags & MOEM_TRACE_W_EXCL;
	w->path = strdup(path);
	if (!w->path || asprintf(&w->tmp, "%s.XXXXXX", path) < 0) {
		w->tmp = NULL;
		writer_free(w);
		return -ENOMEM;
	}
	{
		char *dir = strdup(path);

		w->fd = dir ? open(dirname(dir), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644) : -1;
		free(dir);
		w->anon = w->fd >= 0;
	}
	if (w->fd < 0)
		w->fd = mkstemp(w->tmp);
	if (w->fd < 0) {
		ret = moem_errf(errno, "trace %s: cannot create a file next to it: %s", path,
				strerror(errno));
		writer_free(w);
		return ret;
	}
	/* mkstemp makes 0600; a trace is an ordinary data file. */
	if (fchmod(w->fd, 0644) < 0 || (ret = start(w))) {
		ret = ret ? ret : -errno;
		moem_trace_writer_abort(w);
		return ret;
	}
	*out = w;
	return 0;
}

int moem_trace_writer_fdopen(int fd, const struct moem_trace_info *info,
			     struct moem_trace_writer **out)
{
	struct moem_trace_writer *w;
	int ret;

	ret = writer_new(info, &w);
	if (ret)
		return ret;
	w->fd = fd;
	ret = start(w);
	if (ret) {
		writer_free(w);
		return ret;
	}
	*out = w;
	return 0;
}

/* One token's k picks: ids in range, used slots first, no repeats. */
static int check_picks(const int32_t *id, uint32_t k, uint32_t N, uint32_t t, const char *what)
{
	bool ended = false;

	for (uint32_t j = 0; j < k; j++) {
		if (id[j] < 0) {
			ended = true;
			continue;
		}
		if (ended || (uint32_t)id[j] >= N)
			return moem_errf(EINVAL,
					 "trace: %stoken %u slot %u: expert %d "
					 "(out of range or after an unused slot)",
					 what, t, j, id[j]);
		for (uint32_t i = 0; i < j; i++)
			if (id[i] == id[j])
				return moem_errf(EINVAL, "trace: %stoken %u: expert %d twice", what,
						 t, id[j]);
	}
	return 0;
}

static int check_rec(const struct moem_trace_writer *w, const struct moem_trace_rec *r)
{
	const uint32_t k = w->info.top_k, N = w->info.n_experts;
	const bool logits = w->info.flags & MOEM_TRACE_F_LOGITS;

	if (r->layer >= w->info.n_layers)
		return moem_errf(EINVAL, "trace: layer %u of %u", r->layer, w->info.n_layers);
	if (!r->tokens || r->tokens > MOEM_TRACE_MAX_TOKENS ||
	    (w->info.max_tokens && r->tokens > w->info.max_tokens))
		return moem_errf(EINVAL, "trace: record of %u tokens (max %u)", r->tokens,
				 w->info.max_tokens ? w->info.max_tokens : MOEM_TRACE_MAX_TOKENS);
	if (w->count &&
	    (r->step < w->last_step || (r->step == w->last_step && r->layer <= w->last_layer)))
		return moem_errf(EINVAL,
				 "trace: record (step %llu, layer %u) after (step %llu, layer %u)",
				 (unsigned long long)r->step, r->layer,
				 (unsigned long long)w->last_step, w->last_layer);
	if (!r->ids || !r->w || logits != (r->logits != NULL))
		return moem_errf(EINVAL, "trace: record needs ids, weights%s",
				 logits ? " and logits (the header says so)" : " and no logits");
	if (!w->info.pregate_depth != !r->pregate)
		return moem_errf(EINVAL, "trace: record needs %s",
				 w->info.pregate_depth ? "pre-gate picks (the header says so)"
						       : "no pre-gate picks");
	for (uint32_t t = 0; t < r->tokens; t++) {
		const int32_t *id = r->ids + (size_t)t * k;
		const float *wt = r->w + (size_t)t * k;
		int ret = check_picks(id, k, N, t, "");

		if (ret)
			return ret;
		for (uint32_t j = 0; j < k; j++) {
			if (id[j] < 0 && wt[j] != 0)
				return moem_errf(EINVAL,
						 "trace: token %u slot %u unused but weighted", t,
						 j);
			if (!isfinite(wt[j]) || wt[j] < 0)
				return moem_errf(EINVAL, "trace: token %u: weight %g", t,
						 (double)wt[j]);
		}
	}
	for (uint32_t d = 0; d < w->info.pregate_depth; d++)
		for (uint32_t t = 0; t < r->tokens; t++) {
			int ret = check_picks(r->pregate + ((size_t)d * r->tokens + t) * k, k, N, t,
					      "pre-gate ");

			if (ret)
				return ret;
		}
	for (size_t i = 0; logits && i < (size_t)r->tokens * N; i++)
		if (isnan(r->logits[i]))
			return moem_errf(EINVAL, "trace: NaN router logit (token %zu)", i / N);
	return 0;
}

static int rec_room(struct moem_trace_writer *w, uint64_t bytes)
{
	uint8_t *nb;

	if (bytes <= w->rec_cap)
		return 0;
	nb = realloc(w->rec, bytes);
	if (!nb)
		return -ENOMEM;
	w->rec = nb;
	w->rec_cap = bytes;
	return 0;
}

/* The pre-gate record that follows a route record (1.1). */
static int write_pregate(struct moem_trace_writer *w, const struct moem_trace_rec *r)
{
	const uint32_t k = w->info.top_k, D = w->info.pregate_depth;
	uint64_t bytes = trc_pregate_bytes(r->tokens, k, D);
	size_t n = (size_t)D * r->tokens * k;
	int ret = rec_room(w, bytes);
	uint8_t *p;

	if (ret)
		return ret;
	p = w->rec;
	memset(p, 0, bytes);
	trc_put32(p, TRC_REC_MAGIC);
	trc_put32(p + 4, TRC_REC_PREGATE);
	trc_put32(p + 8, (uint32_t)bytes);
	trc_put64(p + 16, r->step);
	trc_put32(p + 24, r->layer);
	trc_put32(p + 28, r->tokens);
	trc_put32(p + 32, k);
	trc_put32(p + 36, D);
	for (size_t i = 0; i < n; i++)
		trc_put16(p + TRC_ROUTE_FIXED + 2 * i,
			  r->pregate[i] < 0 ? TRC_ID_NONE : (uint16_t)r->pregate[i]);
	trc_put64(p + bytes - 8, XXH64(p, bytes - 8, 0));
	return emit(w, p, bytes);
}

int moem_trace_write(struct moem_trace_writer *w, const struct moem_trace_rec *r)
{
	const uint32_t k = w->info.top_k, N = w->info.n_experts;
	const bool logits = w->info.flags & MOEM_TRACE_F_LOGITS;
	uint64_t bytes;
	uint8_t *p;
	size_t n;
	int ret;

	if (w->err)
		return w->err;
	ret = check_rec(w, r);
	if (ret)
		return ret;
	bytes = trc_route_bytes(r->tokens, k, N, logits);
	ret = rec_room(w, bytes);
	if (ret)
		return ret;
	p = w->rec;
	memset(p, 0, bytes);
	trc_put32(p, TRC_REC_MAGIC);
	trc_put32(p + 4, TRC_REC_ROUTE);
	trc_put32(p + 8, (uint32_t)bytes);
	trc_put32(p + 12, logits ? TRC_ROUTE_F_LOGITS : 0);
	trc_put64(p + 16, r->step);
	trc_put32(p + 24, r->layer);
	trc_put32(p + 28, r->tokens);
	trc_put32(p + 32, k);
	n = (size_t)r->tokens * k;
	p += TRC_ROUTE_FIXED;
	for (size_t i = 0; i < n; i++)
		trc_put16(p + 2 * i, r->ids[i] < 0 ? TRC_ID_NONE : (uint16_t)r->ids[i]);
	p += (n * 2 + 3) & ~(size_t)3;
	for (size_t i = 0; i < n; i++)
		trc_putf(p + 4 * i, r->ids[i] < 0 ? 0.0f : r->w[i]);
	p += n * 4;
	for (size_t i = 0; logits && i < (size_t)r->tokens * N; i++)
		trc_putf(p + 4 * i, r->logits[i]);
	trc_put64(w->rec + bytes - 8, XXH64(w->rec, bytes - 8, 0));
	ret = emit(w, w->rec, bytes);
	if (!ret && w->info.pregate_depth)
		ret = write_pregate(w, r);
	if (ret)
		return ret;
	w->count++;
	w->last_step = r->step;
	w->last_layer = r->layer;
	if (r->tokens > w->max_tokens)
		w->max_tokens = r->tokens;
	return 0;
}

uint64_t moem_trace_writer_count(const struct moem_trace_writer *w)
{
	return w->count;
}

void moem_trace_writer_set_desc(struct moem_trace_writer *w, const char *desc)
{
	memset(w->info.desc, 0, sizeof(w->info.desc));
	snprintf(w->info.desc, sizeof(w->info.desc), "%s", desc);
}

void moem_trace_writer_abort(struct moem_trace_writer *w)
{
	if (!w)
		return;
	if (w->tmp) {
		close(w->fd);
		if (!w->anon)
			unlink(w->tmp);
	}
	writer_free(w);
}

/* Give the unnamed file a temporary name next to path (then renamed). */
static int link_anon(struct moem_trace_writer *w)
{
	char proc[64];
	int fd;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", w->fd);
	fd = mkstemp(w->tmp); /* reserve a unique name */
	if (fd < 0)
		return -errno;
	close(fd);
	unlink(w->tmp);
	if (linkat(AT_FDCWD, proc, AT_FDCWD, w->tmp, AT_SYMLINK_FOLLOW) < 0)
		return -errno;
	return 0;
}

/*
 * Put the finished file (fd, named w->tmp unless anonymous) at w->path
 * without replacing a file this process did not write: over nothing, via
 * linkat (anonymous) or renameat2(RENAME_NOREPLACE), both of which fail
 * rather than replace what appeared in between.
 */
static int link_excl(struct moem_trace_writer *w)
{
	struct stat st;
	bool ours;
	int ret;

	if (fstat(w->fd, &st))
		return moem_errf(errno, "trace %s: %s", w->path, strerror(errno));
	ret = excl_target(w->path, true, &ours);
	if (ret)
		return ret;
	if (ours && unlink(w->path) && errno != ENOENT)
		return moem_errf(errno, "trace %s: %s", w->path, strerror(errno));
	if (w->anon) {
		char proc[64];

		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", w->fd);
		if (linkat(AT_FDCWD, proc, AT_FDCWD, w->path, AT_SYMLINK_FOLLOW))
			ret = -errno;
	} else if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE)) {
		ret = -errno;
		if (ret == -EINVAL) {
			/* No RENAME_NOREPLACE here: link() refuses an existing name too. */
			ret = link(w->tmp, w->path) ? -errno : 0;
			if (!ret)
				unlink(w->tmp);
		}
	}
	if (ret == -EEXIST)
		return moem_errf(EEXIST, "trace %s: a file appeared there: not replacing it",
				 w->path);
	if (ret)
		return moem_errf(-ret, "trace %s: link: %s", w->path, strerror(-ret));
	w->anon = false;
	written_add(&st);
	return 0;
}

int moem_trace_writer_close(struct moem_trace_writer *w)
{
	uint8_t end[TRC_END_BYTES] = {0}, h[TRC_HDR_BYTES_1];
	int ret;

	trc_put32(end, TRC_REC_MAGIC);
	trc_put32(end + 4, TRC_REC_END);
	trc_put32(end + 8, TRC_END_BYTES);
	trc_put64(end + 16, w->count);
	trc_put64(end + TRC_END_BYTES - 8, XXH64(end, TRC_END_BYTES - 8, 0));
	emit(w, end, sizeof(end));
	ret = flush(w);
	if (!ret && w->tmp) {
		/* A named trace learns its largest batch now: patch the header. */
		fill_header(w, h);
		errno = EIO; /* a short pwrite sets none */
		if (pwrite(w->fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || fsync(w->fd) < 0)
			ret = moem_errf(errno, "trace %s: %s", w->path, strerror(errno));
		if (w->excl) {
			if (!ret)
				ret = link_excl(w);
			close(w->fd);
			w->fd = -1;
			if (ret && !w->anon)
				unlink(w->tmp);
			writer_free(w);
			return ret;
		}
		if (!ret && w->anon) {
			ret = link_anon(w);
			if (ret)
				ret = moem_errf(-ret, "trace %s: link: %s", w->path,
						strerror(-ret));
			w->anon = ret != 0; /* named now, unless that failed */
		}
		if (close(w->fd) < 0 && !ret)
			ret = moem_errf(errno, "trace %s: close: %s", w->path, strerror(errno));
		w->fd = -1;
		if (!ret && rename(w->tmp, w->path) < 0)
			ret = moem_errf(errno, "trace %s: rename: %s", w->path, strerror(errno));
		if (ret && !w->anon)
			unlink(w->tmp);
	}
	writer_free(w);
	return ret;
}
