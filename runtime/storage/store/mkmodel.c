// SPDX-License-Identifier: GPL-2.0-only
/*
 * Synthetic checkpoints in the real Hugging Face layout (store.h,
 * Documentation/synthetic-models.md). Every tensor is filled from its own
 * random stream, seeded by (seed, XXH3 of its name), so the bytes depend
 * on neither the thread count nor the sharding.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>

#include <moem/error.h>
#include <moem/half.h>
#include <moem/store.h>

#include "store_int.h"

/* E[silu(g)^2] for g ~ N(0, 1) (numerical quadrature; fixed for same bytes). */
#define SILU2_MEAN  0.35577552
#define CHUNK_ELEMS (256u * 1024)
#define MAX_SHARDS  1024
#define N_TOK_FILES 4 /* moem_store_tok_file() names */
#define N_SIDE	    (3 + N_TOK_FILES)

struct mk_file {
	char *tmp, *final;
	int fd;
	struct moem_st_writer *w;
};

struct mk_job {
	const struct moem_tensor_spec *spec;
	struct mk_file *file;
	uint32_t idx;	     /* in the file's writer */
	uint64_t off, bytes; /* absolute, once the header is laid out */
};

struct mk_ctx {
	struct moem_model_config cfg;
	struct moem_synth_params synth;
	double moe_scale, gain;
	float *basis; /* [moe layers][E][hidden] unit rows */
	struct mk_job *jobs;
	size_t n_jobs;
	struct moem_progress *prog;
};

static const struct {
	const char *name;
	struct moem_model_config cfg;
} presets[MOEM_PRESET_NR] = {
	[MOEM_PRESET_QWEN3_30B_A3B] = {"qwen3-30b-a3b",
				       {.arch = MOEM_ARCH_QWEN3_MOE,
					.hidden = 2048,
					.n_layers = 48,
					.n_experts = 128,
					.top_k = 8,
					.moe_inter = 768,
					.dense_inter = 6144,
					.sparse_step = 1,
					.norm_topk_prob = true,
					.rms_eps = 1e-6f,
					.rope_theta = 1e6f,
					.vocab = 151936,
					.n_heads = 32,
					.n_kv_heads = 4,
					.head_dim = 128}},
	[MOEM_PRESET_MIXTRAL_8X7B] = {"mixtral-8x7b",
				      {.arch = MOEM_ARCH_MIXTRAL,
				       .hidden = 4096,
				       .n_layers = 32,
				       .n_experts = 8,
				       .top_k = 2,
				       .moe_inter = 14336,
				       .sparse_step = 1,
				       .norm_topk_prob = true,
				       .rms_eps = 1e-5f,
				       .rope_theta = 1e6f,
				       .vocab = 32000,
				       .n_heads = 32,
				       .n_kv_heads = 8,
				       .head_dim = 128}},
	[MOEM_PRESET_OLMOE_1B_7B] = {"olmoe-1b-7b",
				     {.arch = MOEM_ARCH_OLMOE,
				      .hidden = 2048,
				      .n_layers = 16,
				      .n_experts = 64,
				      .top_k = 8,
				      .moe_inter = 1024,
				      .sparse_step = 1,
				      .rms_eps = 1e-5f,
				      .rope_theta = 10000.0f,
				      .vocab = 50304,
				      .n_heads = 16,
				      .n_kv_heads = 16,
				      .head_dim = 128}},
	[MOEM_PRESET_DEEPSEEK_V2_LITE] = {"deepseek-v2-lite",
					  {.arch = MOEM_ARCH_DEEPSEEK_V2,
					   .hidden = 2048,
					   .n_layers = 27,
					   .n_experts = 64,
					   .top_k = 6,
					   .moe_inter = 1408,
					   .dense_inter = 10944,
					   .n_shared = 2,
					   .shared_inter = 1408,
					   .first_dense = 1,
					   .sparse_step = 1,
					   .rms_eps = 1e-6f,
					   .rope_theta = 10000.0f,
					   .vocab = 102400,
					   .n_heads = 16,
					   .n_kv_heads = 16,
					   .head_dim = 192,
					   .kv_lora_rank = 512,
					   .qk_nope_dim = 128,
					   .qk_rope_dim = 64,
					   .v_head_dim = 128}},
	/* DeepSeek-V2 (236B): group-limited routing, routed_scaling_factor 16, q LoRA */
	[MOEM_PRESET_DEEPSEEK_V2] = {"deepseek-v2",
				     {.arch = MOEM_ARCH_DEEPSEEK_V2,
				      .hidden = 5120,
				      .n_layers = 60,
				      .n_experts = 160,
				      .top_k = 6,
				      .moe_inter = 1536,
				      .dense_inter = 12288,
				      .n_shared = 2,
				      .shared_inter = 1536,
				      .first_dense = 1,
				      .sparse_step = 1,
				      .routed_scaling = 16.0f,
				      .n_group = 8,
				      .topk_group = 3,
				      .rms_eps = 1e-6f,
				      .rope_theta = 10000.0f,
				      .vocab = 102400,
				      .n_heads = 128,
				      .n_kv_heads = 128,
				      .head_dim = 192,
				      .kv_lora_rank = 512,
				      .q_lora_rank = 1536,
				      .qk_nope_dim = 128,
				      .qk_rope_dim = 64,
				      .v_head_dim = 128}},
};

const char *moem_preset_name(enum moem_mkmodel_preset p)
{
	return (unsigned int)p < MOEM_PRESET_NR ? presets[p].name : "?";
}

int moem_preset_parse(const char *s, enum moem_mkmodel_preset *out)
{
	for (int i = 0; i < MOEM_PRESET_NR; i++) {
		if (!strcmp(s, presets[i].name)) {
			*out = (enum moem_mkmodel_preset)i;
			return 0;
		}
	}
	return moem_errf(EINVAL,
			 "unknown preset '%s' (qwen3-30b-a3b, mixtral-8x7b, "
			 "olmoe-1b-7b, deepseek-v2-lite, deepseek-v2)",
			 s);
}

enum moem_mkmodel_preset moem_preset_of_arch(enum moem_arch a)
{
	for (int i = 0; i < MOEM_PRESET_NR; i++)
		if (presets[i].cfg.arch == a)
			return (enum moem_mkmodel_preset)i;
	return MOEM_PRESET_QWEN3_30B_A3B;
}

void moem_mkmodel_defaults(struct moem_mkmodel_opts *o, enum moem_mkmodel_preset p)
{
	memset(o, 0, sizeof(*o));
	o->cfg = presets[(unsigned int)p < MOEM_PRESET_NR ? p : 0].cfg;
	o->cfg.dtype = MOEM_DTYPE_BF16;
	if (!o->cfg.routed_scaling)
		o->cfg.routed_scaling = 1.0f;
	o->cfg.n_layers = 4;
	o->cfg.vocab = 4096;
	moem_synth_defaults(&o->synth, 1, o->cfg.n_experts, o->cfg.top_k, 1);
	o->moe_scale = 0.03;
	o->shards = 1;
}

/* Approximately N(0, 1): Irwin-Hall sum of four 16-bit uniforms (one draw). */
static inline float fast_normal(struct moem_rng *r)
{
	uint64_t x = moem_rng_u64(r);
	uint32_t s = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) +
		     (uint32_t)((x >> 32) & 0xffff) + (uint32_t)(x >> 48);

	return ((float)s - 131070.0f) * 2.6429375e-5f; /* sqrt(3) / 65536 */
}

/* Standard deviation of a random tensor; 0 for norms (all ones). */
static double tensor_std(const struct mk_ctx *x, const struct moem_tensor_spec *s)
{
	double h = x->cfg.hidden, cols = s->ndim == 2 ? (double)s->shape[1] : 1.0;

	switch (s->role) {
	case MOEM_TR_EMBED:
		return x->gain;
	case MOEM_TR_LM_HEAD:
		return 1.0 / sqrt(h);
	case MOEM_TR_ATTN:
		if (s->ndim == 1)
			return 0.0;
		/* o_proj writes into the residual: keep it as small as an expert's output. */
		if (strstr(s->name, ".o_proj."))
			return x->moe_scale * x->gain / sqrt(cols);
		return 1.0 / sqrt(cols);
	case MOEM_TR_EXPERT:
	case MOEM_TR_SHARED:
	case MOEM_TR_DENSE:
		if (s->mat != MOEM_MAT_DOWN)
			return 1.0 / sqrt(h);
		return x->moe_scale * x->gain / sqrt(cols * SILU2_MEAN);
	default:
		return 0.0;
	}
}

static void store_elems(enum moem_dtype dt, const float *v, uint32_t n, uint8_t *dst)
{
	for (uint32_t i = 0; i < n; i++) {
		if (dt == MOEM_DTYPE_F32) {
			memcpy(dst + 4 * (size_t)i, &v[i], 4);
		} else {
			uint16_t h = dt == MOEM_DTYPE_BF16 ? moem_f32_to_bf16(v[i])
							   : moem_f32_to_f16(v[i]);

			memcpy(dst + 2 * (size_t)i, &h, 2);
		}
	}
}

static int gen_tensor(struct mk_ctx *x, const struct mk_job *j, float *val, uint8_t *raw)
{
	const struct moem_tensor_spec *s = j->spec;
	const uint32_t esz = moem_dtype_size(x->cfg.dtype);
	const uint64_t n = j->bytes / esz, H = x->cfg.hidden;
	const float std = (float)tensor_std(x, s);
	const float *rows = NULL;
	struct moem_rng r;
	int ret;

	moem_rng_seed(&r, x->synth.seed, XXH3_64bits(s->name, strlen(s->name)));
	if (s->role == MOEM_TR_ROUTER)
		rows = x->basis + (size_t)moem_moe_index(&x->cfg, s->layer) * x->cfg.n_experts * H;
	for (uint64_t i = 0; i < n; i += CHUNK_ELEMS) {
		uint32_t m = (uint32_t)moem_min((uint64_t)CHUNK_ELEMS, n - i);

		if (rows) {
			for (uint32_t k = 0; k < m; k++)
				val[k] = (float)(x->gain * rows[i + k]);
		} else if (std == 0.0f) {
			for (uint32_t k = 0; k < m; k++)
				val[k] = 1.0f;
		} else {
			for (uint32_t k = 0; k < m; k++)
				val[k] = fast_normal(&r) * std;
		}
		store_elems(x->cfg.dtype, val, m, raw);
		ret = moem_store_pwrite_all(j->file->fd, raw, (size_t)m * esz, j->off + i * esz,
					    j->file->final);
		if (ret)
			return ret;
		if (x->prog)
			moem_progress_add(x->prog, (uint64_t)m * esz);
	}
	return 0;
}

/* One generating thread's buffers: a chunk of values and of their encoding. */
struct mk_scratch {
	float *val;
	uint8_t *raw;
};

static int mk_init(void *ctx, void **scratch)
{
	struct mk_scratch *sc = calloc(1, sizeof(*sc));

	(void)ctx;
	*scratch = sc;
	if (!sc)
		return -ENOMEM;
	sc->val = malloc(sizeof(float) * CHUNK_ELEMS);
	sc->raw = malloc(4 * (size_t)CHUNK_ELEMS);
	return sc->val && sc->raw ? 0 : -ENOMEM;
}

static int mk_run(void *ctx, size_t job, void *scratch)
{
	struct mk_ctx *x = ctx;
	struct mk_scratch *sc = scratch;

	return gen_tensor(x, &x->jobs[job], sc->val, sc->raw);
}

static void mk_fini(void *ctx, void *scratch)
{
	struct mk_scratch *sc = scratch;

	(void)ctx;
	if (!sc)
		return;
	free(sc->val);
	free(sc->raw);
	free(sc);
}

static const struct moem_store_jobs mk_jobs = {.init = mk_init, .run = mk_run, .fini = mk_fini};

/* Write buf (and a newline when nl) to dir/.name.tmp; renamed to dir/name at the end. */
static int write_side_file(const char *dir, const char *name, const char *buf, size_t len, bool nl,
			   struct mk_file *f)
{
	char tmpname[300];
	int ret;

	snprintf(tmpname, sizeof(tmpname), ".%s.tmp", name);
	f->tmp = moem_store_path_join(dir, tmpname);
	f->final = moem_store_path_join(dir, name);
	if (!f->tmp || !f->final)
		return -ENOMEM;
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (f->fd < 0)
		return moem_errf(errno, "%s: %s", f->tmp, strerror(errno));
	ret = moem_store_pwrite_all(f->fd, buf, len, 0, f->final);
	if (!ret && nl)
		ret = moem_store_pwrite_all(f->fd, "\n", 1, len, f->final);
	return ret;
}

static int write_json_file(const char *dir, const char *name, struct json_object *o,
			   struct mk_file *f)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
								  JSON_C_TO_STRING_SPACED |
								  JSON_C_TO_STRING_NOSLASHESCAPE);

	return s ? write_side_file(dir, name, s, strlen(s), true, f) : -ENOMEM;
}

/*
 * Copy the tokenizer files (o->tokenizer: tokenizer.json or its directory)
 * into dir under temporary names, tok[i] for moem_store_tok_file(i).
 */
static int copy_tokenizer(const char *dir, const char *src, struct mk_file *tok)
{
	struct stat st;
	char *sdir = NULL;
	int ret = 0;

	if (stat(src, &st))
		return moem_errf(errno, "%s: %s", src, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		sdir = strdup(src);
	} else {
		const char *slash = strrchr(src, '/');

		sdir = slash ? strndup(src, (size_t)(slash - src + 1)) : strdup(".");
	}
	if (!sdir)
		return -ENOMEM;
	for (size_t i = 0; !ret && i < N_TOK_FILES && moem_store_tok_file(i, NULL); i++) {
		const char *name = moem_store_tok_file(i, NULL);
		char *path =
			i || S_ISDIR(st.st_mode) ? moem_store_path_join(sdir, name) : strdup(src);
		char *buf = NULL;
		size_t len = 0;
		uint64_t max;

		moem_store_tok_file(i, &max);
		if (!path) {
			ret = -ENOMEM;
			break;
		}
		if (i && access(path, F_OK)) { /* only tokenizer.json is required */
			free(path);
			continue;
		}
		ret = moem_store_read_file(path, max, &buf, &len);
		if (!ret)
			ret = write_side_file(dir, name, buf, len, false, &tok[i]);
		free(buf);
		free(path);
	}
	free(sdir);
	return ret;
}

static int check_dir(const char *dir, bool *created)
{
	static const char *const marks[] = {"config.json", "model.safetensors",
					    "model.safetensors.index.json"};
	struct stat st;

	*created = false;
	if (!mkdir(dir, 0755)) {
		*created = true;
		return 0;
	}
	if (errno != EEXIST)
		return moem_errf(errno, "%s: %s", dir, strerror(errno));
	if (stat(dir, &st) || !S_ISDIR(st.st_mode))
		return moem_errf(ENOTDIR, "%s: not a directory", dir);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(marks); i++) {
		char *p = moem_store_path_join(dir, marks[i]);
		bool exists = p && !stat(p, &st);

		free(p);
		if (exists)
			return moem_errf(EEXIST, "%s already holds a model (%s); remove it first",
					 dir, marks[i]);
	}
	return 0;
}

/* Assign tensors to n shards by cumulative bytes (state_dict order). */
static uint32_t plan_shards(const struct moem_tensor_spec *s, size_t n, const uint64_t *bytes,
			    uint32_t want, uint32_t *shard_of)
{
	uint64_t total = 0, cum = 0;
	uint32_t map[MAX_SHARDS], used = 0;

	for (size_t i = 0; i < n; i++)
		total += bytes[i];
	if (want > n)
		want = (uint32_t)n;
	for (uint32_t k = 0; k < want; k++)
		map[k] = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		uint32_t k = total ? (uint32_t)(cum * want / total) : 0;

		shard_of[i] = k < want ? k : want - 1;
		cum += bytes[i];
	}
	/* Drop empty shards: numbering follows the files actually written. */
	for (size_t i = 0; i < n; i++)
		if (map[shard_of[i]] == UINT32_MAX)
			map[shard_of[i]] = used++;
	for (size_t i = 0; i < n; i++)
		shard_of[i] = map[shard_of[i]];
	(void)s;
	return used;
}

struct spec_ref {
	const struct moem_tensor_spec *s;
	size_t i;
};

static int cmp_spec_name(const void *a, const void *b)
{
	return strcmp(((const struct spec_ref *)a)->s->name, ((const struct spec_ref *)b)->s->name);
}

static int open_shards(struct mk_ctx *x, const char *dir, struct moem_tensor_spec *specs, size_t n,
		       const uint32_t *shard_of, struct mk_file *files, uint32_t nf)
{
	struct spec_ref *order = malloc(sizeof(*order) * n);
	int ret = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		order[i] = (struct spec_ref){&specs[i], i};
	qsort(order, n, sizeof(*order), cmp_spec_name);
	for (uint32_t f = 0; f < nf && !ret; f++) {
		char name[64], tmp[80];
		uint64_t size;

		if (nf == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors", f + 1, nf);
		snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
		files[f].tmp = moem_store_path_join(dir, tmp);
		files[f].final = moem_store_path_join(dir, name);
		ret = files[f].tmp && files[f].final ? moem_st_writer_create(&files[f].w) : -ENOMEM;
		if (!ret)
			ret = moem_st_writer_meta(files[f].w, "moem", "synthetic (moem mkmodel)");
		for (size_t k = 0; k < n && !ret; k++) {
			uint32_t idx;

			if (shard_of[order[k].i] != f)
				continue;
			ret = moem_st_writer_add(files[f].w, order[k].s->name, x->cfg.dtype,
						 order[k].s->ndim, order[k].s->shape, &idx);
			if (!ret) {
				struct mk_job *j = &x->jobs[order[k].i];

				j->spec = order[k].s;
				j->file = &files[f];
				j->idx = idx;
			}
		}
		if (!ret)
			ret = moem_st_writer_layout(files[f].w, &size);
		if (ret)
			break;
		for (size_t k = 0; k < n; k++) {
			struct mk_job *j = &x->jobs[k];

			if (j->file == &files[f])
				moem_st_writer_offset(files[f].w, j->idx, &j->off, &j->bytes);
		}
		files[f].fd = open(files[f].tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (files[f].fd < 0) {
			ret = moem_errf(errno, "%s: %s", files[f].tmp, strerror(errno));
			break;
		}
		if (ftruncate(files[f].fd, (off_t)size)) {
			ret = moem_errf(errno, "%s: %s", files[f].tmp, strerror(errno));
			break;
		}
		ret = moem_st_writer_write_header(files[f].w, files[f].fd, files[f].final);
	}
	/* Jobs run in state_dict order (layer by layer), as they were listed. */
	free(order);
	return ret;
}

static struct json_object *index_json(const struct moem_tensor_spec *specs, size_t n,
				      const uint32_t *shard_of, const struct mk_file *files,
				      uint64_t total)
{
	struct json_object *root = json_object_new_object(), *meta = json_object_new_object();
	struct json_object *wm = json_object_new_object();
	struct spec_ref *order = malloc(sizeof(*order) * (n ? n : 1));

	if (!root || !meta || !wm || !order) {
		json_object_put(root);
		json_object_put(meta);
		json_object_put(wm);
		free(order);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = (struct spec_ref){&specs[i], i};
	qsort(order, n, sizeof(*order), cmp_spec_name);
	json_object_object_add(meta, "total_size", json_object_new_uint64(total));
	json_object_object_add(root, "metadata", meta);
	for (size_t i = 0; i < n; i++) {
		const char *fname = strrchr(files[shard_of[order[i].i]].final, '/') + 1;

		json_object_object_add(wm, order[i].s->name, json_object_new_string(fname));
	}
	json_object_object_add(root, "weight_map", wm);
	free(order);
	return root;
}

static int prepare(struct mk_ctx *x, const struct moem_mkmodel_opts *o)
{
	struct moem_synth_params *p = &x->synth;
	size_t rows;
	int ret;

	struct moem_model_config c = o->cfg;
	struct json_object *j;

	if (!c.routed_scaling)
		c.routed_scaling = 1.0f;
	if (!c.sparse_step)
		c.sparse_step = 1;
	if (!c.rope_theta)
		c.rope_theta = 10000.0f;
	if (c.arch == MOEM_ARCH_DEEPSEEK_V2)
		c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
	/*
	 * Round-trip through config.json: the model is generated from exactly
	 * the config a reader will see, and anything a reader would refuse is
	 * refused here first.
	 */
	ret = moem_config_to_json(&c, &j);
	if (ret)
		return ret;
	ret = moem_config_from_json(j, &x->cfg);
	json_object_put(j);
	if (ret)
		return ret;
	*p = o->synth;
	p->n_layers = moem_n_moe_layers(&x->cfg);
	p->n_experts = x->cfg.n_experts;
	p->top_k = x->cfg.top_k;
	ret = moem_synth_validate(p);
	if (ret)
		return ret;
	if (!(o->moe_scale > 0 && o->moe_scale <= 1))
		return moem_errf(EINVAL, "mkmodel: moe_scale %g not in (0, 1]", o->moe_scale);
	if (o->shards > MAX_SHARDS)
		return moem_errf(EINVAL, "mkmodel: %u shards, at most %d", o->shards, MAX_SHARDS);
	x->moe_scale = o->moe_scale;
	x->gain = moem_synth_gain(p, x->cfg.hidden);
	rows = (size_t)p->n_layers * p->n_experts;
	x->basis = malloc(sizeof(float) * rows * x->cfg.hidden);
	if (!x->basis)
		return -ENOMEM;
	return moem_synth_basis(p, x->cfg.hidden, x->basis);
}

static int finish_files(const char *dir, struct mk_ctx *x, struct moem_tensor_spec *specs, size_t n,
			const uint32_t *shard_of, struct mk_file *files, uint32_t nf,
			struct mk_file *side)
{
	struct json_object *cfg = NULL, *syn = NULL, *idx = NULL;
	uint64_t total = 0;
	int ret;

	for (size_t i = 0; i < n; i++)
		total += x->jobs[i].bytes;
	ret = moem_config_to_json(&x->cfg, &cfg);
	if (!ret)
		ret = moem_synth_to_json(&x->synth, &syn);
	if (!ret && nf > 1) {
		idx = index_json(specs, n, shard_of, files, total);
		ret = idx ? write_json_file(dir, "model.safetensors.index.json", idx, &side[2])
			  : -ENOMEM;
	}
	if (!ret)
		ret = write_json_file(dir, "moem_synth.json", syn, &side[1]);
	if (!ret)
		ret = write_json_file(dir, "config.json", cfg, &side[0]);
	json_object_put(cfg);
	json_object_put(syn);
	json_object_put(idx);
	return ret;
}

static void close_file(struct mk_file *f, bool keep)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	if (f->tmp && !keep)
		unlink(f->tmp);
	moem_st_writer_destroy(f->w);
	free(f->tmp);
	free(f->final);
	memset(f, 0, sizeof(*f));
	f->fd = -1;
}

int moem_mkmodel(const struct moem_mkmodel_opts *o)
{
	struct mk_ctx x = {0};
	struct moem_tensor_spec *specs = NULL;
	/* config.json, moem_synth.json, the index, then the tokenizer files */
	struct mk_file *files = NULL, side[N_SIDE];
	uint32_t *shard_of = NULL, nf = 0, renamed = 0;
	uint64_t *bytes = NULL, total = 0;
	bool created = false, side_renamed[N_SIDE] = {false};
	size_t n = 0;
	int ret;

	for (int i = 0; i < N_SIDE; i++) {
		memset(&side[i], 0, sizeof(side[i]));
		side[i].fd = -1;
	}
	ret = prepare(&x, o);
	if (!ret)
		ret = moem_arch_tensors(&x.cfg, &specs, &n);
	if (ret)
		goto out;
	bytes = malloc(sizeof(*bytes) * n);
	shard_of = malloc(sizeof(*shard_of) * n);
	x.jobs = calloc(n, sizeof(*x.jobs));
	files = calloc(MAX_SHARDS, sizeof(*files));
	if (!bytes || !shard_of || !x.jobs || !files) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t f = 0; f < MAX_SHARDS; f++)
		files[f].fd = -1;
	for (size_t i = 0; i < n; i++) {
		bytes[i] = specs[i].shape[0] * (specs[i].ndim == 2 ? specs[i].shape[1] : 1) *
			   moem_dtype_size(x.cfg.dtype);
		total += bytes[i];
	}
	nf = plan_shards(specs, n, bytes, o->shards ? o->shards : 1, shard_of);
	ret = check_dir(o->out_dir, &created);
	if (ret)
		goto out;
	ret = open_shards(&x, o->out_dir, specs, n, shard_of, files, nf);
	if (!ret && o->tokenizer) /* before the long part: a bad path fails at once */
		ret = copy_tokenizer(o->out_dir, o->tokenizer, &side[3]);
	if (ret)
		goto out;
	x.n_jobs = n;
	x.prog = o->progress;
	if (x.prog)
		moem_progress_start(x.prog, "mkmodel", total, true);
	ret = moem_store_run_jobs(&mk_jobs, &x, x.n_jobs, o->threads);
	if (x.prog)
		moem_progress_finish(x.prog);
	if (!ret)
		ret = finish_files(o->out_dir, &x, specs, n, shard_of, files, nf, side);
	/* Rename data files first and config.json last: it marks a complete model. */
	for (uint32_t f = 0; f < nf && !ret; f++) {
		if (rename(files[f].tmp, files[f].final))
			ret = moem_errf(errno, "%s: %s", files[f].final, strerror(errno));
		else
			renamed++;
	}
	for (int i = N_SIDE - 1; i >= 0 && !ret; i--) {
		if (!side[i].tmp)
			continue;
		if (rename(side[i].tmp, side[i].final))
			ret = moem_errf(errno, "%s: %s", side[i].final, strerror(errno));
		else
			side_renamed[i] = true;
	}
	/* Undo what was renamed so a failed run leaves nothing behind. */
	for (uint32_t f = 0; ret && f < renamed; f++)
		unlink(files[f].final);
	for (int i = 0; ret && i < N_SIDE; i++)
		if (side_renamed[i])
			unlink(side[i].final);
out:
	for (uint32_t f = 0; files && f < nf; f++)
		close_file(&files[f], !ret);
	for (int i = 0; i < N_SIDE; i++)
		close_file(&side[i], !ret);
	if (ret && created)
		rmdir(o->out_dir);
	free(files);
	free(bytes);
	free(shard_of);
	free(x.jobs);
	free(x.basis);
	free(specs);
	return ret;
}
