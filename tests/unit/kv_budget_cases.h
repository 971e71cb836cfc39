/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The kv_bytes knob on an engine with a decoder, for any backend: the
 * includer defines kv_backend() ("cpu" in tests/unit/test_kv_budget.c,
 * the CUDA backend in tests/gpu/test_gpu_kv.c, which the kernel emulator
 * runs here). Where the KV pool lives in HBM (CUDA) the experts get
 * hbm_bytes less the pool and a change that leaves them less than one
 * expert is refused naming the limit; on the CPU backend the two are
 * separate host memory and nothing is charged. Either way a cut below
 * what a running sequence holds never touches its cache: it decodes the
 * same tokens, and the memory is freed once it ends.
 */
#ifndef MOEM_KV_BUDGET_CASES_H
#define MOEM_KV_BUDGET_CASES_H

#include <errno.h>
#include <string.h>

#include <moem/decode.h>
#include <moem/dev.h>
#include <moem/engine.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/store.h>

#include "kselftest_harness.h"
#include "../unit/store_test_util.h"

#define KV_HBM	     (1u << 20)
#define KV_NEW	     24
#define KV_PROMPT_N  8
#define KV_EXPERT_HB (128u << 10) /* one bf16 expert of the tiny model, 64 KiB aligned */

static const int32_t kv_prompt[KV_PROMPT_N] = {3, 17, 5, 40, 22, 9, 61, 12};

FIXTURE(kv)
{
	char *dir, *model, *pack;
	struct moem_engine *e;
	struct moem_decoder *d;
	bool in_hbm;
};

FIXTURE_SETUP(kv)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	struct moem_engine_opts o = {0};

	moem_log_set_level(MOEM_LOG_WARN);
	self->dir = st_tmpdir();
	self->model = st_path(self->dir, "model");
	self->pack = st_path(self->dir, "m.moem");
	st_tiny_opts(&mo, MOEM_ARCH_QWEN3_MOE, self->model);
	ASSERT_EQ(0, moem_mkmodel(&mo)) TH_LOG("%s", moem_last_error());
	po.model_dir = self->model;
	po.out_path = self->pack;
	po.prec_mask = 1u << MOEM_PREC_BF16;
	po.threads = 2;
	ASSERT_EQ(0, moem_pack_write(&po)) TH_LOG("%s", moem_last_error());
	o.pack_path = self->pack;
	o.backend = kv_backend();
	o.threads = 1;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	o.hbm_budget = KV_HBM;
	ASSERT_EQ(0, moem_engine_open(&o, &self->e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_decoder_open(self->e, NULL, &self->d)) TH_LOG("%s", moem_last_error());
	self->in_hbm = strcmp(o.backend, "cpu") != 0;
}

FIXTURE_TEARDOWN(kv)
{
	moem_decoder_close(self->d);
	moem_engine_close(self->e);
	st_rm_rf(self->dir);
	free(self->dir);
	free(self->model);
	free(self->pack);
}

/* The experts' HBM budget in force (what the tiers were given). */
static uint64_t expert_hbm(struct moem_engine *e)
{
	struct moem_engine_status st;

	moem_engine_get_status(e, &st);
	return st.hbm_budget;
}

static int kv_add(struct moem_decoder *d, uint64_t *id)
{
	struct moem_seq_params p = {0};

	p.prompt = kv_prompt;
	p.n_prompt = KV_PROMPT_N;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = KV_NEW;
	return moem_decoder_add(d, &p, id);
}

/* Decode the sequence to its end from its first step; tokens[KV_NEW]. */
static int kv_finish(struct moem_decoder *d, uint64_t id, int32_t *tokens, int *n)
{
	struct moem_work w = {.seq = id, .kind = MOEM_WORK_PREFILL};
	struct moem_token_out out;
	int ret;

	*n = 0;
	for (;;) {
		ret = moem_decoder_step(d, &w, 1, &out, NULL);
		if (ret)
			return ret;
		if (out.token >= 0 && *n < KV_NEW)
			tokens[(*n)++] = out.token;
		if (out.finish != MOEM_FINISH_NONE)
			return 0;
		w.kind = MOEM_WORK_DECODE;
	}
}

TEST_F(kv, knob_is_the_budget)
{
	struct moem_kv_usage u;
	uint64_t id;

	moem_decoder_kv_usage(self->d, &u);
	ASSERT_GT(u.block_bytes, 0);
	EXPECT_EQ(0, moem_engine_get_knob(self->e, MOEM_BUDGET_KV_BYTES)); /* default size */
	EXPECT_EQ(u.pool_bytes, u.budget_bytes);
	/* below one block: refused, naming it; nothing changed */
	moem_clear_error();
	EXPECT_EQ(-ERANGE, moem_decoder_set_kv_bytes(self->d, u.block_bytes - 1));
	EXPECT_NE(NULL, strstr(moem_last_error(), "block")) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-ERANGE,
		  moem_engine_set_knob(self->e, MOEM_BUDGET_KV_BYTES, MOEM_BUDGET_BYTES_MAX + 1));
	EXPECT_EQ(0, moem_engine_get_knob(self->e, MOEM_BUDGET_KV_BYTES));
	/* the knob is what the decoder follows, at its next step boundary */
	ASSERT_EQ(0, moem_engine_set_knob(self->e, MOEM_BUDGET_KV_BYTES, 5 * u.block_bytes + 7));
	EXPECT_EQ(5 * u.block_bytes + 7, moem_engine_get_knob(self->e, MOEM_BUDGET_KV_BYTES));
	ASSERT_EQ(0, kv_add(self->d, &id)) TH_LOG("%s", moem_last_error());
	moem_decoder_kv_usage(self->d, &u);
	EXPECT_EQ(5, u.blocks_total);
	EXPECT_EQ(5 * u.block_bytes, u.budget_bytes);
	EXPECT_EQ(5 * u.block_bytes, u.pool_bytes);
	ASSERT_EQ(0, moem_decoder_cancel(self->d, id));
}

/*
 * A decoder whose open fails after its kv_bytes set the knob (a pool of
 * 1 TiB: no memory for it, or refused by the HBM check) leaves the knob
 * as it was, and the next decoder opens with the default pool.
 */
TEST_F(kv, failed_open_leaves_the_knob)
{
	struct moem_decoder_opts o = {0};
	struct moem_kv_usage u, again;

	moem_decoder_kv_usage(self->d, &u);
	moem_decoder_close(self->d);
	self->d = NULL;
	o.kv_bytes = 1ull << 40;
	EXPECT_NE(0, moem_decoder_open(self->e, &o, &self->d));
	EXPECT_EQ(NULL, self->d);
	EXPECT_EQ(0, moem_engine_get_knob(self->e, MOEM_BUDGET_KV_BYTES));
	ASSERT_EQ(0, moem_decoder_open(self->e, NULL, &self->d)) TH_LOG("%s", moem_last_error());
	moem_decoder_kv_usage(self->d, &again);
	EXPECT_EQ(u.pool_bytes, again.pool_bytes);
}

TEST_F(kv, taken_out_of_hbm_where_it_lives)
{
	struct moem_kv_usage u;
	uint64_t id, kv, ok;

	moem_decoder_kv_usage(self->d, &u);
	/* the default pool leaves the experts at least half of what is left */
	if (self->in_hbm) {
		EXPECT_EQ(KV_HBM - u.pool_bytes, expert_hbm(self->e));
	} else {
		EXPECT_EQ(KV_HBM, expert_hbm(self->e));
	}
	kv = 4 * u.block_bytes;
	ASSERT_EQ(0, moem_engine_set_knob(self->e, MOEM_BUDGET_KV_BYTES, kv));
	ASSERT_EQ(0, moem_engine_apply_knobs(self->e));
	ASSERT_EQ(0, kv_add(self->d, &id)); /* a step boundary: the pool follows */
	ASSERT_EQ(0, moem_decoder_cancel(self->d, id));
	ASSERT_EQ(0, kv_add(self->d, &id)); /* the cut's memory goes once blocks are free */
	ASSERT_EQ(0, moem_decoder_cancel(self->d, id));
	moem_decoder_kv_usage(self->d, &u);
	ASSERT_EQ(kv, u.pool_bytes);
	EXPECT_EQ(self->in_hbm ? KV_HBM - kv : KV_HBM, expert_hbm(self->e));

	/* the largest kv_bytes that leaves the experts one expert, and one more byte */
	ok = KV_HBM - KV_EXPERT_HB;
	EXPECT_EQ(0, moem_engine_check_knob(self->e, MOEM_BUDGET_KV_BYTES, ok))
	TH_LOG("%s", moem_last_error());
	moem_clear_error();
	if (self->in_hbm) {
		EXPECT_EQ(-ERANGE, moem_engine_set_knob(self->e, MOEM_BUDGET_KV_BYTES, ok + 1));
		EXPECT_NE(NULL, strstr(moem_last_error(), "smallest budget that runs is 131072"))
		TH_LOG("%s", moem_last_error());
		/* and hbm_bytes that would leave less than one expert beside the pool */
		EXPECT_EQ(-ERANGE, moem_engine_set_knob(self->e, MOEM_BUDGET_HBM_BYTES,
							kv + KV_EXPERT_HB - 1));
		EXPECT_NE(NULL, strstr(moem_last_error(), "kv_bytes"))
		TH_LOG("%s", moem_last_error());
		EXPECT_EQ(0, moem_engine_check_knob(self->e, MOEM_BUDGET_HBM_BYTES,
						    kv + KV_EXPERT_HB));
	} else {
		/* host memory: kv_bytes is not charged to the experts */
		EXPECT_EQ(0, moem_engine_check_knob(self->e, MOEM_BUDGET_KV_BYTES, ok + 1));
		EXPECT_EQ(0, moem_engine_check_knob(self->e, MOEM_BUDGET_HBM_BYTES, KV_EXPERT_HB));
	}
	/* refusals changed nothing */
	EXPECT_EQ(kv, moem_engine_get_knob(self->e, MOEM_BUDGET_KV_BYTES));
	EXPECT_EQ(KV_HBM, moem_engine_get_knob(self->e, MOEM_BUDGET_HBM_BYTES));
	EXPECT_EQ(self->in_hbm ? KV_HBM - kv : KV_HBM, expert_hbm(self->e));
}

TEST_F(kv, cut_never_touches_a_running_sequence)
{
	int32_t ref[KV_NEW], got[KV_NEW];
	struct moem_work w = {.kind = MOEM_WORK_PREFILL};
	struct moem_token_out out;
	struct moem_kv_usage u;
	int n_ref, n = 0;
	uint64_t id, other;

	ASSERT_EQ(0, kv_add(self->d, &id));
	ASSERT_EQ(0, kv_finish(self->d, id, ref, &n_ref)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(KV_NEW, n_ref);

	/* the same sequence again; after its prefill, cut the cache to one block */
	ASSERT_EQ(0, kv_add(self->d, &id));
	w.seq = id;
	ASSERT_EQ(0, moem_decoder_step(self->d, &w, 1, &out, NULL));
	got[n++] = out.token;
	moem_decoder_kv_usage(self->d, &u);
	ASSERT_GE(u.blocks_reserved, 2);
	ASSERT_EQ(0, moem_decoder_set_kv_bytes(self->d, u.block_bytes));
	w.kind = MOEM_WORK_DECODE;
	while (out.finish == MOEM_FINISH_NONE) {
		ASSERT_EQ(0, moem_decoder_step(self->d, &w, 1, &out, NULL))
		TH_LOG("%s", moem_last_error());
		ASSERT_LT(n, KV_NEW);
		got[n++] = out.token;
		/* its blocks stay where they are until it ends */
		moem_decoder_kv_usage(self->d, &u);
		if (out.finish == MOEM_FINISH_NONE) {
			ASSERT_GE(u.pool_bytes, u.blocks_reserved * u.block_bytes);
			EXPECT_EQ(1, u.blocks_total);
		}
	}
	ASSERT_EQ(n_ref, n);
	EXPECT_EQ(0, memcmp(ref, got, sizeof(ref)));
	/* now the pool is one block: a sequence needing two does not fit */
	moem_clear_error();
	EXPECT_EQ(-EFBIG, kv_add(self->d, &other));
	moem_decoder_kv_usage(self->d, &u);
	EXPECT_EQ(u.block_bytes, u.pool_bytes);
	EXPECT_EQ(self->in_hbm ? KV_HBM - u.block_bytes : KV_HBM, expert_hbm(self->e));
}

#endif /* MOEM_KV_BUDGET_CASES_H */
