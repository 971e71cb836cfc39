// SPDX-License-Identifier: GPL-2.0-only
/*
 * Synthetic checkpoints: same options give the same bytes (whatever the
 * thread count or sharding), the router realises the synthetic routing
 * targets through the residual stream, expert outputs have the promised
 * scale, and refusals leave nothing behind.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/half.h>
#include <moem/quant.h>
#include <moem/store.h>
#include <moem/synth.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

FIXTURE(mk)
{
	char *root;
	char *a, *b;
	struct moem_mkmodel_opts o;
};

FIXTURE_SETUP(mk)
{
	self->root = st_tmpdir();
	ASSERT_NE(NULL, self->root);
	self->a = st_path(self->root, "a");
	self->b = st_path(self->root, "b");
	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->a);
}

FIXTURE_TEARDOWN(mk)
{
	st_rm_rf(self->root);
	free(self->root);
	free(self->a);
	free(self->b);
}

static int same_file(const char *d1, const char *d2, const char *name)
{
	char *p1 = st_path(d1, name), *p2 = st_path(d2, name);
	size_t l1 = 0, l2 = 0;
	void *b1 = st_read_file(p1, &l1), *b2 = st_read_file(p2, &l2);
	int same = b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1);

	free(p1);
	free(p2);
	free(b1);
	free(b2);
	return same;
}

TEST_F(mk, same_seed_same_bytes)
{
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	self->o.out_dir = self->b;
	self->o.threads = 1;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	EXPECT_TRUE(same_file(self->a, self->b, "model.safetensors"));
	EXPECT_TRUE(same_file(self->a, self->b, "config.json"));
	EXPECT_TRUE(same_file(self->a, self->b, "moem_synth.json"));
	st_rm_rf(self->b);
	self->o.synth.seed = 2;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	EXPECT_FALSE(same_file(self->a, self->b, "model.safetensors"));
}

TEST_F(mk, sharding_keeps_tensor_bytes)
{
	struct moem_ckpt *ca, *cb;

	self->o.cfg.dtype = MOEM_DTYPE_F32;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	self->o.out_dir = self->b;
	self->o.shards = 4;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, moem_ckpt_open(self->a, &ca));
	ASSERT_EQ(0, moem_ckpt_open(self->b, &cb));
	EXPECT_EQ(4u, moem_ckpt_n_files(cb));
	for (size_t i = 0; i < moem_ckpt_n_specs(ca); i++) {
		const char *name = moem_ckpt_spec(ca, i)->name;
		const struct moem_st_file *fa, *fb;
		const struct moem_st_tensor *ta, *tb;
		void *ba, *bb;

		ASSERT_EQ(0, moem_ckpt_find(ca, name, &fa, &ta));
		ASSERT_EQ(0, moem_ckpt_find(cb, name, &fb, &tb));
		ASSERT_EQ(ta->bytes, tb->bytes);
		EXPECT_EQ(MOEM_DTYPE_F32, ta->dtype);
		ba = malloc(ta->bytes);
		bb = malloc(tb->bytes);
		ASSERT_EQ(0, moem_st_read(fa, ta, 0, ba, ta->bytes));
		ASSERT_EQ(0, moem_st_read(fb, tb, 0, bb, tb->bytes));
		EXPECT_EQ(0, memcmp(ba, bb, ta->bytes));
		free(ba);
		free(bb);
	}
	moem_ckpt_close(ca);
	moem_ckpt_close(cb);
}

static float *read_f32(struct __test_metadata *_metadata, struct moem_ckpt *c, const char *name,
		       uint64_t *n)
{
	const struct moem_st_file *f;
	const struct moem_st_tensor *t;
	float *v;

	EXPECT_EQ(0, moem_ckpt_find(c, name, &f, &t));
	v = malloc(sizeof(float) * t->nelem);
	EXPECT_EQ(0, moem_st_read_f32(f, t, v, t->nelem));
	*n = t->nelem;
	return v;
}

/*
 * The router realises the targets: with h0 from moem_synth_hidden() over
 * the normalised router rows, rmsnorm(h0) . g[e] is about the target logit
 * (boost for the first intent, 0 off-intent) plus unit noise.
 */
TEST_F(mk, router_realises_targets)
{
	const uint32_t H = 256, E = 8, L = 2, B = 64;
	struct moem_synth_params sp;
	struct moem_synth *g;
	struct moem_ckpt *c;
	float *rows[2], *basis = malloc(sizeof(float) * L * E * H), h0[256];
	double on = 0, off = 0, gain;
	uint32_t n_on = 0, n_off = 0;
	uint64_t n;

	self->o.cfg.hidden = H;
	self->o.cfg.n_layers = L;
	self->o.cfg.n_experts = E;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, moem_ckpt_open(self->a, &c));
	ASSERT_EQ(0, moem_ckpt_synth(c, &sp));
	gain = moem_synth_gain(&sp, H);
	for (uint32_t m = 0; m < L; m++) {
		char name[MOEM_TENSOR_NAME_MAX];

		ASSERT_EQ(0, moem_tensor_name(moem_ckpt_config(c), MOEM_TR_ROUTER, m, 0, 0, name,
					      sizeof(name)));
		rows[m] = read_f32(_metadata, c, name, &n);
		ASSERT_EQ((uint64_t)E * H, n);
		for (uint32_t e = 0; e < E; e++) {
			const float *r = rows[m] + (size_t)e * H;
			double nn = 0;

			for (uint32_t k = 0; k < H; k++)
				nn += (double)r[k] * r[k];
			EXPECT_LT(fabs(sqrt(nn) - gain), 0.01 * gain);
			for (uint32_t k = 0; k < H; k++)
				basis[((size_t)m * E + e) * H + k] = (float)(r[k] / sqrt(nn));
		}
	}
	ASSERT_EQ(0, moem_synth_create(&sp, NULL, B, &g));
	for (int step = 0; step < 8; step++) {
		moem_synth_step(g);
		for (uint32_t b = 0; b < B; b++) {
			double ss = 0;

			moem_synth_hidden(g, b, basis, H, h0);
			for (uint32_t k = 0; k < H; k++)
				ss += (double)h0[k] * h0[k];
			for (uint32_t m = 0; m < L; m++) {
				const uint16_t *in = moem_synth_intents(g, b, m);

				for (uint32_t e = 0; e < E; e++) {
					double z = 0;

					for (uint32_t k = 0; k < H; k++)
						z += rows[m][(size_t)e * H + k] * h0[k];
					z /= sqrt(ss / H); /* rmsnorm, weights 1 */
					if (e == in[0]) {
						on += z;
						n_on++;
					} else if (e != in[1]) {
						off += z;
						n_off++;
					}
				}
			}
		}
	}
	on /= n_on;
	off /= n_off;
	TH_LOG("mean first-intent logit %.3f (target %.2f), off-intent %.3f", on, sp.boost, off);
	EXPECT_LT(fabs(on - sp.boost), 0.1 * sp.boost);
	EXPECT_LT(fabs(off), 0.15);
	moem_synth_destroy(g);
	moem_ckpt_close(c);
	free(rows[0]);
	free(rows[1]);
	free(basis);
}

/* One expert's output RMS on unit-RMS inputs is moe_scale x the residual's RMS (gain). */
TEST_F(mk, expert_output_scale)
{
	struct moem_expert_layout l;
	struct moem_synth_params sp;
	struct moem_ckpt *c;
	double y[128], ss = 0, gain;
	float x[128];
	uint8_t *blob;
	struct moem_rng r;
	int samples = 0;

	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, moem_ckpt_open(self->a, &c));
	ASSERT_EQ(0, moem_ckpt_synth(c, &sp));
	gain = moem_synth_gain(&sp, 128);
	ASSERT_EQ(0, moem_expert_layout(MOEM_PREC_BF16, 128, 128, &l));
	blob = calloc(1, l.bytes);
	moem_rng_seed(&r, 9, 9);
	for (uint32_t e = 0; e < 4; e++) {
		for (int m = 0; m < MOEM_MAT_NR; m++) {
			char name[MOEM_TENSOR_NAME_MAX];
			const struct moem_st_file *f;
			const struct moem_st_tensor *t;

			ASSERT_EQ(0, moem_tensor_name(moem_ckpt_config(c), MOEM_TR_EXPERT, 1, e,
						      (enum moem_expert_mat)m, name, sizeof(name)));
			ASSERT_EQ(0, moem_ckpt_find(c, name, &f, &t));
			ASSERT_EQ(0, moem_st_read_bf16(f, t, (uint16_t *)(blob + l.mat_off[m]),
						       t->nelem));
		}
		for (int a = 0; a < 8; a++, samples++) {
			for (int k = 0; k < 128; k++)
				x[k] = (float)moem_rng_normal(&r);
			ASSERT_EQ(0, moem_ffn_ref(&l, blob, x, y));
			for (int k = 0; k < 128; k++)
				ss += y[k] * y[k];
		}
	}
	ss = sqrt(ss / (128.0 * samples));
	TH_LOG("expert output RMS %.4f, target %.4f", ss, self->o.moe_scale * gain);
	EXPECT_LT(fabs(ss / (self->o.moe_scale * gain) - 1.0), 0.3);
	free(blob);
	moem_ckpt_close(c);
}

TEST_F(mk, refusals_leave_nothing)
{
	self->o.cfg.top_k = 9; /* more than 4 experts */
	moem_clear_error();
	EXPECT_EQ(-EINVAL, moem_mkmodel(&self->o));
	EXPECT_MSG("num_experts_per_tok 9");
	EXPECT_NE(0, access(self->a, F_OK)); /* not even the directory */
	self->o.cfg.top_k = 2;
	self->o.cfg.arch = MOEM_ARCH_MIXTRAL; /* mixtral has no dense layers */
	self->o.cfg.first_dense = 1;
	EXPECT_EQ(-EINVAL, moem_mkmodel(&self->o));
	EXPECT_MSG("mixtral");
	self->o.cfg = (struct moem_mkmodel_opts){0}.cfg;
	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->a);
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	EXPECT_EQ(3, st_count_entries(self->a));
	EXPECT_EQ(-EEXIST, moem_mkmodel(&self->o));
	EXPECT_MSG("already holds a model");
	EXPECT_EQ(3, st_count_entries(self->a)); /* no temporary left */
}

TEST_F(mk, tokenizer_files_copied)
{
	/* the bytes are copied as they are: storage does not parse tokenizers */
	static const char tj[] = "{\"model\": {\"type\": \"BPE\"}}";
	static const char tc[] = "{\"eos_token\": \"</s>\"}";
	char *src = st_path(self->root, "tok"), *f;

	ASSERT_EQ(0, mkdir(src, 0755));
	f = st_path(src, "my-tokenizer.json");
	ASSERT_EQ(0, st_write_file(f, tj, sizeof(tj) - 1));
	free(f);
	f = st_path(src, "tokenizer_config.json");
	ASSERT_EQ(0, st_write_file(f, tc, sizeof(tc) - 1));
	free(f);

	/* a directory without tokenizer.json: refused, nothing left */
	self->o.tokenizer = src;
	moem_clear_error();
	EXPECT_EQ(-ENOENT, moem_mkmodel(&self->o));
	EXPECT_MSG("tokenizer.json");
	EXPECT_NE(0, access(self->a, F_OK));

	/* a file of any name becomes tokenizer.json; its companions come along */
	f = st_path(src, "my-tokenizer.json");
	self->o.tokenizer = f;
	ASSERT_EQ(0, moem_mkmodel(&self->o)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(5, st_count_entries(self->a));
	{
		char *p = st_path(self->a, "tokenizer.json");
		size_t len = 0;
		char *b = st_read_file(p, &len);

		ASSERT_NE(NULL, b);
		EXPECT_EQ(sizeof(tj) - 1, len);
		EXPECT_EQ(0, memcmp(b, tj, len));
		free(b);
		free(p);
	}
	EXPECT_TRUE(same_file(src, self->a, "tokenizer_config.json"));
	free(f);
	free(src);
}

TEST_F(mk, every_arch_opens)
{
	for (int a = 0; a < MOEM_ARCH_NR; a++) {
		struct moem_ckpt *c;

		st_rm_rf(self->a);
		st_tiny_opts(&self->o, (enum moem_arch)a, self->a);
		self->o.shards = (uint32_t)a; /* 0, 1, 2, 3: single file and sharded */
		ASSERT_EQ(0, moem_mkmodel(&self->o)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, moem_ckpt_open(self->a, &c)) TH_LOG("%s", moem_last_error());
		EXPECT_EQ((enum moem_arch)a, moem_ckpt_config(c)->arch);
		EXPECT_EQ(a < 2 ? 1u : (uint32_t)a, moem_ckpt_n_files(c));
		moem_ckpt_close(c);
	}
}

TEST_HARNESS_MAIN
