// SPDX-License-Identifier: GPL-2.0-only
/*
 * mkmodel -> pack -> open round trip for every architecture, sharded and
 * not: bf16 blobs and plain tensors byte-identical to the safetensors
 * source, quantized blobs within the format's per-group bound, f16/f32
 * sources rounded to nearest even, same input same pack, and the FFN
 * error order q2 > q4 > q8.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/half.h>
#include <moem/pack.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

#define ALL_PRECS ((1u << MOEM_PREC_NR) - 1)

FIXTURE(pk)
{
	char *root, *model, *pack;
	struct moem_mkmodel_opts o;
};

FIXTURE_SETUP(pk)
{
	self->root = st_tmpdir();
	ASSERT_NE(NULL, self->root);
	self->model = st_path(self->root, "model");
	self->pack = st_path(self->root, "m.moem");
}

FIXTURE_TEARDOWN(pk)
{
	st_rm_rf(self->root);
	free(self->root);
	free(self->model);
	free(self->pack);
}

static int do_pack(const char *model, const char *out, uint32_t mask, uint32_t threads)
{
	struct moem_pack_opts po = {
		.model_dir = model, .out_path = out, .prec_mask = mask, .threads = threads};

	moem_clear_error();
	return moem_pack_write(&po);
}

/* Source matrix m of an FFN as bf16 (rounded to nearest even from f16/f32). */
static uint16_t *source(struct __test_metadata *_metadata, struct moem_ckpt *c,
			enum moem_tensor_role r, uint32_t layer, uint32_t expert,
			enum moem_expert_mat m, uint64_t *n)
{
	char name[MOEM_TENSOR_NAME_MAX];
	const struct moem_st_file *f;
	const struct moem_st_tensor *t;
	uint16_t *v;

	EXPECT_EQ(0,
		  moem_tensor_name(moem_ckpt_config(c), r, layer, expert, m, name, sizeof(name)));
	EXPECT_EQ(0, moem_ckpt_find(c, name, &f, &t));
	v = malloc(t->nelem * 2);
	EXPECT_EQ(0, moem_st_read_bf16(f, t, v, t->nelem));
	*n = t->nelem;
	return v;
}

/* Compare one blob with its source: bytes for bf16, the group bound otherwise. */
static void check_blob(struct __test_metadata *_metadata, struct moem_ckpt *c,
		       const struct moem_pack *p, const struct moem_pack_blob *b)
{
	static const enum moem_tensor_role roles[] = {0, MOEM_TR_EXPERT, MOEM_TR_SHARED,
						      MOEM_TR_DENSE};
	const struct moem_expert_layout *l = &b->layout;
	uint8_t *blob = malloc(b->size);
	char desc[96];

	ASSERT_EQ(0, moem_pack_read_blob(p, b, blob, b->size));
	moem_pack_blob_desc(b, desc, sizeof(desc));
	for (int m = 0; m < MOEM_MAT_NR; m++) {
		const struct moem_qmat_layout *ml = &l->mat[m];
		const uint8_t *mat = blob + l->mat_off[m];
		uint64_t n;
		uint16_t *src = source(_metadata, c, roles[b->kind], b->layer, b->expert,
				       (enum moem_expert_mat)m, &n);
		float *row = malloc(sizeof(float) * ml->cols);

		ASSERT_EQ((uint64_t)ml->rows * ml->cols, n);
		if (b->prec == MOEM_PREC_BF16) {
			EXPECT_EQ(0, memcmp(mat, src, n * 2)) TH_LOG("%s mat %d", desc, m);
			free(src);
			free(row);
			continue;
		}
		for (uint32_t r = 0; r < ml->rows; r++) {
			moem_dequantize_row(ml, mat, r, row);
			for (uint32_t g = 0; g < ml->groups_per_row; g++) {
				const uint16_t *x = src + (size_t)r * ml->cols + g * ml->group;
				float mn = INFINITY, mx = -INFINITY;
				double bound, worst = 0;

				for (uint32_t i = 0; i < ml->group; i++) {
					mn = fminf(mn, moem_bf16_to_f32(x[i]));
					mx = fmaxf(mx, moem_bf16_to_f32(x[i]));
				}
				bound = moem_quant_group_bound(ml, mat, r, g, mn, mx);
				for (uint32_t i = 0; i < ml->group; i++)
					worst = fmax(worst, fabs(row[g * ml->group + i] -
								 moem_bf16_to_f32(x[i])));
				ASSERT_LE(worst, bound)
				TH_LOG("%s mat %d row %u group %u", desc, m, r, g);
			}
		}
		free(src);
		free(row);
	}
	free(blob);
}

static void round_trip(struct __test_metadata *_metadata, const char *model, const char *pack)
{
	struct moem_synth_params s1, s2;
	struct moem_pack *p;
	struct moem_ckpt *c;
	const struct moem_model_config *pc, *cc;
	uint32_t routed = 0;
	uint64_t bad;

	ASSERT_EQ(0, do_pack(model, pack, ALL_PRECS, 2)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_pack_open(pack, &p)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_ckpt_open(model, &c));
	pc = moem_pack_config(p);
	cc = moem_ckpt_config(c);
	EXPECT_EQ(0, memcmp(pc, cc, sizeof(*pc)));
	EXPECT_EQ(ALL_PRECS, moem_pack_precisions(p));
	ASSERT_EQ(0, moem_pack_synth(p, &s1));
	ASSERT_EQ(0, moem_ckpt_synth(c, &s2));
	EXPECT_EQ(s1.seed, s2.seed);
	EXPECT_EQ(s1.n_layers, s2.n_layers);
	EXPECT_EQ(0, moem_pack_verify(p, NULL));
	/* plain tensors: the checkpoint's bytes */
	for (uint32_t i = 0; i < moem_pack_n_tensors(p); i++) {
		const struct moem_pack_tensor *t = moem_pack_tensor_at(p, i);
		const struct moem_st_file *f;
		const struct moem_st_tensor *st;
		void *a = malloc(t->size), *b = malloc(t->size);
		float *fa = malloc(sizeof(float) * t->nelem),
		      *fb = malloc(sizeof(float) * t->nelem);

		ASSERT_EQ(0, moem_ckpt_find(c, t->name, &f, &st));
		EXPECT_EQ(st->dtype, t->dtype);
		ASSERT_EQ(st->bytes, t->size);
		ASSERT_EQ(0, moem_pack_read_tensor(p, t, a, t->size));
		ASSERT_EQ(0, moem_st_read(f, st, 0, b, st->bytes));
		EXPECT_EQ(0, memcmp(a, b, t->size)) TH_LOG("%s", t->name);
		ASSERT_EQ(0, moem_pack_read_tensor_f32(p, t, fa, t->nelem));
		ASSERT_EQ(0, moem_st_read_f32(f, st, fb, st->nelem));
		EXPECT_EQ(0, memcmp(fa, fb, sizeof(float) * t->nelem));
		/* the bf16 read is the float read rounded, whatever the dtype */
		ASSERT_EQ(0, moem_pack_read_tensor_bf16(p, t, a, t->nelem));
		bad = 0;
		for (uint64_t k = 0; k < t->nelem; k++)
			bad += moem_f32_to_bf16(fa[k]) != ((uint16_t *)a)[k];
		EXPECT_EQ(0u, bad) TH_LOG("%s", t->name);
		EXPECT_TRUE(moem_is_aligned(t->offset, MOEM_PACK_ALIGN));
		free(a);
		free(b);
		free(fa);
		free(fb);
	}
	for (uint32_t i = 0; i < moem_pack_n_blobs(p); i++) {
		const struct moem_pack_blob *b = moem_pack_blob_at(p, i);

		EXPECT_TRUE(moem_is_aligned(b->offset, MOEM_PACK_ALIGN));
		EXPECT_TRUE(moem_is_aligned(b->size, MOEM_PACK_ALIGN));
		routed += b->kind == MOEM_BLOB_ROUTED;
		check_blob(_metadata, c, p, b);
	}
	EXPECT_EQ(moem_n_moe_layers(cc) * cc->n_experts * MOEM_PREC_NR, routed);
	/* lookups */
	for (uint32_t l = 0; l < cc->n_layers; l++) {
		bool moe = moem_layer_is_moe(cc, l);

		EXPECT_EQ(moe, moem_pack_expert(p, l, 1, MOEM_PREC_Q4) != NULL);
		EXPECT_EQ(moe, moem_pack_tensor_role(p, MOEM_TR_ROUTER, l) != NULL);
		EXPECT_EQ(!moe, moem_pack_dense(p, l, MOEM_PREC_BF16) != NULL);
		EXPECT_EQ(moe && cc->n_shared, moem_pack_shared(p, l, MOEM_PREC_BF16) != NULL);
		EXPECT_EQ(NULL, moem_pack_shared(p, l, MOEM_PREC_Q4));
	}
	EXPECT_EQ(NULL, moem_pack_expert(p, 1, cc->n_experts, MOEM_PREC_BF16));
	EXPECT_EQ(NULL, moem_pack_expert(p, cc->n_layers, 0, MOEM_PREC_BF16));
	moem_ckpt_close(c);
	moem_pack_close(p);
}

TEST_F(pk, every_arch_sharded_and_not)
{
	for (int a = 0; a < MOEM_ARCH_NR; a++) {
		for (int sharded = 0; sharded < 2; sharded++) {
			st_rm_rf(self->model);
			unlink(self->pack);
			st_tiny_opts(&self->o, (enum moem_arch)a, self->model);
			self->o.shards = sharded ? 3 : 1;
			ASSERT_EQ(0, moem_mkmodel(&self->o)) TH_LOG("%s", moem_last_error());
			TH_LOG("%s, %s", moem_arch_name((enum moem_arch)a),
			       sharded ? "3 shards" : "one file");
			round_trip(_metadata, self->model, self->pack);
		}
	}
}

TEST_F(pk, f16_and_f32_sources_round_to_nearest_even)
{
	for (int dt = MOEM_DTYPE_F16; dt <= MOEM_DTYPE_F32; dt++) {
		const struct moem_pack_blob *b;
		const struct moem_st_file *f;
		const struct moem_st_tensor *t;
		struct moem_pack *p;
		struct moem_ckpt *c;
		uint8_t *blob;
		float *v;
		int inexact = 0;

		st_rm_rf(self->model);
		unlink(self->pack);
		st_tiny_opts(&self->o, MOEM_ARCH_OLMOE, self->model);
		self->o.cfg.dtype = (enum moem_dtype)dt;
		ASSERT_EQ(0, moem_mkmodel(&self->o));
		round_trip(_metadata, self->model, self->pack);
		/* independently of moem_st_read_bf16: rne(float value) */
		ASSERT_EQ(0, moem_pack_open(self->pack, &p));
		ASSERT_EQ(0, moem_ckpt_open(self->model, &c));
		b = moem_pack_expert(p, 2, 3, MOEM_PREC_BF16);
		ASSERT_NE(NULL, b);
		blob = malloc(b->size);
		ASSERT_EQ(0, moem_pack_read_blob(p, b, blob, b->size));
		ASSERT_EQ(0, moem_ckpt_find(c, "model.layers.2.mlp.experts.3.down_proj.weight", &f,
					    &t));
		EXPECT_EQ((enum moem_dtype)dt, t->dtype);
		v = malloc(sizeof(float) * t->nelem);
		ASSERT_EQ(0, moem_st_read_f32(f, t, v, t->nelem));
		for (uint64_t i = 0; i < t->nelem; i++) {
			uint16_t h;

			memcpy(&h, blob + b->layout.mat_off[MOEM_MAT_DOWN] + 2 * i, 2);
			ASSERT_EQ(moem_f32_to_bf16(v[i]), h);
			inexact += moem_bf16_to_f32(h) != v[i];
		}
		/* the source really had bits bf16 cannot hold */
		EXPECT_GT(inexact, (int)(t->nelem / 2));
		free(v);
		free(blob);
		moem_ckpt_close(c);
		moem_pack_close(p);
	}
}

static bool files_equal(const char *a, const char *b)
{
	size_t la = 0, lb = 0;
	void *ba = st_read_file(a, &la), *bb = st_read_file(b, &lb);
	bool eq = ba && bb && la == lb && !memcmp(ba, bb, la);

	free(ba);
	free(bb);
	return eq;
}

TEST_F(pk, same_input_same_pack)
{
	char *other = st_path(self->root, "n.moem");
	struct moem_pack *a, *b;
	struct moem_pack_id ia, ib;

	st_tiny_opts(&self->o, MOEM_ARCH_DEEPSEEK_V2, self->model);
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, do_pack(self->model, self->pack, 0x5, 1));
	ASSERT_EQ(0, do_pack(self->model, other, 0x5, 3));
	EXPECT_TRUE(files_equal(self->pack, other));
	ASSERT_EQ(0, moem_pack_open(self->pack, &a));
	ASSERT_EQ(0, moem_pack_open(other, &b));
	moem_pack_get_id(a, &ia);
	moem_pack_get_id(b, &ib);
	EXPECT_EQ(0, memcmp(&ia, &ib, sizeof(ia)));
	moem_pack_close(b);
	/* a different precision set is a different pack */
	ASSERT_EQ(0, do_pack(self->model, other, 0x1, 1));
	ASSERT_EQ(0, moem_pack_open(other, &b));
	moem_pack_get_id(b, &ib);
	EXPECT_NE(0, memcmp(&ia, &ib, sizeof(ia)));
	moem_pack_close(a);
	moem_pack_close(b);
	free(other);
}

TEST_F(pk, quant_error_order)
{
	struct moem_qerr q[MOEM_PREC_NR];
	struct moem_pack *p;

	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->model);
	self->o.cfg.hidden = 256;
	self->o.cfg.moe_inter = 256;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, do_pack(self->model, self->pack, ALL_PRECS, 2));
	ASSERT_EQ(0, moem_pack_open(self->pack, &p));
	ASSERT_EQ(0, moem_pack_quant_error(p, 6, 3, 7, 2, q));
	TH_LOG("synthetic: q8 %.5f, q4 %.5f, q2 %.5f", q[MOEM_PREC_Q8].mean_rel,
	       q[MOEM_PREC_Q4].mean_rel, q[MOEM_PREC_Q2].mean_rel);
	EXPECT_EQ(18u, q[MOEM_PREC_Q8].samples);
	EXPECT_GT(q[MOEM_PREC_Q8].mean_rel, 0.0);
	EXPECT_GT(q[MOEM_PREC_Q4].mean_rel, q[MOEM_PREC_Q8].mean_rel);
	EXPECT_GT(q[MOEM_PREC_Q2].mean_rel, q[MOEM_PREC_Q4].mean_rel);
	EXPECT_GE(q[MOEM_PREC_Q2].max_rel, q[MOEM_PREC_Q2].mean_rel);
	EXPECT_EQ(0u, q[MOEM_PREC_BF16].samples);
	moem_pack_close(p);
	/* without bf16 there is no reference */
	ASSERT_EQ(0, do_pack(self->model, self->pack, 1u << MOEM_PREC_Q4, 2));
	ASSERT_EQ(0, moem_pack_open(self->pack, &p));
	moem_clear_error();
	EXPECT_EQ(-ENOENT, moem_pack_quant_error(p, 6, 3, 7, 2, q));
	EXPECT_MSG("no bf16 blobs");
	moem_pack_close(p);
}

/* The router rows in the pack are the synthetic basis mkmodel was built from. */
TEST_F(pk, synth_basis_from_pack)
{
	struct moem_synth_params sp;
	struct moem_pack *p;
	float *got, *want;
	size_t n;
	double worst = 0;

	st_tiny_opts(&self->o, MOEM_ARCH_DEEPSEEK_V2, self->model);
	self->o.cfg.dtype = MOEM_DTYPE_F32;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, do_pack(self->model, self->pack, 1, 2));
	ASSERT_EQ(0, moem_pack_open(self->pack, &p));
	ASSERT_EQ(0, moem_pack_synth(p, &sp));
	EXPECT_EQ(2u, sp.n_layers); /* the dense first layer has no router */
	n = (size_t)sp.n_layers * sp.n_experts * 128;
	got = malloc(sizeof(float) * n);
	want = malloc(sizeof(float) * n);
	ASSERT_EQ(0, moem_pack_synth_basis(p, got));
	ASSERT_EQ(0, moem_synth_basis(&sp, 128, want));
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs(got[i] - want[i]));
	EXPECT_LT(worst, 1e-5);
	free(got);
	free(want);
	moem_pack_close(p);
}

/*
 * An f32 tensor is read as bf16 through a bounce buffer with its checksum
 * taken as it streams (pack_read.c, 64 KiB chunks): a flipped byte in a
 * later chunk of a tensor of several is caught, and a wrong count refused.
 */
TEST_F(pk, bf16_read_of_f32_checks_every_chunk)
{
	const struct moem_pack_tensor *t = NULL;
	struct moem_pack *p;
	uint16_t *buf;
	uint8_t byte;
	int fd;

	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->model);
	self->o.cfg.dtype = MOEM_DTYPE_F32;
	self->o.cfg.vocab = 1000; /* an embedding of 8 chunks */
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, do_pack(self->model, self->pack, 1, 2));
	ASSERT_EQ(0, moem_pack_open(self->pack, &p));
	for (uint32_t i = 0; i < moem_pack_n_tensors(p); i++) {
		const struct moem_pack_tensor *c = moem_pack_tensor_at(p, i);

		if (!t || c->size > t->size)
			t = c;
	}
	ASSERT_EQ(MOEM_DTYPE_F32, t->dtype);
	ASSERT_GT(t->size, 64u << 10); /* more than one chunk */
	buf = malloc(t->nelem * 2);
	ASSERT_EQ(0, moem_pack_read_tensor_bf16(p, t, buf, t->nelem));
	EXPECT_EQ(-EINVAL, moem_pack_read_tensor_bf16(p, t, buf, t->nelem - 1));
	EXPECT_MSG("caller expects");
	fd = open(self->pack, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(1, pread(fd, &byte, 1, t->offset + t->size - 3));
	byte ^= 0x40;
	ASSERT_EQ(1, pwrite(fd, &byte, 1, t->offset + t->size - 3));
	close(fd);
	EXPECT_EQ(-EBADMSG, moem_pack_read_tensor_bf16(p, t, buf, t->nelem));
	EXPECT_MSG("checksum");
	free(buf);
	moem_pack_close(p);
}

TEST_F(pk, refusals_leave_no_file)
{
	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->model);
	self->o.cfg.hidden = 64;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	EXPECT_EQ(-EINVAL, do_pack(self->model, self->pack, 1u << MOEM_PREC_Q8, 2));
	EXPECT_MSG("precision q8 does not fit experts of 64 x 128");
	EXPECT_EQ(-1, access(self->pack, F_OK));
	EXPECT_EQ(1, st_count_entries(self->root)); /* the model dir only: no temporary */
	/* q2 groups of 64 fit */
	EXPECT_EQ(0, do_pack(self->model, self->pack, 1u << MOEM_PREC_Q2, 2));
	/* a missing model directory */
	EXPECT_EQ(-ENOENT, do_pack("/nonexistent", self->pack, 1, 2));
	EXPECT_MSG("/nonexistent/config.json");
}

TEST_HARNESS_MAIN
