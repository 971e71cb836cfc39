// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem_pack_write(): checkpoint -> .moem pack. The whole file is planned
 * first (every offset is known before a byte is written), so worker
 * threads fill tensors and blobs independently with pwrite; the sections
 * and the header, which carry the checksums, are written last, then the
 * file is synced and renamed into place.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/pack.h>

#include "pack_fmt.h"
#include "store_int.h"

#define COPY_CHUNK (8u << 20)

enum { JOB_TENSOR, JOB_FFN };

struct pw_job {
	int type;
	uint32_t tensor;	    /* JOB_TENSOR: index into tens */
	enum moem_tensor_role role; /* JOB_FFN: EXPERT, SHARED or DENSE */
	uint32_t layer, expert;
	uint32_t n_blobs, blob[MOEM_PREC_NR];
};

struct pw_ctx {
	struct moem_ckpt *ck;
	const struct moem_model_config *cfg;
	int fd;
	const char *out;
	struct pack_tensor *tens;
	const struct moem_st_file **tens_file;
	const struct moem_st_tensor **tens_src;
	uint32_t n_tens;
	struct pack_blob *blobs;
	uint32_t n_blobs;
	char *strings;
	size_t strings_len;
	void *tok; /* the TOKENIZER section, or NULL */
	size_t tok_len;
	struct pw_job *jobs;
	size_t n_jobs;
	struct moem_progress *prog;
};

struct pw_buf {
	uint16_t *src[MOEM_MAT_NR];
	uint64_t src_cap; /* elements per matrix */
	uint8_t *blob;
	uint64_t blob_cap;
	XXH3_state_t *xxh;
};

static enum moem_tensor_role blob_role(enum moem_blob_kind k)
{
	return k == MOEM_BLOB_ROUTED   ? MOEM_TR_EXPERT
	       : k == MOEM_BLOB_SHARED ? MOEM_TR_SHARED
				       : MOEM_TR_DENSE;
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
	void *n;

	if (need <= *cap)
		return 0;
	n = realloc(*p, (size_t)need * elem);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = need;
	return 0;
}

/*
 * The first element of n that is NaN or infinite, or -1. Weights like that
 * make every output NaN (or are refused by the quantizers only): a pack
 * holds finite numbers in every precision, checked where they are read.
 */
static int64_t first_nonfinite(enum moem_dtype dt, const void *buf, uint64_t n)
{
	const uint16_t *h = buf;
	const uint32_t *w = buf;

	for (uint64_t i = 0; i < n; i++) {
		bool bad = dt == MOEM_DTYPE_F32	  ? (w[i] & 0x7f800000u) == 0x7f800000u
			   : dt == MOEM_DTYPE_F16 ? (h[i] & 0x7c00u) == 0x7c00u
						  : (h[i] & 0x7f80u) == 0x7f80u;

		if (bad)
			return (int64_t)i;
	}
	return -1;
}

static bool is_nan(enum moem_dtype dt, const void *buf, int64_t i)
{
	if (dt == MOEM_DTYPE_F32)
		return ((const uint32_t *)buf)[i] & 0x007fffffu;
	if (dt == MOEM_DTYPE_F16)
		return ((const uint16_t *)buf)[i] & 0x03ffu;
	return ((const uint16_t *)buf)[i] & 0x007fu;
}

static int nonfinite_err(const char *tensor, enum moem_dtype dt, const void *buf, int64_t i,
			 uint64_t base)
{
	return moem_errf(EDOM,
			 "tensor %s: element %llu is %s: moem packs finite weights only (in "
			 "every precision)",
			 tensor, (unsigned long long)(base + (uint64_t)i),
			 is_nan(dt, buf, i) ? "NaN" : "infinite");
}

static int copy_tensor(struct pw_ctx *x, struct pw_buf *b, uint32_t i)
{
	struct pack_tensor *t = &x->tens[i];
	const struct moem_st_tensor *src = x->tens_src[i];
	int ret = 0;

	ret = grow((void **)&b->blob, &b->blob_cap, COPY_CHUNK, 1);
	if (ret)
		return ret;
	XXH3_64bits_reset(b->xxh);
	for (uint64_t off = 0; off < t->size && !ret; off += COPY_CHUNK) {
		size_t n = (size_t)moem_min((uint64_t)COPY_CHUNK, t->size - off);

		ret = moem_st_read(x->tens_file[i], src, off, b->blob, n);
		if (!ret) {
			uint32_t es = moem_dtype_size(src->dtype);
			int64_t bad = first_nonfinite(src->dtype, b->blob, n / es);

			if (bad >= 0)
				ret = nonfinite_err(x->strings + t->name_off, src->dtype, b->blob,
						    bad, off / es);
		}
		if (!ret)
			ret = moem_store_pwrite_all(x->fd, b->blob, n, t->offset + off, x->out);
		XXH3_64bits_update(b->xxh, b->blob, n);
		if (!ret && x->prog)
			moem_progress_add(x->prog, n);
	}
	t->xxh3 = XXH3_64bits_digest(b->xxh);
	return ret;
}

static int make_blob(struct pw_ctx *x, struct pw_buf *b, struct pack_blob *d)
{
	struct moem_expert_layout l;
	char desc[96];
	int ret;

	ret = moem_expert_layout((enum moem_prec)d->prec, x->cfg->hidden, d->inter, &l);
	if (!ret)
		ret = grow((void **)&b->blob, &b->blob_cap, l.bytes, 1);
	if (ret)
		return ret;
	memset(b->blob, 0, (size_t)l.bytes);
	for (int m = 0; m < MOEM_MAT_NR && !ret; m++)
		ret = moem_quantize(l.prec, b->src[m], l.mat[m].rows, l.mat[m].cols,
				    b->blob + l.mat_off[m], l.mat[m].bytes);
	if (ret) {
		struct moem_pack_blob pb = {
			.kind = d->kind, .prec = l.prec, .layer = d->layer, .expert = d->expert};

		return moem_err_prefix(-ret, "%s", moem_pack_blob_desc(&pb, desc, sizeof(desc)));
	}
	d->xxh3 = XXH3_64bits(b->blob, (size_t)l.bytes);
	ret = moem_store_pwrite_all(x->fd, b->blob, (size_t)l.bytes, d->offset, x->out);
	if (!ret && x->prog)
		moem_progress_add(x->prog, l.bytes);
	return ret;
}

static int run_ffn(struct pw_ctx *x, struct pw_buf *b, const struct pw_job *j)
{
	uint64_t width = moem_ffn_width(x->cfg, j->role), n = width * x->cfg->hidden;
	int ret;

	if (n > b->src_cap) {
		for (int m = 0; m < MOEM_MAT_NR; m++) {
			uint16_t *p = realloc(b->src[m], (size_t)n * sizeof(uint16_t));

			if (!p)
				return -ENOMEM;
			b->src[m] = p;
		}
		b->src_cap = n;
	}
	for (int m = 0; m < MOEM_MAT_NR; m++) {
		const struct moem_st_file *f;
		const struct moem_st_tensor *t;
		char name[MOEM_TENSOR_NAME_MAX];

		ret = moem_tensor_name(x->cfg, j->role, j->layer, j->expert,
				       (enum moem_expert_mat)m, name, sizeof(name));
		if (!ret)
			ret = moem_ckpt_find(x->ck, name, &f, &t);
		if (!ret)
			ret = moem_st_read_bf16(f, t, b->src[m], n);
		if (!ret) {
			int64_t bad = first_nonfinite(MOEM_DTYPE_BF16, b->src[m], n);

			if (bad >= 0)
				ret = nonfinite_err(name, MOEM_DTYPE_BF16, b->src[m], bad, 0);
		}
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < j->n_blobs; i++) {
		ret = make_blob(x, b, &x->blobs[j->blob[i]]);
		if (ret)
			return ret;
	}
	return 0;
}

static int pw_init(void *ctx, void **scratch)
{
	struct pw_buf *b = calloc(1, sizeof(*b));

	(void)ctx;
	*scratch = b;
	if (!b)
		return -ENOMEM;
	b->xxh = XXH3_createState();
	return b->xxh ? 0 : -ENOMEM;
}

static int pw_run(void *ctx, size_t job, void *scratch)
{
	struct pw_ctx *x = ctx;
	const struct pw_job *j = &x->jobs[job];

	return j->type == JOB_TENSOR ? copy_tensor(x, scratch, j->tensor) : run_ffn(x, scratch, j);
}

static void pw_fini(void *ctx, void *scratch)
{
	struct pw_buf *b = scratch;

	(void)ctx;
	if (!b)
		return;
	for (int m = 0; m < MOEM_MAT_NR; m++)
		free(b->src[m]);
	free(b->blob);
	XXH3_freeState(b->xxh);
	free(b);
}

static const struct moem_store_jobs pw_jobs = {.init = pw_init, .run = pw_run, .fini = pw_fini};

static bool is_ffn(enum moem_tensor_role r)
{
	return r == MOEM_TR_EXPERT || r == MOEM_TR_SHARED || r == MOEM_TR_DENSE;
}

static int cmp_spec_ptr(const void *a, const void *b)
{
	return strcmp((*(const struct moem_tensor_spec *const *)a)->name,
		      (*(const struct moem_tensor_spec *const *)b)->name);
}

/* Plain tensors, sorted by name, with their string table. */
static int plan_tensors(struct pw_ctx *x)
{
	size_t n = moem_ckpt_n_specs(x->ck), k = 0, slen = 0;
	const struct moem_tensor_spec **v = malloc(sizeof(*v) * (n ? n : 1));
	int ret = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct moem_tensor_spec *s = moem_ckpt_spec(x->ck, i);

		if (!is_ffn(s->role)) {
			v[k++] = s;
			slen += strlen(s->name) + 1;
		}
	}
	qsort(v, k, sizeof(*v), cmp_spec_ptr);
	x->tens = calloc(k ? k : 1, sizeof(*x->tens));
	x->tens_file = calloc(k ? k : 1, sizeof(*x->tens_file));
	x->tens_src = calloc(k ? k : 1, sizeof(*x->tens_src));
	x->strings = malloc(slen ? slen : 1);
	if (!x->tens || !x->tens_file || !x->tens_src || !x->strings) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < k && !ret; i++) {
		struct pack_tensor *t = &x->tens[i];
		const struct moem_st_tensor *src;
		size_t nl = strlen(v[i]->name);

		ret = moem_ckpt_find(x->ck, v[i]->name, &x->tens_file[i], &src);
		if (ret)
			break;
		x->tens_src[i] = src;
		t->name_off = (uint32_t)x->strings_len;
		t->name_len = (uint32_t)nl;
		memcpy(x->strings + x->strings_len, v[i]->name, nl + 1);
		x->strings_len += nl + 1;
		t->dtype = (uint8_t)src->dtype;
		t->ndim = (uint8_t)src->ndim;
		t->role = (uint8_t)v[i]->role;
		t->layer = v[i]->layer;
		for (uint32_t d = 0; d < src->ndim; d++)
			t->shape[d] = src->shape[d];
		t->size = src->bytes;
	}
	x->n_tens = (uint32_t)k;
out:
	free(v);
	return ret;
}

static struct pw_job *new_job(struct pw_ctx *x, int type)
{
	struct pw_job *j = &x->jobs[x->n_jobs++];

	memset(j, 0, sizeof(*j));
	j->type = type;
	return j;
}

static void add_blob(struct pw_ctx *x, struct pw_job *j, enum moem_blob_kind k, enum moem_prec p)
{
	struct pack_blob *b = &x->blobs[x->n_blobs];

	memset(b, 0, sizeof(*b));
	b->kind = (uint8_t)k;
	b->prec = (uint8_t)p;
	b->layer = j->layer;
	b->expert = j->expert;
	b->inter = moem_ffn_width(x->cfg, blob_role(k));
	j->blob[j->n_blobs++] = x->n_blobs++;
}

/*
 * Jobs and blob entries. Blob file order: shared and dense MLPs by layer,
 * then routed experts by precision, layer, expert (a precision's experts
 * of one layer are contiguous: a layer-window pager reads them in one go).
 */
static int plan_blobs(struct pw_ctx *x, uint32_t mask)
{
	const struct moem_model_config *c = x->cfg;
	uint32_t n_moe = moem_n_moe_layers(c), n_prec = (uint32_t)__builtin_popcount(mask);
	size_t max_jobs = x->n_tens + c->n_layers + (size_t)n_moe * c->n_experts;
	size_t max_blobs = c->n_layers + (size_t)n_moe * c->n_experts * n_prec;
	struct pw_job **routed;
	size_t r = 0;

	x->jobs = calloc(max_jobs, sizeof(*x->jobs));
	x->blobs = calloc(max_blobs, sizeof(*x->blobs));
	routed = calloc((size_t)n_moe * c->n_experts + 1, sizeof(*routed));
	if (!x->jobs || !x->blobs || !routed) {
		free(routed);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < x->n_tens; i++)
		new_job(x, JOB_TENSOR)->tensor = i;
	for (uint32_t l = 0; l < c->n_layers; l++) {
		struct pw_job *j;

		if (moem_layer_is_moe(c, l) && !c->n_shared)
			continue;
		j = new_job(x, JOB_FFN);
		j->layer = l;
		j->role = moem_layer_is_moe(c, l) ? MOEM_TR_SHARED : MOEM_TR_DENSE;
		add_blob(x, j, j->role == MOEM_TR_SHARED ? MOEM_BLOB_SHARED : MOEM_BLOB_DENSE,
			 MOEM_PREC_BF16);
	}
	for (uint32_t l = 0; l < c->n_layers; l++) {
		if (!moem_layer_is_moe(c, l))
			continue;
		for (uint32_t e = 0; e < c->n_experts; e++) {
			struct pw_job *j = new_job(x, JOB_FFN);

			j->role = MOEM_TR_EXPERT;
			j->layer = l;
			j->expert = e;
			routed[r++] = j;
		}
	}
	for (int p = 0; p < MOEM_PREC_NR; p++)
		if (mask & (1u << p))
			for (size_t i = 0; i < r; i++)
				add_blob(x, routed[i], MOEM_BLOB_ROUTED, (enum moem_prec)p);
	free(routed);
	return 0;
}

struct meta_plan {
	struct pack_header h;
	uint64_t off;
};

static void add_section(struct meta_plan *m, uint32_t type, uint32_t flags, uint64_t size)
{
	struct pack_section *s = &m->h.sect[m->h.n_sections++];

	s->type = type;
	s->flags = flags;
	s->offset = m->off;
	s->size = size;
	m->off = moem_align_up(m->off + size, 8);
}

/* Assign every offset; returns the file size. */
static uint64_t plan_layout(struct pw_ctx *x, struct meta_plan *m, size_t cfg_json,
			    size_t synth_json)
{
	uint64_t off;

	m->off = PACK_HDR_SIZE;
	add_section(m, PACK_SECT_CONFIG, 0, sizeof(struct pack_config));
	add_section(m, PACK_SECT_STRINGS, 0, x->strings_len);
	add_section(m, PACK_SECT_TENSORS, 0, (uint64_t)x->n_tens * sizeof(struct pack_tensor));
	add_section(m, PACK_SECT_BLOBS, 0, (uint64_t)x->n_blobs * sizeof(struct pack_blob));
	add_section(m, PACK_SECT_CONFIG_JSON, PACK_SECT_F_OPTIONAL, cfg_json);
	if (synth_json)
		add_section(m, PACK_SECT_SYNTH_JSON, PACK_SECT_F_OPTIONAL, synth_json);
	if (x->tok_len)
		add_section(m, PACK_SECT_TOKENIZER, PACK_SECT_F_OPTIONAL, x->tok_len);
	off = m->h.data_offset = moem_align_up(m->off, MOEM_PACK_ALIGN);
	for (uint32_t i = 0; i < x->n_tens; i++) {
		x->tens[i].offset = off;
		off = moem_align_up(off + x->tens[i].size, MOEM_PACK_ALIGN);
	}
	for (uint32_t i = 0; i < x->n_blobs; i++) {
		struct moem_expert_layout l;

		moem_expert_layout((enum moem_prec)x->blobs[i].prec, x->cfg->hidden,
				   x->blobs[i].inter, &l);
		x->blobs[i].offset = off;
		x->blobs[i].size = l.bytes;
		off += l.bytes;
	}
	return off;
}

static int write_meta(struct pw_ctx *x, struct meta_plan *m, const char *cfg_json,
		      const char *synth_json)
{
	uint64_t meta_len = m->h.data_offset - PACK_HDR_SIZE;
	uint8_t *meta = calloc(1, (size_t)meta_len);
	struct pack_config pc;
	int ret;

	if (!meta)
		return -ENOMEM;
	moem_pack_config_encode(x->cfg, &pc);
	for (uint32_t i = 0; i < m->h.n_sections; i++) {
		struct pack_section *s = &m->h.sect[i];
		const void *src = s->type == PACK_SECT_CONFIG	     ? (const void *)&pc
				  : s->type == PACK_SECT_STRINGS     ? (const void *)x->strings
				  : s->type == PACK_SECT_TENSORS     ? (const void *)x->tens
				  : s->type == PACK_SECT_BLOBS	     ? (const void *)x->blobs
				  : s->type == PACK_SECT_CONFIG_JSON ? (const void *)cfg_json
				  : s->type == PACK_SECT_TOKENIZER   ? (const void *)x->tok
								     : (const void *)synth_json;

		if (s->size)
			memcpy(meta + s->offset - PACK_HDR_SIZE, src, (size_t)s->size);
		s->xxh3 = XXH3_64bits(meta + s->offset - PACK_HDR_SIZE, (size_t)s->size);
	}
	ret = moem_pack_compute_id(&m->h, meta, meta_len, m->h.id);
	if (!ret) {
		m->h.header_xxh3 = XXH3_64bits(&m->h, PACK_HDR_SUM_OFF);
		ret = moem_store_pwrite_all(x->fd, meta, (size_t)meta_len, PACK_HDR_SIZE, x->out);
	}
	if (!ret)
		ret = moem_store_pwrite_all(x->fd, &m->h, PACK_HDR_SIZE, 0, x->out);
	free(meta);
	return ret;
}

static int check_precisions(const struct moem_model_config *c, uint32_t mask)
{
	struct moem_expert_layout l;

	if (!mask || mask >= (1u << MOEM_PREC_NR))
		return moem_errf(EINVAL, "pack: no valid precision requested");
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		int ret;

		if (!(mask & (1u << p)))
			continue;
		ret = moem_expert_layout((enum moem_prec)p, c->hidden, c->moe_inter, &l);
		if (ret)
			return moem_err_prefix(-ret, "precision %s does not fit experts of %u x %u",
					       moem_prec_name((enum moem_prec)p), c->hidden,
					       c->moe_inter);
	}
	return 0;
}

/* An O_TMPFILE in path's directory, or -1 where the file system has none. */
static int open_anon(const char *path)
{
	char *dir = strdup(path);
	int fd;

	if (!dir)
		return -1;
	fd = open(dirname(dir), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
	free(dir);
	return fd;
}

/* Give the unnamed file fd a fresh name: tmp's XXXXXX made unique by
 * linkat itself (it never replaces), so no empty placeholder exists. */
static int link_anon(int fd, char *tmp)
{
	static const char set[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	char proc[64], *x = tmp + strlen(tmp) - 6;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	for (int tries = 0; tries < 100; tries++) {
		uint8_t r[6];

		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return -EIO;
		for (int i = 0; i < 6; i++)
			x[i] = set[r[i] % (sizeof(set) - 1)];
		if (!linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW))
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/*
 * The pack replaces out_path by rename: refuse a device or FIFO there, and a
 * file of the checkpoint being read (--out model/model.safetensors would
 * destroy the weights the pack was made from).
 */
static int out_not_input(const struct moem_pack_opts *o)
{
	struct stat d, p;
	char *dir, *slash;
	const char *base;
	int ret = moem_check_out_path("pack", o->out_path, NULL, 0);

	if (ret || !o->model_dir || stat(o->out_path, &p))
		return ret;
	dir = strdup(o->out_path);
	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = 0;
	base = strrchr(o->out_path, '/') ? strrchr(o->out_path, '/') + 1 : o->out_path;
	if (!stat(slash ? dir : ".", &p) && !stat(o->model_dir, &d) && p.st_dev == d.st_dev &&
	    p.st_ino == d.st_ino &&
	    ((strlen(base) > 12 && !strcmp(base + strlen(base) - 12, ".safetensors")) ||
	     (strlen(base) > 5 && !strcmp(base + strlen(base) - 5, ".json"))))
		ret = moem_errf(EINVAL,
				"pack %s: a file of the checkpoint being packed (%s): writing "
				"would destroy it",
				o->out_path, o->model_dir);
	free(dir);
	return ret;
}

int moem_pack_write(const struct moem_pack_opts *o)
{
	struct pw_ctx x = {.fd = -1, .out = o->out_path};
	struct meta_plan m = {0};
	const char *cfg_json, *synth_json;
	size_t cfg_len, synth_len;
	uint64_t size;
	char *tmp = NULL;
	bool anon = false;
	int ret;

	ret = moem_ckpt_open(o->model_dir, &x.ck);
	if (ret)
		return ret;
	x.cfg = moem_ckpt_config(x.ck);
	ret = check_precisions(x.cfg, o->prec_mask);
	if (!ret)
		ret = plan_tensors(&x);
	if (!ret)
		ret = plan_blobs(&x, o->prec_mask);
	if (ret)
		goto out;
	ret = moem_pack_tok_build(o->model_dir, &x.tok, &x.tok_len);
	if (ret)
		goto out;
	cfg_json = moem_ckpt_config_text(x.ck, &cfg_len);
	synth_json = moem_ckpt_synth_text(x.ck, &synth_len);
	memcpy(m.h.magic, PACK_MAGIC, 8);
	m.h.major = MOEM_PACK_MAJOR;
	m.h.minor = MOEM_PACK_MINOR;
	m.h.header_size = PACK_HDR_SIZE;
	m.h.prec_mask = o->prec_mask;
	if (x.cfg->n_group)
		m.h.flags |= PACK_F_ROUTE_GROUPS;
	size = plan_layout(&x, &m, cfg_len, synth_json ? synth_len : 0);
	m.h.file_size = size;
	if (m.h.data_offset - PACK_HDR_SIZE > PACK_MAX_META) {
		ret = moem_errf(EFBIG, "pack: %llu bytes of index, more than the format allows",
				(unsigned long long)(m.h.data_offset - PACK_HDR_SIZE));
		goto out;
	}
	tmp = malloc(strlen(o->out_path) + 16);
	if (!tmp) {
		ret = -ENOMEM;
		goto out;
	}
	sprintf(tmp, "%s.tmp-XXXXXX", o->out_path);
	ret = out_not_input(o);
	if (ret)
		goto out;
	/* An unnamed file in the destination's directory: a pack killed
	 * mid-write leaves nothing behind. Named only where the file system
	 * has no O_TMPFILE (then a kill leaves OUT.tmp-XXXXXX). */
	x.fd = open_anon(o->out_path);
	anon = x.fd >= 0;
	if (!anon)
		x.fd = mkostemp(tmp, O_CLOEXEC);
	if (x.fd < 0) {
		ret = moem_errf(errno, "cannot create a temporary file next to %s: %s", o->out_path,
				strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	if (fchmod(x.fd, 0644) || ftruncate(x.fd, (off_t)size)) {
		ret = moem_errf(errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	x.prog = o->progress;
	if (x.prog)
		moem_progress_start(x.prog, "pack", size - m.h.data_offset, true);
	ret = moem_store_run_jobs(&pw_jobs, &x, x.n_jobs, o->threads);
	if (x.prog)
		moem_progress_finish(x.prog);
	if (!ret)
		ret = write_meta(&x, &m, cfg_json, synth_json);
	if (!ret && fdatasync(x.fd))
		ret = moem_errf(errno, "%s: sync: %s", o->out_path, strerror(errno));
	if (!ret && anon) {
		ret = link_anon(x.fd, tmp);
		if (ret)
			ret = moem_errf(-ret, "%s: link: %s", o->out_path, strerror(-ret));
		else
			anon = false; /* named now: unlinked below on failure */
	}
	if (!ret && rename(tmp, o->out_path))
		ret = moem_errf(errno, "%s: %s", o->out_path, strerror(errno));
out:
	if (x.fd >= 0)
		close(x.fd);
	if (ret && tmp && !anon)
		unlink(tmp);
	free(tmp);
	free(x.jobs);
	free(x.blobs);
	free(x.tens);
	free(x.tens_file);
	free(x.tens_src);
	free(x.strings);
	free(x.tok);
	moem_ckpt_close(x.ck);
	return ret;
}
