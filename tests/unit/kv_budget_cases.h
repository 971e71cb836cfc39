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
 * same tokens, and the memory is freed once it ends. The prefix cache
 * (whole blocks kept for later prompts) gives the tokens and logprobs of
 * computing the prompt whole, on every architecture, and is free space.
 */
#ifndef MOEM_KV_BUDGET_CASES_H
#define MOEM_KV_BUDGET_CASES_H

#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

struct kv_env {
	char *dir, *model, *pack;
	struct moem_engine *e;
	struct moem_decoder *d;
	bool in_hbm;
};

/* A tiny model of arch packed bf16, an engine on kv_backend() and a decoder with defaults. */
static void kv_env_open(struct __test_metadata *_metadata, struct kv_env *v, enum moem_arch arch)
{
	struct moem_engine_opts o = {0};

	moem_log_set_level(MOEM_LOG_WARN);
	v->dir = st_tmpdir();
	v->model = st_path(v->dir, "model");
	v->pack = st_path(v->dir, "m.moem");
	ASSERT_EQ(0, st_tiny_pack(arch, v->model, v->pack)) TH_LOG("%s", moem_last_error());
	o.pack_path = v->pack;
	o.backend = kv_backend();
	o.threads = 1;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	o.hbm_budget = KV_HBM;
	ASSERT_EQ(0, moem_engine_open(&o, &v->e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_decoder_open(v->e, NULL, &v->d)) TH_LOG("%s", moem_last_error());
	v->in_hbm = strcmp(o.backend, "cpu") != 0;
}

FIXTURE(kv)
{
	struct kv_env v;
	struct moem_engine *e;
	struct moem_decoder *d;
	bool in_hbm;
};

static void kv_env_close(struct kv_env *v)
{
	moem_decoder_close(v->d);
	moem_engine_close(v->e);
	if (v->dir)
		st_rm_rf(v->dir);
	free(v->dir);
	free(v->model);
	free(v->pack);
}

FIXTURE_SETUP(kv)
{
	kv_env_open(_metadata, &self->v, MOEM_ARCH_QWEN3_MOE);
	self->e = self->v.e;
	self->d = self->v.d;
	self->in_hbm = self->v.in_hbm;
}

FIXTURE_TEARDOWN(kv)
{
	self->v.d = self->d;
	kv_env_close(&self->v);
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

/* ---- the prefix cache ---- */

#define PC_N   40 /* prompt tokens: 2 whole blocks of 16 and 8 more */
#define PC_NEW 8

struct pc_run {
	int32_t tok[PC_NEW];
	float lp[PC_NEW];
	uint32_t cached; /* prompt tokens the cache gave */
};

/* Greedy decode of prompt to its end; 0 or -errno. */
static int pc_decode(struct moem_decoder *d, const int32_t *prompt, struct pc_run *r)
{
	struct moem_seq_params p = {0};
	struct moem_work w = {.kind = MOEM_WORK_PREFILL};
	struct moem_token_out out;
	uint32_t n = 0;
	int ret;

	p.prompt = prompt;
	p.n_prompt = PC_N;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = PC_NEW;
	ret = moem_decoder_add(d, &p, &w.seq);
	if (!ret)
		ret = moem_decoder_cached_prompt(d, w.seq, &r->cached);
	while (!ret) {
		ret = moem_decoder_step(d, &w, 1, &out, NULL);
		if (ret)
			break;
		if (out.token >= 0 && n < PC_NEW) {
			r->tok[n] = out.token;
			r->lp[n++] = out.logprob;
		}
		if (out.finish != MOEM_FINISH_NONE)
			return n == PC_NEW ? 0 : -EPROTO;
		w.kind = MOEM_WORK_DECODE;
	}
	return ret;
}

/* The same tokens; logprobs the same bits on the CPU, within 1e-3 where the device computes. */
static bool pc_same(const struct pc_run *a, const struct pc_run *b, bool in_hbm)
{
	for (int i = 0; i < PC_NEW; i++)
		if (a->tok[i] != b->tok[i] ||
		    (in_hbm ? fabsf(a->lp[i] - b->lp[i]) > 1e-3f : a->lp[i] != b->lp[i]))
			return false;
	return true;
}

static void pc_logits(void *arg, uint64_t seq, uint32_t pos, const float *logits, uint32_t vocab)
{
	(void)arg;
	(void)seq;
	(void)pos;
	(void)logits;
	(void)vocab;
}

static void pc_reopen(struct moem_engine *e, struct moem_decoder **d, bool off)
{
	struct moem_decoder_opts o = {.prefix_cache_off = off};

	moem_decoder_close(*d);
	*d = NULL;
	(void)moem_decoder_open(e, &o, d);
}

/*
 * A prompt that begins with whole cached blocks takes them and computes
 * the rest only, with the same tokens and logprobs as computing it all
 * (references taken with the cache off); a prompt that differs inside
 * a block takes the blocks before it only; the cache off takes nothing.
 */
static void pc_same_answer(struct __test_metadata *_metadata, struct moem_engine *e,
			   struct moem_decoder **dp, bool in_hbm)
{
	int32_t a[PC_N], b[PC_N];
	struct pc_run ref_a, ref_b, r;
	struct moem_decode_stats st;
	struct moem_kv_usage u;

	for (int i = 0; i < PC_N; i++)
		a[i] = b[i] = (i * 7 + 3) % 64;
	b[20] = (b[20] + 1) % 64; /* in the second block */

	pc_reopen(e, dp, true);
	ASSERT_NE(NULL, *dp) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, pc_decode(*dp, a, &ref_a)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, pc_decode(*dp, a, &r));
	EXPECT_EQ(0u, r.cached);
	EXPECT_TRUE(pc_same(&ref_a, &r, in_hbm));
	ASSERT_EQ(0, pc_decode(*dp, b, &ref_b));
	moem_decoder_kv_usage(*dp, &u);
	EXPECT_EQ(0u, u.blocks_cached);

	pc_reopen(e, dp, false);
	ASSERT_NE(NULL, *dp) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, pc_decode(*dp, a, &r));
	EXPECT_EQ(0u, r.cached);
	EXPECT_TRUE(pc_same(&ref_a, &r, in_hbm));
	/* 40 prompt + 7 generated tokens in the cache: blocks 0 and 1 whole */
	moem_decoder_kv_usage(*dp, &u);
	EXPECT_EQ(2u, u.blocks_cached);
	EXPECT_EQ(0u, u.blocks_reserved);
	EXPECT_EQ(u.blocks_total, u.blocks_free);
	ASSERT_EQ(0, pc_decode(*dp, a, &r));
	EXPECT_EQ(32u, r.cached);
	EXPECT_TRUE(pc_same(&ref_a, &r, in_hbm));
	ASSERT_EQ(0, pc_decode(*dp, b, &r));
	EXPECT_EQ(16u, r.cached);
	EXPECT_TRUE(pc_same(&ref_b, &r, in_hbm));
	/* b's second block is cached beside a's: both are found again */
	ASSERT_EQ(0, pc_decode(*dp, b, &r));
	EXPECT_EQ(32u, r.cached);
	EXPECT_TRUE(pc_same(&ref_b, &r, in_hbm));
	ASSERT_EQ(0, pc_decode(*dp, a, &r));
	EXPECT_EQ(32u, r.cached);
	EXPECT_TRUE(pc_same(&ref_a, &r, in_hbm));
	moem_decoder_stats(*dp, &st);
	EXPECT_EQ(5u * PC_N, st.prompt_tokens);
	EXPECT_EQ(32u + 16 + 32 + 32, st.prefix_tokens);
	EXPECT_EQ(5u * PC_N - st.prefix_tokens, st.prefill_tokens);
}

TEST_F(kv, prefix_cache_gives_the_same_answer)
{
	pc_same_answer(_metadata, self->e, &self->d, self->in_hbm);
}

/* The same on every architecture (MLA's latent cache in deepseek_v2). */
FIXTURE(pc_arch)
{
	struct kv_env v;
};

FIXTURE_VARIANT(pc_arch)
{
	enum moem_arch arch;
};

FIXTURE_VARIANT_ADD(pc_arch, mixtral){.arch = MOEM_ARCH_MIXTRAL};
FIXTURE_VARIANT_ADD(pc_arch, olmoe){.arch = MOEM_ARCH_OLMOE};
FIXTURE_VARIANT_ADD(pc_arch, deepseek_v2){.arch = MOEM_ARCH_DEEPSEEK_V2};

FIXTURE_SETUP(pc_arch)
{
	kv_env_open(_metadata, &self->v, variant->arch);
}

FIXTURE_TEARDOWN(pc_arch)
{
	kv_env_close(&self->v);
}

TEST_F(pc_arch, prefix_cache_gives_the_same_answer)
{
	pc_same_answer(_metadata, self->v.e, &self->v.d, self->v.in_hbm);
}

/*
 * Two sequences at once share the blocks they have in common; a cached
 * block held by none is free space: a budget of one sequence still takes
 * any prompt, evicting what was cached longest ago; a cut drops the
 * cached blocks above it at once.
 */
TEST_F(kv, prefix_cache_is_free_space)
{
	int32_t a[PC_N], b[PC_N], c[PC_N];
	struct moem_seq_params p = {0};
	struct moem_kv_usage u;
	struct pc_run ref_c, r;
	uint64_t x, y, id;
	uint32_t n;

	for (int i = 0; i < PC_N; i++) {
		a[i] = b[i] = (i * 7 + 3) % 64;
		c[i] = (i * 5 + 1) % 64;
	}
	b[20] = (b[20] + 1) % 64;
	ASSERT_EQ(0, pc_decode(self->d, c, &ref_c)) TH_LOG("%s", moem_last_error());

	/* a prefilled, then b added while a runs: b holds a's first block too */
	ASSERT_EQ(0, pc_decode(self->d, a, &r));
	p.prompt = a;
	p.n_prompt = PC_N;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = PC_NEW;
	ASSERT_EQ(0, moem_decoder_add(self->d, &p, &x));
	p.prompt = b;
	ASSERT_EQ(0, moem_decoder_add(self->d, &p, &y));
	ASSERT_EQ(0, moem_decoder_cached_prompt(self->d, y, &n));
	EXPECT_EQ(16u, n);
	moem_decoder_kv_usage(self->d, &u);
	EXPECT_EQ(3u + 2, u.blocks_reserved); /* 3 blocks each, the first shared */
	EXPECT_EQ(2u, u.blocks_used); /* a's 32 tokens in cache, b's 16 in the first of them */
	ASSERT_EQ(0, moem_decoder_cancel(self->d, x));
	ASSERT_EQ(0, moem_decoder_cancel(self->d, y));

	/*
	 * A budget of 3 blocks: one sequence. The cut keeps the cached blocks
	 * below it (c's two, a's first); a takes its first block and evicts
	 * c's, the longest released; then c finds nothing and evicts a's.
	 */
	ASSERT_EQ(0, moem_decoder_set_kv_bytes(self->d, 3 * u.block_bytes));
	ASSERT_EQ(0, pc_decode(self->d, a, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(16u, r.cached);
	moem_decoder_kv_usage(self->d, &u);
	EXPECT_EQ(3u, u.blocks_total);
	EXPECT_EQ(3 * u.block_bytes, u.pool_bytes);
	EXPECT_EQ(2u, u.blocks_cached);
	ASSERT_EQ(0, pc_decode(self->d, c, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, r.cached);
	EXPECT_TRUE(pc_same(&ref_c, &r, self->in_hbm));
	ASSERT_EQ(0, pc_decode(self->d, a, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, r.cached); /* c took a's cached blocks */
	ASSERT_EQ(0, pc_decode(self->d, a, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(32u, r.cached);

	/* a cut to one block: the cached blocks above it go, and the memory with them */
	ASSERT_EQ(0, moem_decoder_set_kv_bytes(self->d, u.block_bytes));
	EXPECT_EQ(-EFBIG, kv_add(self->d, &id));
	moem_decoder_kv_usage(self->d, &u);
	EXPECT_EQ(u.block_bytes, u.pool_bytes);
	EXPECT_GE(1u, u.blocks_cached);
}

/*
 * Random traffic: prompts that share beginnings of several lengths, run
 * up to four at once in one step with random prefill chunks, some
 * cancelled, under a budget of a few sequences so cached blocks are
 * evicted and reused all the time. Every sequence that ends gives the
 * tokens (and logprobs) it gives alone with the cache off; a refused add
 * (ENOSPC) comes only when the sequences held leave too little.
 */
#define RT_SEQS	  96
#define RT_MAXLEN 72

struct rt_seq {
	int32_t prompt[RT_MAXLEN];
	uint32_t n, max_new;
	struct pc_run ref, got;
	uint32_t n_got;
	uint64_t id;
	bool live, done;
};

static uint32_t rt_rand(uint64_t *x)
{
	*x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*x >> 33);
}

static int rt_add(struct moem_decoder *d, struct rt_seq *q)
{
	struct moem_seq_params p = {0};

	p.prompt = q->prompt;
	p.n_prompt = q->n;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = q->max_new;
	return moem_decoder_add(d, &p, &q->id);
}

/* q alone to its end: its tokens into r. */
static int rt_alone(struct moem_decoder *d, struct rt_seq *q, struct pc_run *r)
{
	struct moem_work w = {.kind = MOEM_WORK_PREFILL};
	struct moem_token_out out;
	uint32_t n = 0;
	int ret = rt_add(d, q);

	w.seq = q->id;
	while (!ret) {
		ret = moem_decoder_step(d, &w, 1, &out, NULL);
		if (!ret && out.token >= 0 && n < PC_NEW) {
			r->tok[n] = out.token;
			r->lp[n++] = out.logprob;
		}
		if (!ret && out.finish != MOEM_FINISH_NONE)
			return n == q->max_new ? 0 : -EPROTO;
		w.kind = MOEM_WORK_DECODE;
	}
	return ret;
}

static void rt_traffic(struct __test_metadata *_metadata, struct moem_engine *e,
		       struct moem_decoder **dp, bool in_hbm)
{
	static struct rt_seq q[RT_SEQS];
	int32_t base[3][RT_MAXLEN];
	struct moem_work w[4];
	struct moem_token_out out[4];
	struct rt_seq *run[4];
	struct moem_kv_usage u;
	uint32_t n_run = 0, next = 0, finished = 0, cancelled = 0, enospc = 0;
	uint64_t x = 12345, cached = 0;
	/* the kernel emulator runs a step a hundred times slower */
	const uint32_t n_seqs = getenv("MOEM_GPU_EMU") ? RT_SEQS / 4 : RT_SEQS;

	memset(q, 0, sizeof(q));

	for (int b = 0; b < 3; b++)
		for (int i = 0; i < RT_MAXLEN; i++)
			base[b][i] = (int32_t)(rt_rand(&x) % 64);
	for (uint32_t i = 0; i < n_seqs; i++) {
		/* a shared beginning of 0..RT_MAXLEN-8 tokens, then its own */
		uint32_t share = rt_rand(&x) % (RT_MAXLEN - 8), b = rt_rand(&x) % 3;

		q[i].n = share + 1 + rt_rand(&x) % 8;
		for (uint32_t k = 0; k < q[i].n; k++)
			q[i].prompt[k] = k < share ? base[b][k] : (int32_t)(rt_rand(&x) % 64);
		q[i].max_new = 1 + rt_rand(&x) % PC_NEW;
	}
	pc_reopen(e, dp, true);
	ASSERT_NE(NULL, *dp) TH_LOG("%s", moem_last_error());
	for (uint32_t i = 0; i < n_seqs; i++)
		ASSERT_EQ(0, rt_alone(*dp, &q[i], &q[i].ref)) TH_LOG("%s", moem_last_error());
	pc_reopen(e, dp, false);
	ASSERT_NE(NULL, *dp) TH_LOG("%s", moem_last_error());
	moem_decoder_kv_usage(*dp, &u);
	/* room for two sequences of the longest */
	ASSERT_EQ(0, moem_decoder_set_kv_bytes(*dp, 2 * 5 * u.block_bytes));

	while (next < n_seqs || n_run) {
		uint32_t n = 0;

		/* admit while it fits */
		while (next < n_seqs && n_run < 4) {
			int ret = rt_add(*dp, &q[next]);
			uint32_t c;

			if (ret == -ENOSPC) {
				ASSERT_GT(n_run, 0u) TH_LOG("refused with nothing running");
				enospc++;
				break;
			}
			ASSERT_EQ(0, ret) TH_LOG("%s", moem_last_error());
			ASSERT_EQ(0, moem_decoder_cached_prompt(*dp, q[next].id, &c));
			ASSERT_LT(c, q[next].n);
			ASSERT_EQ(0u, c % 16);
			cached += c;
			q[next].live = true;
			run[n_run++] = &q[next++];
		}
		for (uint32_t i = 0; i < n_run; i++) {
			uint32_t left;

			ASSERT_EQ(0, moem_decoder_pending_prompt(*dp, run[i]->id, &left));
			w[n].seq = run[i]->id;
			w[n].kind = left ? MOEM_WORK_PREFILL : MOEM_WORK_DECODE;
			w[n].n_tokens = left ? 1 + rt_rand(&x) % left : 1;
			n++;
		}
		ASSERT_EQ(0, moem_decoder_step(*dp, w, n, out, NULL))
		TH_LOG("%s", moem_last_error());
		for (uint32_t i = 0; i < n; i++) {
			struct rt_seq *r = run[i];

			if (out[i].token >= 0 && r->n_got < PC_NEW) {
				r->got.tok[r->n_got] = out[i].token;
				r->got.lp[r->n_got++] = out[i].logprob;
			}
			if (out[i].finish != MOEM_FINISH_NONE) {
				r->live = false;
				r->done = true;
				finished++;
			} else if (rt_rand(&x) % 16 == 0) {
				ASSERT_EQ(0, moem_decoder_cancel(*dp, r->id));
				r->live = false;
				cancelled++;
			}
		}
		for (uint32_t i = 0; i < n_run;)
			if (!run[i]->live)
				run[i] = run[--n_run];
			else
				i++;
	}
	for (uint32_t i = 0; i < n_seqs; i++) {
		if (!q[i].done)
			continue;
		EXPECT_EQ(q[i].max_new, q[i].n_got);
		for (uint32_t k = 0; k < q[i].n_got && k < q[i].max_new; k++) {
			EXPECT_EQ(q[i].ref.tok[k], q[i].got.tok[k])
			TH_LOG("sequence %u token %u", i, k);
			if (in_hbm) {
				EXPECT_LE(fabsf(q[i].ref.lp[k] - q[i].got.lp[k]), 1e-3f);
			} else {
				EXPECT_EQ(q[i].ref.lp[k], q[i].got.lp[k]);
			}
		}
	}
	moem_decoder_kv_usage(*dp, &u);
	EXPECT_EQ(0u, u.blocks_reserved);
	EXPECT_EQ(0u, u.seqs);
	TH_LOG("%u finished, %u cancelled, %u adds waited; %llu prompt tokens from the cache",
	       finished, cancelled, enospc, (unsigned long long)cached);
	EXPECT_GT(finished, n_seqs / 2);
	EXPECT_GT(cached, 0u);
	EXPECT_GT(enospc, 0u);
}

TEST_F_TIMEOUT(kv, prefix_cache_random_traffic, 300)
{
	rt_traffic(_metadata, self->e, &self->d, self->in_hbm);
}

/* A sequence that wants every prompt position's logits computes them all. */
TEST_F(kv, prefix_cache_not_for_prompt_logits)
{
	int32_t a[PC_N];
	struct moem_seq_params p = {0};
	struct pc_run r;
	uint32_t n = 99;
	uint64_t id;

	for (int i = 0; i < PC_N; i++)
		a[i] = (i * 7 + 3) % 64;
	ASSERT_EQ(0, pc_decode(self->d, a, &r));
	p.prompt = a;
	p.n_prompt = PC_N;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = PC_NEW;
	p.logits_fn = pc_logits;
	ASSERT_EQ(0, moem_decoder_add(self->d, &p, &id));
	ASSERT_EQ(0, moem_decoder_cached_prompt(self->d, id, &n));
	EXPECT_EQ(0u, n);
	ASSERT_EQ(0, moem_decoder_cancel(self->d, id));
	EXPECT_EQ(-ENOENT, moem_decoder_cached_prompt(self->d, id, &n));
}

#endif /* MOEM_KV_BUDGET_CASES_H */
