// SPDX-License-Identifier: GPL-2.0-only
/*
 * Streaming trace reader (trace.h). Every size read from the file is
 * bounded before it is used: a record's length must equal what its own
 * dimensions imply, and those are checked against the header's shape, so
 * a hostile file can make the reader allocate at most one legitimate
 * record (and only if the file really holds that many bytes).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/trace.h>

#include "trace_fmt.h"

struct moem_trace_reader {
	struct moem_trace_info info;
	FILE *f;
	char *path;
	uint64_t size; /* file size, or UINT64_MAX if not a regular file */
	uint64_t off;  /* byte offset of the next record */
	uint32_t header_bytes;
	uint8_t *buf;
	size_t buf_cap;
	int32_t *ids, *pg;
	float *w, *logits;
	uint32_t *cnt;
	uint32_t *seen; /* [N] generation stamps for duplicate checks */
	uint32_t gen;
	uint32_t cap_tokens; /* arrays above hold this many tokens */
	uint64_t count;
	uint64_t last_step;
	uint32_t last_layer;
	bool ended;
};

static int rd(struct moem_trace_reader *r, void *p, size_t n, size_t *got)
{
	*got = fread(p, 1, n, r->f);
	if (*got < n && ferror(r->f))
		return moem_errf(EIO, "trace %s: read error at byte %llu", r->path,
				 (unsigned long long)(r->off + *got));
	return 0;
}

static int read_header(struct moem_trace_reader *r)
{
	uint8_t h[TRC_HDR_MAX];
	uint32_t major, minor, hb, flags, source;
	uint64_t sum;
	size_t got;
	int ret;

	ret = rd(r, h, TRC_HDR_BYTES, &got);
	if (ret)
		return ret;
	if (got < 8 || memcmp(h, TRC_MAGIC, 8))
		return moem_errf(EPROTO, "trace %s: not a moem routing trace (bad magic)", r->path);
	if (got < TRC_HDR_BYTES)
		return moem_errf(EPROTO, "trace %s: truncated header (%zu of %u bytes)", r->path,
				 got, TRC_HDR_BYTES);
	major = trc_get16(h + TRC_H_MAJOR);
	minor = trc_get16(h + TRC_H_MINOR);
	if (major != MOEM_TRACE_VERSION_MAJOR)
		return moem_errf(EPROTO,
				 "trace %s: format version %u.%u is not supported "
				 "(this reader reads %u.x)",
				 r->path, major, minor, MOEM_TRACE_VERSION_MAJOR);
	hb = trc_get32(h + TRC_H_BYTES);
	if (hb < TRC_HDR_BYTES || hb > TRC_HDR_MAX || hb % 8)
		return moem_errf(EBADMSG, "trace %s: header size %u (corrupt header)", r->path, hb);
	if (hb > TRC_HDR_BYTES) {
		ret = rd(r, h + TRC_HDR_BYTES, hb - TRC_HDR_BYTES, &got);
		if (ret)
			return ret;
		if (got < hb - TRC_HDR_BYTES)
			return moem_errf(EPROTO, "trace %s: truncated header", r->path);
	}
	sum = trc_get64(h + TRC_HDR_CSUM_OFF);
	memset(h + TRC_HDR_CSUM_OFF, 0, 8);
	if (XXH64(h, hb, 0) != sum)
		return moem_errf(EBADMSG, "trace %s: header checksum mismatch (corrupt header)",
				 r->path);
	flags = trc_get32(h + TRC_H_FLAGS);
	source = trc_get32(h + TRC_H_SOURCE);
	r->info.version_major = (uint16_t)major;
	r->info.version_minor = (uint16_t)minor;
	r->info.flags = flags;
	r->info.source = source;
	r->info.n_layers = trc_get32(h + TRC_H_LAYERS);
	r->info.n_experts = trc_get32(h + TRC_H_EXPERTS);
	r->info.top_k = trc_get32(h + TRC_H_TOPK);
	r->info.max_tokens = trc_get32(h + TRC_H_MAXTOK);
	r->info.seed = trc_get64(h + TRC_H_SEED);
	memcpy(r->info.desc, h + TRC_H_DESC, MOEM_TRACE_DESC_MAX);
	r->info.desc[MOEM_TRACE_DESC_MAX - 1] = 0;
	if (minor >= 1 && hb >= TRC_HDR_BYTES_1) {
		r->info.hidden = trc_get32(h + TRC_H_HIDDEN);
		r->info.moe_inter = trc_get32(h + TRC_H_INTER);
		r->info.pregate_depth = trc_get32(h + TRC_H_PREGATE);
	}
	if (minor >= 2 && hb >= TRC_HDR_BYTES_1) {
		r->info.n_group = trc_get16(h + TRC_H_NGROUP);
		r->info.topk_group = trc_get16(h + TRC_H_TOPKGROUP);
	}
	ret = moem_trc_check_info("trace", flags, source, r->info.n_layers, r->info.n_experts,
				  r->info.top_k, r->info.max_tokens);
	if (!ret)
		ret = moem_trc_check_ext("trace", r->info.hidden, r->info.moe_inter,
					 r->info.pregate_depth);
	if (!ret)
		ret = moem_trc_check_groups(&r->info);
	if (ret)
		return moem_err_prefix(-ret, "%s", r->path);
	r->header_bytes = hb;
	r->off = hb;
	return 0;
}

int moem_trace_open(const char *path, struct moem_trace_reader **out)
{
	struct moem_trace_reader *r;
	struct stat st;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->path = strdup(path);
	if (!r->path) {
		free(r);
		return -ENOMEM;
	}
	r->f = fopen(path, "rb");
	if (!r->f) {
		ret = moem_errf(errno, "trace %s: %s", path, strerror(errno));
		moem_trace_close(r);
		return ret;
	}
	r->size = fstat(fileno(r->f), &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size
								       : UINT64_MAX;
	ret = read_header(r);
	if (!ret) {
		r->seen = calloc(r->info.n_experts, sizeof(*r->seen));
		if (!r->seen)
			ret = -ENOMEM;
	}
	if (ret) {
		moem_trace_close(r);
		return ret;
	}
	*out = r;
	return 0;
}

const struct moem_trace_info *moem_trace_reader_info(const struct moem_trace_reader *r)
{
	return &r->info;
}

uint64_t moem_trace_reader_count(const struct moem_trace_reader *r)
{
	return r->count;
}

void moem_trace_close(struct moem_trace_reader *r)
{
	if (!r)
		return;
	if (r->f)
		fclose(r->f);
	free(r->path);
	free(r->buf);
	free(r->ids);
	free(r->pg);
	free(r->w);
	free(r->logits);
	free(r->cnt);
	free(r->seen);
	free(r);
}

int moem_trace_rewind(struct moem_trace_reader *r)
{
	if (fseeko(r->f, (off_t)r->header_bytes, SEEK_SET) < 0)
		return moem_errf(errno, "trace %s: cannot rewind: %s", r->path, strerror(errno));
	r->off = r->header_bytes;
	r->count = 0;
	r->ended = false;
	return 0;
}

static int bad(struct moem_trace_reader *r, int err, const char *why)
{
	return moem_errf(err, "trace %s: record %llu at byte %llu: %s", r->path,
			 (unsigned long long)r->count + 1, (unsigned long long)r->off, why);
}

static int grow(struct moem_trace_reader *r, size_t bytes)
{
	if (bytes > r->buf_cap) {
		uint8_t *nb = realloc(r->buf, bytes);

		if (!nb)
			return -ENOMEM;
		r->buf = nb;
		r->buf_cap = bytes;
	}
	return 0;
}

static int grow_tokens(struct moem_trace_reader *r, uint32_t tokens)
{
	const size_t k = r->info.top_k, N = r->info.n_experts;
	int32_t *ids;
	float *w, *lg = NULL;
	uint32_t *cnt;

	if (tokens <= r->cap_tokens)
		return 0;
	ids = realloc(r->ids, tokens * k * sizeof(*ids));
	if (ids)
		r->ids = ids;
	w = realloc(r->w, tokens * k * sizeof(*w));
	if (w)
		r->w = w;
	cnt = realloc(r->cnt, tokens * sizeof(*cnt));
	if (cnt)
		r->cnt = cnt;
	if (r->info.flags & MOEM_TRACE_F_LOGITS) {
		lg = realloc(r->logits, tokens * N * sizeof(*lg));
		if (lg)
			r->logits = lg;
	}
	if (r->info.pregate_depth) {
		int32_t *pg = realloc(r->pg, r->info.pregate_depth * tokens * k * sizeof(*pg));

		if (!pg)
			return -ENOMEM;
		r->pg = pg;
	}
	if (!ids || !w || !cnt || ((r->info.flags & MOEM_TRACE_F_LOGITS) && !lg))
		return -ENOMEM;
	r->cap_tokens = tokens;
	return 0;
}

/* Read the rest of a record of `bytes` whose first `have` bytes are in buf. */
static int read_body(struct moem_trace_reader *r, uint32_t bytes, size_t have)
{
	size_t got;
	int ret;

	if (r->size != UINT64_MAX && r->off + bytes > r->size)
		return bad(r, EPROTO, "truncated: the file ends inside this record");
	ret = grow(r, bytes);
	if (ret)
		return ret;
	ret = rd(r, r->buf + have, bytes - have, &got);
	if (ret)
		return ret;
	if (got < bytes - have)
		return bad(r, EPROTO, "truncated: the file ends inside this record");
	if (XXH64(r->buf, bytes - 8, 0) != trc_get64(r->buf + bytes - 8))
		return bad(r, EBADMSG, "checksum mismatch (corrupt record)");
	return 0;
}

static int decode_route(struct moem_trace_reader *r, uint32_t bytes, struct moem_trace_rec *rec)
{
	const uint32_t N = r->info.n_experts, K = r->info.top_k;
	const bool logits = r->info.flags & MOEM_TRACE_F_LOGITS;
	const uint8_t *p = r->buf;
	uint64_t step = trc_get64(p + 16);
	uint32_t flags = trc_get32(p + 12), layer = trc_get32(p + 24), tokens = trc_get32(p + 28);
	uint32_t k = trc_get32(p + 32);
	char why[160];
	size_t n;
	int ret;

	if (k != K || layer >= r->info.n_layers || !tokens || tokens > MOEM_TRACE_MAX_TOKENS ||
	    (r->info.max_tokens && tokens > r->info.max_tokens) || (flags & ~TRC_ROUTE_F_LOGITS) ||
	    !(flags & TRC_ROUTE_F_LOGITS) != !logits) {
		snprintf(why, sizeof(why),
			 "layer %u, %u tokens, k %u, flags 0x%x do not fit the "
			 "header (%u layers, k %u, max %u tokens)",
			 layer, tokens, k, flags, r->info.n_layers, K, r->info.max_tokens);
		return bad(r, EBADMSG, why);
	}
	if (trc_route_bytes(tokens, k, N, logits) != bytes)
		return bad(r, EBADMSG, "record length does not match its dimensions");
	if (r->count && (step < r->last_step || (step == r->last_step && layer <= r->last_layer))) {
		snprintf(why, sizeof(why),
			 "(step %llu, layer %u) out of order after (step %llu, "
			 "layer %u)",
			 (unsigned long long)step, layer, (unsigned long long)r->last_step,
			 r->last_layer);
		return bad(r, EBADMSG, why);
	}
	ret = read_body(r, bytes, TRC_ROUTE_FIXED);
	if (ret)
		return ret;
	ret = grow_tokens(r, tokens);
	if (ret)
		return ret;
	n = (size_t)tokens * k;
	p = r->buf + TRC_ROUTE_FIXED; /* read_body() may have moved buf */
	for (uint32_t t = 0; t < tokens; t++) {
		bool ended = false;

		r->cnt[t] = 0;
		if (++r->gen == 0) {
			memset(r->seen, 0, N * sizeof(*r->seen));
			r->gen = 1;
		}
		for (uint32_t j = 0; j < k; j++) {
			size_t i = (size_t)t * k + j;
			uint16_t id = trc_get16(p + 2 * i);
			float wt = trc_getf(p + ((n * 2 + 3) & ~(size_t)3) + 4 * i);

			if (id == TRC_ID_NONE) {
				ended = true;
				r->ids[i] = -1;
				r->w[i] = 0;
				if (wt != 0)
					return bad(r, EBADMSG, "weight on an unused slot");
				continue;
			}
			if (ended || id >= N || r->seen[id] == r->gen) {
				snprintf(why, sizeof(why),
					 "token %u slot %u: expert %u is out of "
					 "range, repeated or after an unused slot",
					 t, j, id);
				return bad(r, EBADMSG, why);
			}
			if (!isfinite(wt) || wt < 0)
				return bad(r, EBADMSG, "non-finite or negative route weight");
			r->seen[id] = r->gen;
			r->ids[i] = id;
			r->w[i] = wt;
			r->cnt[t]++;
		}
	}
	if (logits) {
		const uint8_t *lp = p + ((n * 2 + 3) & ~(size_t)3) + n * 4;

		for (size_t i = 0; i < (size_t)tokens * N; i++) {
			r->logits[i] = trc_getf(lp + 4 * i);
			if (isnan(r->logits[i]))
				return bad(r, EBADMSG, "NaN router logit");
		}
	}
	rec->step = step;
	rec->layer = layer;
	rec->tokens = tokens;
	rec->ids = r->ids;
	rec->w = r->w;
	rec->logits = logits ? r->logits : NULL;
	rec->cnt = r->cnt;
	rec->pregate = NULL;
	r->last_step = step;
	r->last_layer = layer;
	return 1;
}

/* The pre-gate record that must follow a route record when the header has D > 0. */
static int read_pregate(struct moem_trace_reader *r, struct moem_trace_rec *rec)
{
	const uint32_t K = r->info.top_k, N = r->info.n_experts, D = r->info.pregate_depth;
	uint64_t bytes = trc_pregate_bytes(rec->tokens, K, D);
	const uint8_t *p;
	size_t got;
	int ret;

	ret = rd(r, r->buf, TRC_ROUTE_FIXED, &got);
	if (ret)
		return ret;
	if (got < TRC_ROUTE_FIXED)
		return bad(r, EPROTO, "truncated: the file ends inside a pre-gate record");
	p = r->buf;
	if (trc_get32(p) != TRC_REC_MAGIC || trc_get32(p + 4) != TRC_REC_PREGATE ||
	    trc_get32(p + 8) != bytes || trc_get64(p + 16) != rec->step ||
	    trc_get32(p + 24) != rec->layer || trc_get32(p + 28) != rec->tokens ||
	    trc_get32(p + 32) != K || trc_get32(p + 36) != D)
		return bad(r, EBADMSG, "a route record without its pre-gate record");
	ret = read_body(r, (uint32_t)bytes, TRC_ROUTE_FIXED);
	if (ret)
		return ret;
	p = r->buf + TRC_ROUTE_FIXED;
	for (size_t i = 0; i < (size_t)D * rec->tokens * K; i++) {
		uint16_t id = trc_get16(p + 2 * i);

		if (id != TRC_ID_NONE && id >= N)
			return bad(r, EBADMSG, "pre-gate expert out of range");
		r->pg[i] = id == TRC_ID_NONE ? -1 : id;
	}
	r->off += bytes;
	rec->pregate = r->pg;
	return 1;
}

int moem_trace_next(struct moem_trace_reader *r, struct moem_trace_rec *rec)
{
	uint32_t type, bytes;
	size_t got;
	int ret;

	for (;;) {
		if (r->ended)
			return 0;
		ret = grow(r, TRC_ROUTE_FIXED);
		if (ret)
			return ret;
		ret = rd(r, r->buf, TRC_REC_HDR, &got);
		if (ret)
			return ret;
		if (got == 0)
			return moem_errf(EPROTO,
					 "trace %s: truncated: the file ends after %llu "
					 "records without an end record (byte %llu)",
					 r->path, (unsigned long long)r->count,
					 (unsigned long long)r->off);
		if (got < TRC_REC_HDR)
			return bad(r, EPROTO, "truncated: the file ends inside a record header");
		if (trc_get32(r->buf) != TRC_REC_MAGIC)
			return bad(r, EBADMSG,
				   "bad record magic (corrupt or not a record boundary)");
		type = trc_get32(r->buf + 4);
		bytes = trc_get32(r->buf + 8);
		if (bytes < TRC_REC_HDR + 8 || bytes % 8)
			return bad(r, EBADMSG, "impossible record length");
		if (type == TRC_REC_ROUTE) {
			if (bytes < TRC_ROUTE_FIXED + 8)
				return bad(r, EBADMSG, "route record too short");
			ret = rd(r, r->buf + TRC_REC_HDR, TRC_ROUTE_FIXED - TRC_REC_HDR, &got);
			if (ret)
				return ret;
			if (got < TRC_ROUTE_FIXED - TRC_REC_HDR)
				return bad(r, EPROTO, "truncated: the file ends inside a record");
			ret = decode_route(r, bytes, rec);
			if (ret > 0) {
				r->off += bytes;
				r->count++;
				if (r->info.pregate_depth)
					ret = read_pregate(r, rec);
			}
			return ret;
		}
		if (type == TRC_REC_END) {
			uint64_t n;

			if (bytes != TRC_END_BYTES)
				return bad(r, EBADMSG, "end record of the wrong length");
			ret = read_body(r, bytes, TRC_REC_HDR);
			if (ret)
				return ret;
			n = trc_get64(r->buf + 16);
			if (n != r->count) {
				char why[96];

				snprintf(why, sizeof(why),
					 "end record counts %llu records, "
					 "the file holds %llu",
					 (unsigned long long)n, (unsigned long long)r->count);
				return bad(r, EBADMSG, why);
			}
			if (fgetc(r->f) != EOF)
				return bad(r, EBADMSG, "data after the end record");
			r->off += bytes;
			r->ended = true;
			return 0;
		}
		/* Unknown type from a newer minor version: verify and skip. */
		if (bytes > TRC_UNKNOWN_MAX)
			return bad(r, EBADMSG, "record of unknown type and implausible length");
		ret = read_body(r, bytes, TRC_REC_HDR);
		if (ret)
			return ret;
		r->off += bytes;
	}
}
