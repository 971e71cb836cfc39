// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem_seq_params.n_vocab: a checkpoint's vocab_size is often padded past
 * its tokenizer's last id (Qwen3: 151936 rows, 151669 tokens); moemd and
 * moem generate pass the tokenizer's size so that no id without text is
 * ever sampled. Checked on a tiny synthetic model: at a temperature that
 * makes every id likely, no sampled id reaches n_vocab (while without it
 * some do), the log-probabilities are over the ids it keeps, and an
 * n_vocab past the model's vocabulary is refused.
 */
#include <math.h>
#include <stdlib.h>

#include <moem/decode.h>
#include <moem/engine.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/store.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

static const int32_t prompt[] = {3, 17, 5, 40};

FIXTURE(dv)
{
	char *dir, *model, *pack;
	struct moem_engine *e;
	struct moem_decoder *d;
	uint32_t vocab;
};

FIXTURE_SETUP(dv)
{
	struct moem_engine_opts o = {0};
	struct moem_pack *pk;

	moem_log_set_level(MOEM_LOG_WARN);
	self->dir = st_tmpdir();
	self->model = st_path(self->dir, "model");
	self->pack = st_path(self->dir, "m.moem");
	ASSERT_EQ(0, st_tiny_pack(MOEM_ARCH_QWEN3_MOE, self->model, self->pack))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_pack_open(self->pack, &pk));
	self->vocab = moem_pack_config(pk)->vocab;
	moem_pack_close(pk);
	o.pack_path = self->pack;
	o.backend = "cpu";
	o.threads = 1;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	ASSERT_EQ(0, moem_engine_open(&o, &self->e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_decoder_open(self->e, NULL, &self->d)) TH_LOG("%s", moem_last_error());
}

FIXTURE_TEARDOWN(dv)
{
	moem_decoder_close(self->d);
	moem_engine_close(self->e);
	if (self->dir)
		st_rm_rf(self->dir);
	free(self->dir);
	free(self->model);
	free(self->pack);
}

/* Sample n tokens at temperature 100 with n_vocab nv; the largest id and the largest logprob. */
static int sample_many(struct moem_decoder *d, uint32_t nv, uint32_t n, int32_t *top, float *lp_max)
{
	struct moem_seq_params p = {0};
	struct moem_work w = {.kind = MOEM_WORK_PREFILL};
	struct moem_token_out out;
	int ret;

	p.prompt = prompt;
	p.n_prompt = sizeof(prompt) / sizeof(prompt[0]);
	moem_sampling_defaults(&p.sampling);
	p.sampling.temperature = 100;
	p.sampling.seed = 7;
	p.max_new_tokens = n;
	p.n_vocab = nv;
	*top = -1;
	*lp_max = -INFINITY;
	ret = moem_decoder_add(d, &p, &w.seq);
	while (!ret) {
		ret = moem_decoder_step(d, &w, 1, &out, NULL);
		if (ret)
			break;
		if (out.token > *top)
			*top = out.token;
		if (out.token >= 0 && out.logprob > *lp_max)
			*lp_max = out.logprob;
		if (out.finish != MOEM_FINISH_NONE)
			break;
		w.kind = MOEM_WORK_DECODE;
	}
	return ret;
}

TEST_F(dv, no_id_past_n_vocab_is_sampled)
{
	const uint32_t half = self->vocab / 2;
	int32_t top;
	float lp;

	ASSERT_LE(64, self->vocab);
	/* without: ids of the upper half come up (nearly uniform at temperature 100) */
	ASSERT_EQ(0, sample_many(self->d, 0, 48, &top, &lp)) TH_LOG("%s", moem_last_error());
	EXPECT_LE((int32_t)half, top);
	EXPECT_GT(lp, (float)-log((double)self->vocab) - 1.0f);
	/* with: none, and each kept id's probability about 1 / half */
	ASSERT_EQ(0, sample_many(self->d, half, 48, &top, &lp)) TH_LOG("%s", moem_last_error());
	EXPECT_GT((int32_t)half, top);
	EXPECT_LE(0, top);
	EXPECT_GT(lp, (float)-log((double)half) - 0.5f);
	EXPECT_LT(lp, (float)-log((double)half) + 0.5f);
	/* the whole vocabulary is the same as 0 */
	ASSERT_EQ(0, sample_many(self->d, self->vocab, 4, &top, &lp));
	/* past the model's: refused */
	EXPECT_EQ(-EINVAL, sample_many(self->d, self->vocab + 1, 4, &top, &lp));
	EXPECT_NE(NULL, strstr(moem_last_error(), "n_vocab")) TH_LOG("%s", moem_last_error());
}

TEST_HARNESS_MAIN
