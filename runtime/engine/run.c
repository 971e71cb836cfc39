// SPDX-License-Identifier: GPL-2.0-only
/*
 * The decode loop (engine.h): a workload's entry hidden states through
 * every layer, step after step; statistics per step; a SHA-256 over every
 * step's final hidden states, so two runs can be compared by anyone.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/progress.h>
#include <moem/util.h>

#include "engine_int.h"
#include "hidden.h"

struct source {
	struct moem_synth *g;
	float *basis;
	struct moem_hidden hid;
	struct moem_trace_reader *tr;
	struct moem_trace_rec pending;
	int have_pending;
};

static void source_close(struct source *s)
{
	moem_synth_destroy(s->g);
	free(s->basis);
	if (s->hid.fd > 0)
		moem_hidden_close(&s->hid);
	moem_trace_close(s->tr);
}

/* The synthetic generator, when the pack carries one. */
static int open_synth(struct moem_engine *e, const struct moem_workload *w, struct source *s,
		      bool required)
{
	const uint32_t H = e->cfg->hidden;
	struct moem_synth_params sp;
	double mix[MOEM_SYNTH_MAX_WORKLOADS];
	int ret = moem_pack_synth(e->pack, &sp);

	if (ret == -ENOENT && !required)
		return 0;
	if (ret)
		return moem_errf(-ret,
				 "the pack is not a synthetic model: give a hidden-state file");
	if (w->seed)
		sp.seed = w->seed;
	ret = moem_synth_parse_mix(&sp, w->mix, mix);
	if (!ret)
		ret = moem_synth_create(&sp, mix, w->batch, &s->g);
	if (ret)
		return moem_err_prefix(-ret, "workload");
	s->basis = malloc(sizeof(float) * sp.n_layers * sp.n_experts * H);
	if (!s->basis)
		return -ENOMEM;
	return moem_pack_synth_basis(e->pack, s->basis);
}

static int open_source(struct moem_engine *e, const struct moem_workload *w, struct source *s)
{
	const struct moem_trace_info *ti;
	int ret;

	switch (w->kind) {
	case MOEM_WL_SYNTH:
		return open_synth(e, w, s, true);
	case MOEM_WL_HIDDEN:
		ret = moem_hidden_open(w->path, e->cfg->hidden, &s->hid);
		if (ret)
			return ret;
		if (s->hid.batch != w->batch)
			return moem_errf(EINVAL,
					 "%s holds batches of %u tokens, the run asks for %u",
					 w->path, s->hid.batch, w->batch);
		if (s->hid.steps < w->steps)
			return moem_errf(EINVAL, "%s holds %llu steps, the run asks for %llu",
					 w->path, (unsigned long long)s->hid.steps,
					 (unsigned long long)w->steps);
		return 0;
	case MOEM_WL_TRACE:
		ret = moem_trace_open(w->path, &s->tr);
		if (ret)
			return ret;
		ti = moem_trace_reader_info(s->tr);
		if (ti->n_layers != e->n_moe || ti->n_experts != e->cfg->n_experts ||
		    ti->top_k != e->cfg->top_k)
			return moem_errf(EINVAL,
					 "%s: trace shape %u layers x %u experts, top-%u; the "
					 "model is %u x %u, top-%u",
					 w->path, ti->n_layers, ti->n_experts, ti->top_k, e->n_moe,
					 e->cfg->n_experts, e->cfg->top_k);
		/* as for hidden states: a trace too short is refused before step 0,
		 * not where it ends (one pass over the records, then back) */
		{
			struct moem_trace_rec rec;
			uint64_t n = 0;

			while ((ret = moem_trace_next(s->tr, &rec)) > 0)
				n++;
			if (!ret)
				ret = moem_trace_rewind(s->tr);
			if (ret < 0)
				return ret;
			if (n / ti->n_layers < w->steps)
				return moem_errf(EINVAL,
						 "%s holds %llu steps, the run asks for %llu",
						 w->path, (unsigned long long)(n / ti->n_layers),
						 (unsigned long long)w->steps);
		}
		e->replay_pg_depth = ti->pregate_depth;
		/* Hidden states only feed the FFN here: synthetic if we can. */
		return open_synth(e, w, s, false);
	default:
		return moem_errf(EINVAL, "unknown workload kind %d", (int)w->kind);
	}
}

static int next_states(struct moem_engine *e, struct source *s, uint64_t step, uint32_t B)
{
	const uint32_t H = e->cfg->hidden;

	if (s->hid.fd > 0)
		return moem_hidden_read(&s->hid, step, e->h_host);
	if (s->g) {
		moem_synth_step(s->g);
		for (uint32_t b = 0; b < B; b++)
			moem_synth_hidden(s->g, b, s->basis, H, e->h_host + (size_t)b * H);
		return 0;
	}
	memset(e->h_host, 0, sizeof(float) * B * H);
	return 0;
}

/* The replayed record for (step, MoE layer m). */
static int replay_rec(struct source *s, uint64_t step, uint32_t m, struct moem_trace_rec **out)
{
	int ret;

	if (!s->have_pending) {
		ret = moem_trace_next(s->tr, &s->pending);
		if (ret < 0)
			return ret;
		if (ret == 0)
			return moem_errf(ENODATA, "the trace ends before step %llu",
					 (unsigned long long)step);
		s->have_pending = 1;
	}
	if (s->pending.step != step || s->pending.layer != m)
		return moem_errf(EINVAL, "the trace has no record for step %llu layer %u",
				 (unsigned long long)step, m);
	s->have_pending = 0;
	*out = &s->pending;
	return 0;
}

int moem_eng_claim(struct moem_engine *e)
{
	for (;;) {
		int was = 0;

		if (__atomic_compare_exchange_n(&e->busy, &was, ENG_BUSY_WORK, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return 0;
		if (was == ENG_BUSY_WORK)
			return moem_errf(EBUSY, "the engine is busy (a run, warm-up or "
						"verification is in progress)");
		sched_yield(); /* moem_engine_apply_knobs() holds it for a moment */
	}
}

bool moem_eng_claim_brief(struct moem_engine *e)
{
	int was = 0;

	return __atomic_compare_exchange_n(&e->busy, &was, ENG_BUSY_BRIEF, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

void moem_eng_unclaim(struct moem_engine *e)
{
	__atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
}

void moem_eng_unclaim_work(struct moem_engine *e)
{
	uint32_t dirty;

	moem_eng_unclaim(e);
	/* A knob set while we held the engine, after our last layer
	 * boundary, was left to us: apply it now. */
	pthread_mutex_lock(&e->knob_lock);
	dirty = e->knob_dirty | e->hyb_dirty; /* or a live exec change */
	pthread_mutex_unlock(&e->knob_lock);
	if (dirty)
		moem_engine_apply_knobs(e);
}

static int open_trace_out(struct moem_engine *e, const struct moem_workload *w, const char *path,
			  unsigned int flags)
{
	struct moem_trace_info ti;
	struct moem_pack_id id;
	char idbuf[33];

	memset(&ti, 0, sizeof(ti));
	ti.flags = e->o.trace_logits ? MOEM_TRACE_F_LOGITS : 0;
	ti.source = MOEM_TRACE_SRC_ENGINE;
	ti.n_layers = e->n_moe;
	ti.n_experts = e->cfg->n_experts;
	ti.top_k = e->cfg->top_k;
	ti.max_tokens = w->batch;
	ti.seed = w->seed;
	ti.hidden = e->cfg->hidden;
	ti.moe_inter = e->cfg->moe_inter;
	ti.pregate_depth = e->pg_depth;
	ti.n_group = e->cfg->n_group;
	ti.topk_group = e->cfg->topk_group;
	moem_pack_get_id(e->pack, &id);
	snprintf(ti.desc, sizeof(ti.desc), "moem run, pack %.16s, %s", moem_pack_id_str(&id, idbuf),
		 moem_route_kind_name(e->rp.kind));
	if (e->trace_synthetic)
		ti.flags |= MOEM_TRACE_F_SYNTHETIC;
	return moem_trace_writer_open_ex(path, flags, &ti, &e->trace);
}

void moem_eng_count_step(struct moem_engine *e, const struct moem_step_stats *st)
{
	pthread_mutex_lock(&e->knob_lock);
	e->total.step++;
	e->total.active += st->active;
	e->total.hits += st->hits;
	e->total.misses += st->misses;
	e->total.fallbacks += st->fallbacks;
	e->total.stall_ns += st->stall_ns;
	e->total.bytes_nvme += st->bytes_nvme;
	e->total.bytes_d2h += st->bytes_d2h;
	e->total.bytes_h2d += st->bytes_h2d;
	e->total.step_ns += st->step_ns;
	e->total.cpu_experts += st->cpu_experts;
	e->total.cpu_ns += st->cpu_ns;
	moem_phases_add(e->total.phase_ns, st->phase_ns);
	e->last_cpu_experts = st->cpu_experts;
	e->last_cpu_ns = st->cpu_ns;
	pthread_mutex_unlock(&e->knob_lock);
}

int moem_engine_run(struct moem_engine *e, const struct moem_workload *w, moem_step_fn fn,
		    void *arg, struct moem_run_stats *out)
{
	const uint32_t H = e->cfg->hidden, B = w->batch;
	struct moem_tiers_stats t0, t1;
	struct source src;
	struct moem_run_stats rs;
	EVP_MD_CTX *md = NULL;
	unsigned int mdlen = 0;
	char *trace_path = NULL;
	unsigned int trace_flags = 0;
	uint64_t step;
	int ret;

	if (!B || B > ENG_MAX_B)
		return moem_errf(EINVAL, "batch %u: moem decodes 1..%d tokens per step", B,
				 ENG_MAX_B);
	if (!w->steps)
		return moem_errf(EINVAL, "no steps to run");
	if (moem_eng_claim(e))
		return -EBUSY;
	__atomic_store_n(&e->running, 1, __ATOMIC_RELEASE);
	memset(&src, 0, sizeof(src));
	memset(&rs, 0, sizeof(rs));
	src.hid.fd = -1;
	__atomic_store_n(&e->stop, 0, __ATOMIC_RELEASE);
	ret = open_source(e, w, &src);
	if (ret)
		goto out;
	e->trace_synthetic = moem_pack_synth(e->pack, &(struct moem_synth_params){0}) == 0;
	pthread_mutex_lock(&e->knob_lock);
	if (e->trace_path)
		trace_path = strdup(e->trace_path);
	e->o.trace_logits = e->trace_logits;
	trace_flags = e->trace_flags;
	pthread_mutex_unlock(&e->knob_lock);
	if (trace_path) {
		ret = open_trace_out(e, w, trace_path, trace_flags);
		if (ret)
			goto out;
	}
	md = EVP_MD_CTX_new();
	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		ret = moem_errf(ENOMEM, "SHA-256 context");
		goto out;
	}
	rs.moe_layers = e->n_moe;
	e->batch = B;
	moem_eng_paging_batch(e, B, e->applied_hbm);
	for (step = 0; step < w->steps; step++) {
		struct moem_step_stats st = {.step = step, .tokens = B};
		uint64_t s0 = moem_now_ns();

		if (__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
			rs.stopped = true;
			break;
		}
		moem_tiers_get_stats(e->tiers, &t0);
		ret = next_states(e, &src, step, B);
		if (!ret)
			ret = moem_be_htod(e->be, e->h, e->h_host, sizeof(float) * B * H, NULL);
		for (uint32_t l = 0; l < e->cfg->n_layers && !ret; l++) {
			struct moem_trace_rec *rec = NULL;

			moem_eng_apply_knobs(e);
			if (src.tr && e->moe_idx[l] >= 0)
				ret = replay_rec(&src, step, (uint32_t)e->moe_idx[l], &rec);
			if (!ret)
				ret = moem_eng_layer(e, l, B, step, rec, &st);
		}
		if (!ret)
			ret = moem_be_dtoh(e->be, e->h_host, e->h, sizeof(float) * B * H, NULL);
		if (!ret)
			ret = moem_be_stream_sync(e->be, NULL);
		if (ret) {
			if (moem_backend_fatal(e->be))
				moem_err("fatal device error: %s", moem_backend_fatal_msg(e->be));
			goto out;
		}
		EVP_DigestUpdate(md, e->h_host, sizeof(float) * B * H);
		moem_tiers_get_stats(e->tiers, &t1);
		st.hits = t1.hits - t0.hits;
		st.misses = t1.misses - t0.misses;
		st.fallbacks = t1.fallbacks - t0.fallbacks;
		st.bytes_nvme = t1.bytes_nvme - t0.bytes_nvme;
		st.bytes_d2h = t1.bytes_d2h - t0.bytes_d2h;
		for (int p = 0; p < MOEM_PRIO_NR; p++)
			st.bytes_h2d += t1.bytes_h2d[p] - t0.bytes_h2d[p];
		st.step_ns = moem_now_ns() - s0;
		moem_eng_after_step(e, st.step_ns - moem_min(st.stall_ns, st.step_ns),
				    st.bytes_h2d);
		moem_eng_count_step(e, &st);
		rs.total.step++;
		rs.total.tokens += B;
		rs.total.active += st.active;
		rs.total.hits += st.hits;
		rs.total.misses += st.misses;
		rs.total.fallbacks += st.fallbacks;
		rs.total.stall_ns += st.stall_ns;
		rs.total.bytes_nvme += st.bytes_nvme;
		rs.total.bytes_d2h += st.bytes_d2h;
		rs.total.bytes_h2d += st.bytes_h2d;
		rs.total.step_ns += st.step_ns;
		rs.total.cpu_experts += st.cpu_experts;
		rs.total.cpu_ns += st.cpu_ns;
		moem_phases_add(rs.total.phase_ns, st.phase_ns);
		if (fn) {
			ret = fn(arg, &st);
			if (ret)
				break;
		}
	}
	EVP_DigestFinal_ex(md, rs.digest, &mdlen);
	for (unsigned int i = 0; i < 32; i++)
		snprintf(rs.digest_hex + 2 * i, 3, "%02x", rs.digest[i]);
	if (rs.total.step && e->n_moe)
		rs.mean_T = (double)rs.total.active / ((double)rs.total.step * e->n_moe);
	{
		uint64_t acc = rs.total.hits + rs.total.misses + rs.total.fallbacks;

		rs.hit_rate = acc ? (double)rs.total.hits / (double)acc : 1.0;
	}
	rs.stall_share =
		rs.total.step_ns ? (double)rs.total.stall_ns / (double)rs.total.step_ns : 0;
	rs.tokens_per_s = rs.total.step_ns ? (double)rs.total.tokens * 1e9 / rs.total.step_ns : 0;
	if (e->trace) {
		int r = moem_trace_writer_close(e->trace);

		e->trace = NULL;
		if (r && !ret)
			ret = r;
	}
	if (out)
		*out = rs;
out:
	if (e->trace) {
		moem_trace_writer_abort(e->trace);
		e->trace = NULL;
	}
	EVP_MD_CTX_free(md);
	source_close(&src);
	free(trace_path);
	__atomic_store_n(&e->running, 0, __ATOMIC_RELEASE);
	moem_eng_unclaim_work(e);
	return ret;
}

static bool warmup_stopped(struct moem_engine *e)
{
	return __atomic_load_n(&e->stop, __ATOMIC_ACQUIRE);
}

static int warmup(struct moem_engine *e, struct moem_progress *progress);

int moem_engine_warmup(struct moem_engine *e, struct moem_progress *progress)
{
	int ret = moem_eng_claim(e);

	if (ret)
		return ret;
	moem_eng_apply_knobs(e);
	ret = warmup(e, progress);
	moem_eng_unclaim_work(e);
	return ret;
}

static int warmup(struct moem_engine *e, struct moem_progress *progress)
{
	uint64_t hu, hb, du, db, nv, total = 0, load_errors0;
	struct moem_tiers_stats st0;
	int ret = 0;

	moem_tiers_get_stats(e->tiers, &st0);
	load_errors0 = st0.load_errors;
	/* DRAM first, every version the pack serves, layer by layer, until
	 * the DRAM budget is full (the rest stays on NVMe). */
	for (uint32_t pi = 0; pi < e->n_prec; pi++)
		total += (uint64_t)e->n_moe * e->cfg->n_experts * e->blob_bytes[pi];
	moem_tiers_usage(e->tiers, &hu, &hb, &du, &db, &nv);
	if (progress)
		moem_progress_start(progress, "staging", moem_min(total, db) - moem_min(du, db),
				    true);
	for (uint32_t m = 0; m < e->n_moe && !ret; m++)
		for (uint32_t x = 0; x < e->cfg->n_experts && !ret; x++)
			for (uint32_t pi = 0; pi < e->n_prec && !ret; pi++) {
				uint64_t nv0 = nv;

				moem_tiers_usage(e->tiers, &hu, &hb, &du, &db, &nv);
				if (du + e->blob_bytes[pi] > db)
					goto dram_full;
				if (warmup_stopped(e)) {
					ret = moem_errf(ECANCELED, "warm-up stopped");
					goto dram_full;
				}
				ret = moem_tiers_stage(e->tiers, m, x, pi);
				if (ret == -EAGAIN) {
					/* Full after all (staging never evicts):
					 * adopted versions of a warm restart can leave
					 * no room where one fits. */
					ret = 0;
					goto dram_full;
				}
				if (progress && nv > nv0)
					moem_progress_add(progress, nv - nv0);
			}
dram_full:
	moem_tiers_drain(e->tiers);
	if (progress)
		moem_progress_finish(progress);
	if (ret)
		return ret;
	/* A version the pack could not give (a read error, a checksum that
	 * does not match) is the pack's fault: say so now, not at the first
	 * run that needs it. */
	{
		struct moem_tiers_stats st;

		moem_tiers_get_stats(e->tiers, &st);
		if (st.load_errors > load_errors0)
			return moem_errf(
				-st.last_load_err,
				"staging: %llu expert version(s) could not be read from "
				"the pack, the last expert (%u, %u) %s: %s%s",
				(unsigned long long)(st.load_errors - load_errors0),
				st.last_load_layer, st.last_load_expert,
				st.last_load_pi ? "lo" : "hi", strerror(-st.last_load_err),
				st.last_load_err == -EBADMSG
					? " (its checksum does not match: the pack is damaged)"
					: "");
	}
	/* Then HBM, planned versions, up to its budget, from what DRAM holds
	 * (a load here would evict staged versions from DRAM); not the
	 * experts placed on the CPU, which never enter it. */
	for (uint32_t m = 0; m < e->n_moe && !ret; m++)
		for (uint32_t x = 0; x < e->cfg->n_experts && !ret; x++) {
			if (!moem_eng_hbm_allowed(e, m, x))
				continue;
			moem_tiers_usage(e->tiers, &hu, &hb, &du, &db, &nv);
			if (hu + e->blob_bytes[0] > hb)
				goto hbm_full;
			if (!moem_tiers_staged(e->tiers, m, x, moem_tiers_plan(e->tiers, m, x)))
				continue;
			if (warmup_stopped(e)) {
				moem_tiers_drain(e->tiers);
				return moem_errf(ECANCELED, "warm-up stopped");
			}
			ret = moem_tiers_prefetch(e->tiers, m, x, MOEM_PRIO_PREFETCH);
			ret = ret < 0 && ret != -EAGAIN ? ret : 0;
		}
hbm_full:
	moem_tiers_drain(e->tiers);
	return ret;
}
