// SPDX-License-Identifier: GPL-2.0-only
/*
 * The decoder's sequences, KV blocks and steps (decode.h); the forward
 * pass itself is in decode_fwd.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "decode_int.h"

#define KV_DEFAULT_MAX (1ULL << 30)

const char *moem_finish_name(enum moem_finish f)
{
	static const char *const n[] = {"none", "eos", "stop", "length", "cancelled"};

	return (unsigned int)f <= MOEM_FINISH_CANCELLED ? n[f] : "?";
}

/* ---- KV blocks ---- */

static uint32_t blocks_for(const struct moem_decoder *d, uint32_t tokens)
{
	return (tokens + d->o.block_tokens - 1) / d->o.block_tokens;
}

/*
 * Make the pool n blocks (copying the first min(n, pool_blocks)); between
 * steps only. A shrink must leave every used block below n.
 */
static int resize_pool(struct moem_decoder *d, uint32_t n)
{
	uint32_t keep = moem_min(n, d->pool_blocks);
	moem_dptr np;
	int ret;

	if (n == d->pool_blocks)
		return 0;
	if (n > d->pool_blocks) {
		ret = moem_kv_blocks_resize(d, n);
		if (ret)
			return ret;
	}
	ret = moem_be_alloc(d->be, (uint64_t)n * d->block_bytes, &np);
	if (ret)
		return moem_err_prefix(-ret, "KV cache of %u blocks", n);
	if (d->pool) {
		ret = moem_be_dtod(d->be, np, d->pool, (uint64_t)keep * d->block_bytes, NULL);
		if (!ret)
			ret = moem_be_stream_sync(d->be, NULL);
		if (ret) {
			moem_be_free(d->be, np);
			return ret;
		}
		moem_be_free(d->be, d->pool);
	}
	if (n < d->pool_blocks) {
		/* nothing held or cached from n up (apply_kv); failing only to shrink */
		(void)moem_kv_blocks_resize(d, n);
	}
	pthread_mutex_lock(&d->lock);
	d->pool = np;
	d->pool_blocks = n;
	pthread_mutex_unlock(&d->lock);
	moem_eng_graph_flush(d->e); /* graphs captured with the old pool (synchronised above) */
	return 0;
}

/* The pool's size in blocks for a kv_bytes value (0: the default). */
static uint32_t kv_blocks(const struct moem_decoder *d, uint64_t kv)
{
	if (!kv)
		kv = d->kv_default;
	return (uint32_t)moem_max(moem_min(kv / d->block_bytes, (uint64_t)UINT32_MAX >> 2), 1);
}

/*
 * Follow the engine's kv_bytes knob (set from any thread) at a step
 * boundary: the pool grows at once; a cut lowers the limit now (new
 * sequences see it) and frees the memory once no running sequence holds
 * a block above it: blocks are taken lowest first, so that happens as
 * the sequences that hold them end. The engine charges what the pool
 * holds to the HBM budget (moem_eng_kv_resize()).
 */
static int apply_kv(struct moem_decoder *d)
{
	uint64_t want = moem_engine_get_knob(d->e, MOEM_BUDGET_KV_BYTES);
	uint32_t n, old = d->pool_blocks, top = 0;
	int ret;

	if (want == d->kv_seen && d->pool_blocks == d->limit_blocks)
		return 0;
	n = kv_blocks(d, want);
	if (n > d->pool_blocks) {
		ret = resize_pool(d, n);
		if (ret) {
			/* The device may lack the memory the budget allows: keep
			 * serving from the pool in force, and try again only on
			 * the next change of the knob. */
			moem_warn("kv_bytes %llu not applied, the KV pool stays %llu bytes: %s",
				  (unsigned long long)want,
				  (unsigned long long)d->pool_blocks * d->block_bytes,
				  moem_strerror(ret));
			d->kv_seen = want;
			return 0;
		}
	}
	pthread_mutex_lock(&d->lock);
	d->kv_seen = want;
	d->limit_blocks = n; /* a cut below what is reserved applies as sequences end */
	d->o.kv_bytes = (uint64_t)n * d->block_bytes;
	pthread_mutex_unlock(&d->lock);
	/* a cut drops the cached prefixes above it; held blocks wait for their end */
	moem_kv_drop_above(d, n);
	top = moem_kv_top(d);
	if (d->pool_blocks > n && top <= n) {
		ret = resize_pool(d, n);
		if (ret)
			return ret;
	}
	if (d->pool_blocks != old)
		return moem_eng_kv_resize(d->e, (uint64_t)d->pool_blocks * d->block_bytes,
					  d->block_bytes);
	return 0;
}

static void free_seq(struct moem_decoder *d, struct dec_seq *s)
{
	moem_kv_release(d, d->tables_host + s->tab_off, s->n_blocks);
	pthread_mutex_lock(&d->lock);
	d->n_seqs--;
	pthread_mutex_unlock(&d->lock);
	free(s->toks);
	free(s->seen);
	free(s->gen_count);
	s->live = false;
	s->toks = NULL;
	s->seen = NULL;
	s->gen_count = NULL;
}

/* ---- open / close ---- */

static int alloc_acts(struct moem_decoder *d)
{
	const struct moem_model_config *c = d->cfg;
	const uint64_t T = DEC_PIECE, H = c->hidden, nh = c->n_heads;
	uint64_t qw = d->mla ? nh * (c->qk_nope_dim + c->qk_rope_dim) : nh * c->head_dim;
	uint64_t aw = d->mla ? nh * c->v_head_dim : nh * c->head_dim;
	uint64_t lat = c->kv_lora_rank + c->qk_rope_dim;
	struct {
		moem_dptr *p;
		uint64_t bytes;
	} a[] = {
		{&d->xb, T * H * 2},
		{&d->q, T * qw * 4},
		{&d->kv, T * d->entry * 4},
		{&d->att, T * aw * 4},
		{&d->att_b, T * aw * 2},
		{&d->oproj, T * H * 4},
		{&d->qa, T * (c->q_lora_rank ? c->q_lora_rank : 1) * 4},
		{&d->qa_b, T * (c->q_lora_rank ? c->q_lora_rank : 1) * 2},
		{&d->qattn, d->mla ? T * nh * lat * 4 : 4},
		{&d->olat, d->mla ? T * nh * c->kv_lora_rank * 4 : 4},
		{&d->hb, T * H * 2},
		{&d->logits, T * c->vocab * 4},
		{&d->ids_d, T * 4},
		{&d->pos_d, T * 4},
		{&d->tab_d, T * 4},
		{&d->tables, (uint64_t)d->o.max_seqs * d->max_blocks * 4},
	};
	int ret;

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(a); i++) {
		ret = moem_be_alloc(d->be, a[i].bytes, a[i].p);
		if (ret)
			return ret;
	}
	{
		size_t lb = T * c->vocab * sizeof(float),
		       bytes = moem_align_up(lb + 3 * T * 4, 4096);

		d->logits_host = aligned_alloc(4096, bytes);
		if (!d->logits_host)
			return -ENOMEM;
		d->io_host = (int32_t *)((uint8_t *)d->logits_host + lb);
		ret = moem_be_host_register(d->be, d->logits_host, bytes);
		if (ret)
			return moem_err_prefix(-ret, "decoder: pinning %zu bytes", bytes);
		d->host_reg = true;
	}
	d->scratch = malloc(2 * (size_t)c->vocab * sizeof(uint32_t));
	d->tables_host = calloc((size_t)d->o.max_seqs * d->max_blocks, sizeof(int32_t));
	d->seqs = calloc(d->o.max_seqs, sizeof(*d->seqs));
	if (!d->logits_host || !d->scratch || !d->tables_host || !d->seqs)
		return -ENOMEM;
	return 0;
}

static int rope_tables(struct moem_decoder *d)
{
	const uint64_t n = (uint64_t)d->o.max_context * (d->rope.dim / 2);
	float *cs = malloc(n * sizeof(float)), *sn = malloc(n * sizeof(float));
	int ret = cs && sn ? 0 : -ENOMEM;

	if (!ret) {
		moem_rope_tables(&d->rope, d->o.max_context, cs, sn);
		ret = moem_be_alloc(d->be, n * 4, &d->cos);
	}
	if (!ret)
		ret = moem_be_alloc(d->be, n * 4, &d->sin);
	if (!ret)
		ret = moem_be_htod(d->be, d->cos, cs, n * 4, NULL);
	if (!ret)
		ret = moem_be_htod(d->be, d->sin, sn, n * 4, NULL);
	if (!ret)
		ret = moem_be_stream_sync(d->be, NULL);
	free(cs);
	free(sn);
	return ret;
}

static int check_opts(struct moem_decoder *d, const struct moem_decoder_opts *o)
{
	const struct moem_model_config *c = d->cfg;

	d->o = *o;
	if (!d->o.block_tokens)
		d->o.block_tokens = 16;
	if (!d->o.max_seqs)
		d->o.max_seqs = 64;
	if (!d->o.max_step_tokens)
		d->o.max_step_tokens = 512;
	if (!d->o.max_context)
		d->o.max_context = c->max_pos;
	if (d->o.block_tokens > 1024)
		return moem_errf(EINVAL, "decoder: %u tokens per KV block, at most 1024",
				 d->o.block_tokens);
	if (d->o.max_seqs > 1024)
		return moem_errf(EINVAL, "decoder: %u sequences, at most 1024", d->o.max_seqs);
	if (d->o.max_step_tokens > MOEM_BE_MAX_BATCH)
		return moem_errf(EINVAL, "decoder: %u tokens per step, at most %u",
				 d->o.max_step_tokens, MOEM_BE_MAX_BATCH);
	if (d->o.max_context < 2 || d->o.max_context > c->max_pos)
		return moem_errf(EINVAL, "decoder: context of %u tokens, the model allows 2..%u",
				 d->o.max_context, c->max_pos);
	if ((unsigned int)d->o.dense_prec >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "decoder: no precision %d for the dense weights",
				 (int)d->o.dense_prec);
	return 0;
}

int moem_decoder_open(struct moem_engine *e, const struct moem_decoder_opts *o,
		      struct moem_decoder **out)
{
	struct moem_decoder_opts def = {0};
	struct moem_decoder *d;
	uint32_t major, minor;
	uint64_t kv, knob_was = 0;
	bool knob_set = false;
	int ret;

	*out = NULL;
	moem_pack_version(e->pack, &major, &minor);
	if (major == 1 && minor < 1)
		return moem_errf(EPROTONOSUPPORT,
				 "%s: pack format %u.%u predates full decode (no context, RoPE "
				 "or eos fields): re-pack it with this moem's `moem pack`",
				 moem_pack_path(e->pack), major, minor);
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	d->e = e;
	d->be = e->be;
	d->cfg = e->cfg;
	d->mla = d->cfg->arch == MOEM_ARCH_DEEPSEEK_V2;
	d->next_id = 1;
	d->lru_head = d->lru_tail = -1;
	ret = check_opts(d, o ? o : &def);
	if (!ret)
		ret = moem_rope_info(d->cfg, &d->rope);
	if (ret)
		goto err;
	d->entry = d->mla ? d->cfg->kv_lora_rank + d->cfg->qk_rope_dim
			  : 2 * d->cfg->n_kv_heads * d->cfg->head_dim;
	d->block_bytes = (uint64_t)d->cfg->n_layers * d->o.block_tokens * d->entry * 4;
	d->max_blocks = blocks_for(d, d->o.max_context);
	d->kv_default = moem_max(
		moem_min((uint64_t)d->o.max_seqs * d->max_blocks * d->block_bytes, KV_DEFAULT_MAX),
		(uint64_t)d->max_blocks * d->block_bytes);
	/* In HBM, a pool the user did not size leaves the experts room. */
	d->kv_default = moem_max(moem_min(d->kv_default, moem_eng_kv_room(e)), d->block_bytes);
	/* The budget is the engine's kv_bytes knob; the options set it. */
	kv = d->o.kv_bytes ? d->o.kv_bytes : moem_engine_get_knob(e, MOEM_BUDGET_KV_BYTES);
	if (kv && kv < d->block_bytes) {
		ret = moem_errf(ERANGE, "kv budget of %llu bytes holds no %llu-byte block",
				(unsigned long long)kv, (unsigned long long)d->block_bytes);
		goto err;
	}
	ret = moem_engine_check_knob(e, MOEM_BUDGET_KV_BYTES, kv ? kv : d->kv_default);
	if (!ret && d->o.kv_bytes) {
		/* A decoder that fails to open leaves the knob as it found it. */
		knob_was = moem_engine_get_knob(e, MOEM_BUDGET_KV_BYTES);
		ret = moem_engine_set_knob(e, MOEM_BUDGET_KV_BYTES, d->o.kv_bytes);
		knob_set = !ret;
	}
	if (!ret)
		ret = alloc_acts(d);
	if (!ret)
		ret = rope_tables(d);
	if (!ret)
		ret = moem_dec_load(d);
	if (!ret)
		ret = resize_pool(d, kv_blocks(d, kv));
	if (ret)
		goto err;
	d->kv_seen = kv;
	d->limit_blocks = d->pool_blocks;
	d->o.kv_bytes = (uint64_t)d->pool_blocks * d->block_bytes;
	ret = moem_eng_kv_resize(e, d->o.kv_bytes, d->block_bytes);
	if (ret)
		goto err;
	*out = d;
	return 0;
err:
	moem_decoder_close(d);
	if (knob_set)
		(void)moem_engine_set_knob(e, MOEM_BUDGET_KV_BYTES, knob_was);
	return ret;
}

void moem_decoder_close(struct moem_decoder *d)
{
	if (!d)
		return;
	for (uint32_t i = 0; d->seqs && i < d->o.max_seqs; i++)
		if (d->seqs[i].live)
			free_seq(d, &d->seqs[i]);
	moem_dec_unload(d);
	if (d->pool)
		moem_eng_kv_resize(d->e, 0, 0);
	{
		moem_dptr b[] = {d->xb,	    d->q,      d->kv,	 d->att,   d->att_b,
				 d->oproj,  d->qa,     d->qa_b,	 d->qattn, d->olat,
				 d->hb,	    d->logits, d->ids_d, d->pos_d, d->tab_d,
				 d->tables, d->pool,   d->cos,	 d->sin};

		for (size_t i = 0; i < MOEM_ARRAY_SIZE(b); i++)
			moem_be_free(d->be, b[i]);
	}
	if (d->host_reg)
		moem_be_host_unregister(d->be, d->logits_host);
	free(d->logits_host);
	free(d->scratch);
	free(d->tables_host);
	free(d->seqs);
	moem_kv_blocks_free(d);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* ---- sequences ---- */

static int check_params(const struct moem_decoder *d, const struct moem_seq_params *p)
{
	const struct moem_model_config *c = d->cfg;
	int ret;

	if (!p->prompt || !p->n_prompt)
		return moem_errf(EINVAL, "empty prompt: give at least one token");
	if (p->n_prompt >= d->o.max_context)
		return moem_errf(EINVAL, "prompt of %u tokens does not fit the context of %u",
				 p->n_prompt, d->o.max_context);
	for (uint32_t i = 0; i < p->n_prompt; i++)
		if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= c->vocab)
			return moem_errf(EINVAL,
					 "prompt token %u is id %d, outside the vocabulary "
					 "0..%u",
					 i, p->prompt[i], c->vocab - 1);
	if (!p->max_new_tokens)
		return moem_errf(EINVAL, "max_new_tokens must be at least 1");
	for (uint32_t i = 0; i < p->n_eos && i < MOEM_DECODE_MAX_EOS; i++)
		if (p->eos[i] < 0 || (uint32_t)p->eos[i] >= c->vocab)
			return moem_errf(EINVAL,
					 "end-of-sequence id %d is outside the vocabulary 0..%u",
					 p->eos[i], c->vocab - 1);
	if (p->min_new_tokens > p->max_new_tokens)
		return moem_errf(EINVAL, "min_new_tokens %u is more than max_new_tokens %u",
				 p->min_new_tokens, p->max_new_tokens);
	if (p->n_eos > MOEM_DECODE_MAX_EOS || p->n_stop > MOEM_DECODE_MAX_STOP ||
	    p->top_logprobs > MOEM_DECODE_MAX_TOP_LOGPROBS)
		return moem_errf(EINVAL,
				 "too many eos ids (%u > %d), stop sequences (%u > %d) "
				 "or top logprobs (%u > %d)",
				 p->n_eos, MOEM_DECODE_MAX_EOS, p->n_stop, MOEM_DECODE_MAX_STOP,
				 p->top_logprobs, MOEM_DECODE_MAX_TOP_LOGPROBS);
	for (uint32_t i = 0; i < p->n_stop; i++)
		if (!p->stop_len[i] || p->stop_len[i] > MOEM_DECODE_MAX_STOP_LEN)
			return moem_errf(EINVAL, "stop sequence %u has %u tokens, want 1..%d", i,
					 p->stop_len[i], MOEM_DECODE_MAX_STOP_LEN);
	if (p->n_bias > MOEM_DECODE_MAX_BIAS)
		return moem_errf(EINVAL, "%u logit biases: at most %d", p->n_bias,
				 MOEM_DECODE_MAX_BIAS);
	for (uint32_t i = 0; i < p->n_bias; i++) {
		if (p->bias_id[i] < 0 || (uint32_t)p->bias_id[i] >= c->vocab)
			return moem_errf(EINVAL,
					 "logit bias %u is for id %d, outside the vocabulary "
					 "0..%u",
					 i, p->bias_id[i], c->vocab - 1);
		if (!(p->bias[i] >= -100 && p->bias[i] <= 100))
			return moem_errf(EINVAL, "logit bias %u is %g: -100..100", i,
					 (double)p->bias[i]);
	}
	if (p->n_vocab > c->vocab)
		return moem_errf(EINVAL, "n_vocab %u is more than the model's vocabulary of %u",
				 p->n_vocab, c->vocab);
	ret = moem_sampling_check(&p->sampling);
	return ret ? moem_err_prefix(-ret, "sampling") : 0;
}

int moem_decoder_add(struct moem_decoder *d, const struct moem_seq_params *p, uint64_t *id)
{
	struct dec_seq *s = NULL;
	uint32_t total, nb, slot, m = 0, need, avail;
	int32_t *tab, *shared = NULL;
	int ret;

	ret = apply_kv(d);
	if (!ret)
		ret = check_params(d, p);
	if (ret)
		return ret;
	total = (uint32_t)moem_min((uint64_t)p->n_prompt + p->max_new_tokens,
				   (uint64_t)d->o.max_context);
	nb = blocks_for(d, total);
	for (slot = 0; slot < d->o.max_seqs; slot++)
		if (!d->seqs[slot].live)
			break;
	if (slot == d->o.max_seqs)
		return moem_errf(EMFILE, "the decoder holds %u sequences already", d->o.max_seqs);
	if (!p->logits_fn && p->n_prompt > d->o.block_tokens) {
		/* whole blocks of the prompt, its last token left to compute */
		shared = malloc(sizeof(*shared) * ((p->n_prompt - 1) / d->o.block_tokens));
		if (!shared)
			return -ENOMEM;
		m = moem_kv_match(d, p->prompt, (p->n_prompt - 1) / d->o.block_tokens, shared);
	}
	need = nb - m + moem_kv_fresh(d, shared, m);
	pthread_mutex_lock(&d->lock);
	avail = d->limit_blocks - moem_min(d->reserved, d->limit_blocks);
	if (nb > d->limit_blocks)
		ret = moem_errf(EFBIG,
				"%u tokens need %u KV blocks of %u tokens; the kv budget holds "
				"%u",
				total, nb, d->o.block_tokens, d->limit_blocks);
	else if (need > avail)
		ret = moem_errf(ENOSPC,
				"%u tokens need %u KV blocks, %u of %u are free: retry when a "
				"sequence ends",
				total, need, avail, d->limit_blocks);
	pthread_mutex_unlock(&d->lock);
	if (ret)
		goto out;
	s = &d->seqs[slot];
	memset(s, 0, sizeof(*s));
	s->toks = malloc(sizeof(int32_t) * total);
	if (p->sampling.repetition_penalty != 1.0f)
		s->seen = calloc(d->cfg->vocab, 1);
	if (p->sampling.frequency_penalty != 0 || p->sampling.presence_penalty != 0)
		s->gen_count = calloc(d->cfg->vocab, sizeof(uint32_t));
	if (!s->toks || (p->sampling.repetition_penalty != 1.0f && !s->seen) ||
	    ((p->sampling.frequency_penalty != 0 || p->sampling.presence_penalty != 0) &&
	     !s->gen_count)) {
		free(s->toks);
		free(s->seen);
		free(s->gen_count);
		ret = -ENOMEM;
		goto out;
	}
	memcpy(s->toks, p->prompt, sizeof(int32_t) * p->n_prompt);
	for (uint32_t i = 0; s->seen && i < p->n_prompt; i++)
		s->seen[p->prompt[i]] = 1;
	s->p = *p;
	s->p.prompt = s->toks;
	if (p->model_eos)
		for (uint32_t i = 0; i < d->cfg->n_eos && s->p.n_eos < MOEM_DECODE_MAX_EOS; i++)
			s->p.eos[s->p.n_eos++] = d->cfg->eos[i];
	s->n_prompt = s->n_tok = p->n_prompt;
	s->cap = total;
	moem_rng_seed(&s->rng, p->sampling.seed, 0x5eed);
	s->tab_off = slot * d->max_blocks;
	tab = d->tables_host + s->tab_off;
	moem_kv_take(d, shared, m, nb, tab);
	pthread_mutex_lock(&d->lock);
	d->n_seqs++;
	d->total.prompt_tokens += p->n_prompt;
	d->total.prefix_tokens += (uint64_t)m * d->o.block_tokens;
	pthread_mutex_unlock(&d->lock);
	s->n_blocks = nb;
	/* the matched blocks hold the prompt's first m blocks: prefill goes on from there */
	s->n_cached = s->n_prefix = m * d->o.block_tokens;
	s->n_reg = m;
	s->reg_parent = m ? shared[m - 1] : -1;
	s->reg_gen = m ? d->kvb[shared[m - 1]].gen : 0;
	s->reg_hash = m ? d->kvb[shared[m - 1]].hash : 0;
	ret = moem_be_htod(d->be, d->tables + (uint64_t)s->tab_off * 4, tab, (uint64_t)nb * 4,
			   NULL);
	if (!ret)
		ret = moem_be_stream_sync(d->be, NULL);
	s->live = true;
	if (ret) {
		free_seq(d, s);
		goto out;
	}
	s->id = d->next_id++;
	*id = s->id;
out:
	free(shared);
	return ret;
}

static struct dec_seq *find(const struct moem_decoder *d, uint64_t id)
{
	for (uint32_t i = 0; i < d->o.max_seqs; i++)
		if (d->seqs[i].live && d->seqs[i].id == id)
			return &d->seqs[i];
	return NULL;
}

int moem_decoder_cancel(struct moem_decoder *d, uint64_t id)
{
	struct dec_seq *s = find(d, id);

	if (!s)
		return moem_errf(ENOENT, "no sequence %llu", (unsigned long long)id);
	free_seq(d, s);
	return 0;
}

int moem_decoder_pending_prompt(const struct moem_decoder *d, uint64_t id, uint32_t *n)
{
	const struct dec_seq *s = find(d, id);

	if (!s)
		return moem_errf(ENOENT, "no sequence %llu", (unsigned long long)id);
	*n = s->n_cached < s->n_prompt ? s->n_prompt - s->n_cached : 0;
	return 0;
}

int moem_decoder_cached_prompt(const struct moem_decoder *d, uint64_t id, uint32_t *n)
{
	const struct dec_seq *s = find(d, id);

	if (!s)
		return moem_errf(ENOENT, "no sequence %llu", (unsigned long long)id);
	*n = s->n_prefix;
	return 0;
}

/* ---- steps ---- */

struct tok_ref {
	struct dec_seq *s;
	uint32_t item;
	bool sample; /* the next token is drawn from this position's logits */
	bool logits; /* logits wanted (sample, or logits_fn) */
};

static enum moem_finish check_finish(const struct moem_decoder *d, const struct dec_seq *s,
				     int32_t tok)
{
	for (uint32_t i = 0; i < s->p.n_eos; i++)
		if (s->p.eos[i] == tok)
			return MOEM_FINISH_EOS;
	for (uint32_t i = 0; i < s->p.n_stop; i++) {
		uint32_t n = s->p.stop_len[i];

		if (n <= s->n_gen &&
		    !memcmp(s->toks + s->n_tok - n, s->p.stop[i], sizeof(int32_t) * n))
			return MOEM_FINISH_STOP;
	}
	if (s->n_gen >= s->p.max_new_tokens || s->n_tok >= s->cap)
		return MOEM_FINISH_LENGTH;
	return MOEM_FINISH_NONE;
}

static void sample_row(struct moem_decoder *d, struct dec_seq *s, float *logits,
		       struct moem_token_out *o)
{
	int32_t tok;

	for (uint32_t i = 0; i < s->p.n_bias; i++)
		logits[s->p.bias_id[i]] += s->p.bias[i];
	/* ids past the tokenizer's (a padded vocab_size): never sampled */
	for (uint32_t v = s->p.n_vocab ? s->p.n_vocab : d->cfg->vocab; v < d->cfg->vocab; v++)
		logits[v] = -INFINITY;
	/* min_new_tokens: no end before then */
	for (uint32_t i = 0; s->n_gen < s->p.min_new_tokens && i < s->p.n_eos; i++)
		if (s->p.eos[i] >= 0 && (uint32_t)s->p.eos[i] < d->cfg->vocab)
			logits[s->p.eos[i]] = -INFINITY;
	if (s->p.constraint)
		s->p.constraint->mask(s->p.constraint_arg, logits, d->cfg->vocab);
	moem_sample(&s->p.sampling, logits, d->cfg->vocab, s->seen, s->gen_count, &s->rng,
		    s->p.top_logprobs, d->scratch, &tok, &o->logprob, o->top_ids, o->top_logprobs);
	if (s->p.constraint)
		s->p.constraint->accept(s->p.constraint_arg, tok);
	o->n_top = s->p.top_logprobs;
	o->token = tok;
	s->toks[s->n_tok++] = tok;
	s->n_gen++;
	if (s->seen)
		s->seen[tok] = 1;
	if (s->gen_count)
		s->gen_count[tok]++;
	o->n_generated = s->n_gen;
	o->finish = check_finish(d, s, tok);
}

static int check_items(struct moem_decoder *d, const struct moem_work *it, uint32_t n,
		       struct dec_seq **seq, uint32_t *ntok)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct dec_seq *s = find(d, it[i].seq);
		uint32_t left;

		if (!s)
			return moem_errf(ENOENT, "step item %u: no sequence %llu", i,
					 (unsigned long long)it[i].seq);
		for (uint32_t j = 0; j < i; j++)
			if (seq[j] == s)
				return moem_errf(EINVAL, "step: sequence %llu appears twice",
						 (unsigned long long)it[i].seq);
		seq[i] = s;
		left = s->n_prompt - moem_min(s->n_cached, s->n_prompt);
		if (it[i].kind == MOEM_WORK_PREFILL) {
			if (!left)
				return moem_errf(EINVAL,
						 "step item %u: sequence %llu has no prompt left "
						 "to prefill (decode it)",
						 i, (unsigned long long)s->id);
			ntok[i] = it[i].n_tokens ? it[i].n_tokens : left;
			if (ntok[i] > left)
				return moem_errf(EINVAL,
						 "step item %u: %u prompt tokens asked, %u left", i,
						 ntok[i], left);
		} else if (it[i].kind == MOEM_WORK_DECODE) {
			if (left)
				return moem_errf(EINVAL,
						 "step item %u: sequence %llu still has %u prompt "
						 "tokens to prefill",
						 i, (unsigned long long)s->id, left);
			ntok[i] = 1;
		} else {
			return moem_errf(EINVAL, "step item %u: unknown kind %d", i,
					 (int)it[i].kind);
		}
		total += ntok[i];
	}
	if (total > d->o.max_step_tokens)
		return moem_errf(EINVAL, "step of %llu tokens, at most %u",
				 (unsigned long long)total, d->o.max_step_tokens);
	return 0;
}

/* Run one piece: refs[0..T) with d->ids/pos/tab set; sample and report. */
static int run_piece(struct moem_decoder *d, struct tok_ref *refs, uint32_t T, bool prefill,
		     struct moem_token_out *out, struct moem_decode_stats *st)
{
	uint32_t rows[DEC_PIECE] = {0}, n_out = 0;
	uint64_t h0;
	int ret;

	for (uint32_t t = 0; t < T; t++)
		if (refs[t].logits)
			rows[n_out++] = t;
	ret = moem_dec_forward(d, T, prefill, rows, n_out, st);
	if (ret)
		return ret;
	h0 = moem_now_ns();
	for (uint32_t i = 0; i < n_out; i++) {
		struct tok_ref *r = &refs[rows[i]];
		float *lg = d->logits_host + (size_t)i * d->cfg->vocab;

		if (r->s->p.logits_fn)
			r->s->p.logits_fn(r->s->p.logits_arg, r->s->id, (uint32_t)d->pos[rows[i]],
					  lg, d->cfg->vocab);
		if (r->sample) {
			sample_row(d, r->s, lg, &out[r->item]);
			st->sampled++;
		}
	}
	st->head_ns += moem_now_ns() - h0;
	return 0;
}

int moem_decoder_step(struct moem_decoder *d, const struct moem_work *items, uint32_t n,
		      struct moem_token_out *out, struct moem_decode_stats *stats)
{
	struct dec_seq **seq = NULL;
	uint32_t *ntok = NULL, T = 0;
	struct tok_ref refs[DEC_PIECE];
	struct moem_decode_stats st = {0};
	uint64_t s0 = moem_now_ns();
	bool one_each = true;
	int ret;

	if (!n)
		return moem_errf(EINVAL, "step: no work items");
	if (n > d->o.max_seqs)
		return moem_errf(EINVAL, "step: %u items, at most %u", n, d->o.max_seqs);
	ret = apply_kv(d);
	if (ret)
		return ret;
	seq = calloc(n, sizeof(*seq));
	ntok = calloc(n, sizeof(*ntok));
	if (!seq || !ntok) {
		ret = -ENOMEM;
		goto out;
	}
	ret = check_items(d, items, n, seq, ntok);
	if (ret)
		goto out;
	ret = moem_eng_claim(d->e);
	if (ret)
		goto out;
	__atomic_store_n(&d->e->running, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < n; i++) {
		out[i] = (struct moem_token_out){.seq = items[i].seq, .token = -1};
		out[i].n_generated = seq[i]->n_gen;
	}
	/*
	 * Decode tokens first, in pieces of their own (the memory-bound
	 * batches where LYNX/OEA act), then the prompt chunks in item order;
	 * a piece is at most DEC_PIECE tokens of one kind. Prompt chunks of
	 * one token each (teacher-forced evaluation, moem eval) are shaped
	 * like a decode batch, one token per sequence, and routed as one.
	 */
	for (uint32_t i = 0; i < n; i++)
		if (items[i].kind == MOEM_WORK_PREFILL && ntok[i] != 1)
			one_each = false;
	for (int pass = 0; pass < 2 && !ret; pass++) {
		for (uint32_t i = 0; i < n && !ret; i++) {
			struct dec_seq *s = seq[i];
			bool dec = items[i].kind == MOEM_WORK_DECODE;

			if (dec != (pass == 0))
				continue;
			for (uint32_t k = 0; k < ntok[i] && !ret; k++) {
				uint32_t p = s->n_cached + k;

				d->ids[T] = s->toks[p];
				d->pos[T] = (int32_t)p;
				d->tab[T] = s->tab_off;
				refs[T] =
					(struct tok_ref){s, i, dec || p + 1 == s->n_prompt, false};
				refs[T].logits = refs[T].sample || s->p.logits_fn;
				if (++T == DEC_PIECE) {
					ret = run_piece(d, refs, T, !dec && !one_each, out, &st);
					T = 0;
				}
			}
		}
		if (!ret && T)
			ret = run_piece(d, refs, T, pass == 1 && !one_each, out, &st);
		T = 0;
	}
	__atomic_store_n(&d->e->running, 0, __ATOMIC_RELEASE);
	moem_eng_unclaim_work(d->e);
	for (uint32_t i = 0; i < n; i++) {
		struct dec_seq *s = seq[i];

		if (ret) {
			out[i].finish = MOEM_FINISH_CANCELLED;
			if (s->live)
				free_seq(d, s);
			continue;
		}
		s->n_cached += ntok[i];
		moem_kv_publish(d, s);
		if (items[i].kind == MOEM_WORK_PREFILL)
			st.prefill_tokens += ntok[i];
		else
			st.decode_tokens++;
		if (out[i].finish != MOEM_FINISH_NONE)
			free_seq(d, s);
	}
	st.steps = 1;
	st.step_ns = moem_now_ns() - s0;
	pthread_mutex_lock(&d->lock);
	moem_decode_stats_add(&d->total, &st);
	pthread_mutex_unlock(&d->lock);
	if (stats)
		*stats = st;
out:
	free(seq);
	free(ntok);
	return ret;
}

/* ---- any thread ---- */

int moem_decoder_set_kv_bytes(struct moem_decoder *d, uint64_t bytes)
{
	return moem_engine_set_knob(d->e, MOEM_BUDGET_KV_BYTES, bytes);
}

void moem_decoder_kv_usage(struct moem_decoder *d, struct moem_kv_usage *u)
{
	memset(u, 0, sizeof(*u));
	pthread_mutex_lock(&d->lock);
	u->block_tokens = d->o.block_tokens;
	u->block_bytes = d->block_bytes;
	u->blocks_total = d->limit_blocks;
	u->blocks_reserved = d->reserved;
	u->blocks_free = d->limit_blocks - moem_min(d->reserved, d->limit_blocks);
	u->blocks_cached = moem_min(d->n_cached_free, u->blocks_free);
	u->budget_bytes = d->o.kv_bytes;
	u->pool_bytes = (uint64_t)d->pool_blocks * d->block_bytes;
	u->seqs = d->n_seqs;
	u->max_seqs = d->o.max_seqs;
	u->max_context = d->o.max_context;
	for (uint32_t i = 0; i < d->o.max_seqs; i++)
		if (d->seqs[i].live)
			u->blocks_used += blocks_for(d, d->seqs[i].n_cached);
	/* a block shared by several sequences is counted by each */
	u->blocks_used -= moem_min((uint64_t)d->shared_refs, u->blocks_used);
	pthread_mutex_unlock(&d->lock);
	u->used_bytes = u->blocks_used * u->block_bytes;
}

void moem_decode_stats_add(struct moem_decode_stats *a, const struct moem_decode_stats *b)
{
	a->steps += b->steps;
	a->prefill_tokens += b->prefill_tokens;
	a->decode_tokens += b->decode_tokens;
	a->sampled += b->sampled;
	a->step_ns += b->step_ns;
	a->attn_ns += b->attn_ns;
	a->moe_ns += b->moe_ns;
	a->wait_ns += b->wait_ns;
	a->head_ns += b->head_ns;
	a->device_ns += b->device_ns;
	a->hits += b->hits;
	a->misses += b->misses;
	a->fallbacks += b->fallbacks;
	a->bytes_nvme += b->bytes_nvme;
	a->bytes_h2d += b->bytes_h2d;
	a->device_steps += b->device_steps;
	a->graph_steps += b->graph_steps;
	a->graph_captures += b->graph_captures;
	a->cpu_experts += b->cpu_experts;
	a->cpu_ns += b->cpu_ns;
	a->prompt_tokens += b->prompt_tokens;
	a->prefix_tokens += b->prefix_tokens;
	moem_phases_add(a->phase_ns, b->phase_ns);
}

void moem_decoder_stats(struct moem_decoder *d, struct moem_decode_stats *s)
{
	pthread_mutex_lock(&d->lock);
	*s = d->total;
	pthread_mutex_unlock(&d->lock);
}
