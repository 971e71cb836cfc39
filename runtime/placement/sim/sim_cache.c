// SPDX-License-Identifier: GPL-2.0-only
/*
 * The HBM expert cache the engine keeps, simulated: demand misses at top
 * priority, an eviction policy choosing victims among resident experts
 * that are neither in use by the current layer nor in flight, optional
 * ExpertFlow prefetch at the next priority, and the Belady oracle (the
 * same timeline with MIN's choices, from a pre-pass over the trace).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/route.h>

#include "sim_int.h"

static bool evictable(void *arg, uint32_t key)
{
	const struct sim *s = arg;

	return s->k[key].st == K_RES && s->pin[key] != s->pos + 1;
}

/* The key gives its slot back (evicted or its prefetch cancelled). */
static void drop(struct sim *s, uint32_t key)
{
	struct sim_key *k = &s->k[key];

	if (k->pf && s->counted)
		s->r->pf_wasted++;
	moem_tier_budget_release(&s->hbm, k->bytes);
	k->bytes = 0;
	k->st = K_ABSENT;
	k->pf = 0;
	if (s->ev)
		moem_evict_remove(s->ev, key);
}

/* MIN: the evictable resident key used farthest in the future (lowest key on ties). */
static int oracle_victim(struct sim *s, uint32_t *v)
{
	uint32_t best = SIM_NONE;

	for (uint32_t key = 0; key < s->L * s->N; key++)
		if (evictable(s, key) &&
		    (best == SIM_NONE || s->k[key].next_use > s->k[best].next_use))
			best = key;
	if (best == SIM_NONE)
		return -ENOENT;
	*v = best;
	return 0;
}

/*
 * A prefetch still waiting when its target layer has run is useless: the
 * engine drops it rather than spend link time on it.
 */
static void cancel_stale_prefetches(struct sim *s)
{
	uint32_t id = s->ce.head[PRIO_PREFETCH];

	while (id != SIM_NONE) {
		uint32_t next = s->ce.x[id].next, key = s->ce.x[id].key;

		if (s->ce.x[id].kind == XK_PREFETCH && s->ce.x[id].tpos < s->pos &&
		    moem_sim_ce_cancel(s, id)) {
			s->pf_outstanding--;
			drop(s, key);
		}
		id = next;
	}
}

static bool cancel_one_prefetch(struct sim *s)
{
	for (uint32_t id = s->ce.head[PRIO_PREFETCH]; id != SIM_NONE; id = s->ce.x[id].next) {
		uint32_t key = s->ce.x[id].key;

		if (s->pin[key] == s->pos + 1 || !moem_sim_ce_cancel(s, id))
			continue;
		s->pf_outstanding--;
		drop(s, key);
		return true;
	}
	return false;
}

/*
 * Reserve bytes of HBM for a miss, evicting as the policy says; failing
 * that, cancel a waiting prefetch, and as a last resort wait for a
 * transfer to land (s->now moves on: that wait is stall).
 */
static int make_room(struct sim *s, uint64_t bytes)
{
	for (;;) {
		uint32_t v;
		int ret;

		if (moem_tier_budget_try_reserve(&s->hbm, bytes))
			return 0;
		if (s->p->mode == MOEM_SIM_BELADY)
			ret = oracle_victim(s, &v);
		else
			ret = moem_evict_victim(s->ev, s->pos, 0, evictable, s, &v);
		if (!ret) {
			drop(s, v);
			continue;
		}
		if (cancel_one_prefetch(s))
			continue;
		if (!s->ce.queued)
			return moem_errf(ENOSPC,
					 "sim: the HBM budget (%llu bytes, %llu experts) "
					 "cannot hold what layer %u needs at once",
					 (unsigned long long)s->hbm.limit,
					 (unsigned long long)(s->hbm.limit / s->size),
					 (uint32_t)(s->pos % s->L));
		if (moem_sim_ce_next_done(s) == SIM_INF) {
			uint32_t id = SIM_NONE;

			for (int p = 0; p < PRIO_NR && id == SIM_NONE; p++)
				id = s->ce.head[p];
			moem_sim_ce_run(s, SIM_INF, id);
		}
		if (moem_sim_ce_next_done(s) > s->now)
			s->now = moem_sim_ce_next_done(s);
		moem_sim_advance(s, s->now);
	}
}

int moem_sim_cache_setup(struct sim *s)
{
	int ret;

	if (s->p->mode == MOEM_SIM_CACHE) {
		struct moem_evict_cfg ec = s->p->evict;

		ec.n_layers = s->L;
		ec.n_experts = s->N;
		ret = moem_evict_create(&ec, &s->ev);
		if (ret)
			return ret;
	}
	/* pred eviction ranks by the predictor even when nothing is prefetched */
	if (s->p->prefetch || (s->ev && s->p->evict.kind == MOEM_EVICT_PRED)) {
		struct moem_prefetch_cfg pc = s->p->pf;

		pc.n_layers = s->L;
		pc.n_experts = s->N;
		pc.top_k = s->K;
		pc.bw_bytes_per_ns = s->pcie_bpn;
		pc.layer_ns = s->c->layer_ns;
		pc.expert_bytes = s->size;
		ret = moem_prefetch_create(&pc, &s->pf);
		if (ret)
			return ret;
	}
	return 0;
}

void moem_sim_cache_done(struct sim *s, struct sim_xfer *x)
{
	struct sim_key *k = &s->k[x->key];

	k->st = K_RES;
	k->ready_ns = x->done_ns;
	if (x->kind == XK_PREFETCH)
		s->pf_outstanding--;
	if (s->pf)
		moem_prefetch_transfer(s->pf, x->bytes, x->done_ns - x->start_ns);
}

/* When a pending expert lands (it may already have been delivered during a wait for room). */
static uint64_t pend_done(struct sim *s, uint32_t key)
{
	const struct sim_key *k = &s->k[key];

	if (k->st == K_RES)
		return k->ready_ns;
	moem_sim_ce_run(s, SIM_INF, k->xfer);
	return s->ce.x[k->xfer].done_ns;
}

static int cmp_done(const void *a, const void *b, void *arg)
{
	struct sim *s = arg;
	uint64_t x = pend_done(s, *(const uint32_t *)a), y = pend_done(s, *(const uint32_t *)b);

	if (x != y)
		return x < y ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Victim for a prefetch of probability q: only something worth less (pred), or low (lru2). */
static int prefetch_room(struct sim *s, float q)
{
	for (;;) {
		uint32_t v;

		if (moem_tier_budget_try_reserve(&s->hbm, s->size))
			return 0;
		if (moem_evict_victim_below(s->ev, s->pos, q, evictable, s, &v))
			return -ENOSPC;
		drop(s, v);
	}
}

/*
 * As soon as the routing is known (before the misses): teach the
 * predictor and refresh this layer's pred scores, so the evictions the
 * misses cause already rank this layer's unused experts for its next run.
 */
static void observe(struct sim *s)
{
	const uint32_t m = (uint32_t)(s->pos % s->L);
	float *prob = s->prob;

	if (moem_prefetch_observe(s->pf, s->pos, s->tokens, s->ids))
		return;
	if (s->p->evict.kind == MOEM_EVICT_PRED && !moem_prefetch_reuse(s->pf, m, prob))
		for (uint32_t e = 0; e < s->N; e++)
			moem_evict_score(s->ev, moem_key(m, e, s->N), prob[e]);
}

/* Plan and issue prefetches (after the misses, below them in priority). */
static void prefetch(struct sim *s)
{
	uint32_t S, n, planned = 0, fetched = 0;
	float refused = -1; /* no room was found for a prefetch this likely */

	S = moem_prefetch_horizon(s->pf);
	if (s->counted) {
		s->s_sum += S;
		s->s_n++;
	}
	moem_evict_set_horizon(s->ev, S);
	n = moem_prefetch_plan(s->pf, s->pos, s->req, 4096);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t key = moem_key(s->req[i].layer, s->req[i].expert, s->N), id;
		struct sim_key *k = &s->k[key];

		planned++;
		moem_evict_predict(s->ev, key, s->req[i].pos);
		if (k->st != K_ABSENT || s->pf_outstanding >= s->p->pf_queue)
			continue;
		/*
		 * Nothing changes the candidates within one plan: if no victim was
		 * found for a prefetch at least this likely, none will be now.
		 */
		if (s->req[i].prob <= refused)
			continue;
		if (prefetch_room(s, s->req[i].prob)) {
			refused = s->p->evict.kind == MOEM_EVICT_PRED ? s->req[i].prob : INFINITY;
			continue;
		}
		id = moem_sim_ce_add(s, key, XK_PREFETCH, PRIO_PREFETCH, s->size,
				     moem_sim_link_bpn(s, key, s->size));
		if (id == SIM_NONE) {
			moem_tier_budget_release(&s->hbm, s->size);
			continue;
		}
		s->ce.x[id].tpos = s->req[i].pos;
		k->st = K_FLIGHT;
		k->xfer = id;
		k->bytes = s->size;
		k->pf = 1;
		moem_evict_score(s->ev, key, s->req[i].prob);
		moem_evict_insert(s->ev, key, s->pos);
		moem_evict_predict(s->ev, key, s->req[i].pos);
		s->pf_outstanding++;
		fetched++;
		if (s->counted)
			s->r->pf_issued++;
	}
	moem_prefetch_issued(s->pf, planned, fetched);
}

int moem_sim_cache_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end)
{
	const bool oracle = s->p->mode == MOEM_SIM_BELADY;
	uint64_t sum = 0, cur, latest = t_r, layer_comp;
	int ret;

	s->npend = 0;
	memset(s->res, 0, s->N); /* experts that hit, for the execution order */
	if (s->pf_outstanding)
		cancel_stale_prefetches(s);
	if (s->pf)
		observe(s);
	for (uint32_t i = 0; i < T; i++) {
		uint32_t key = s->keys[i];
		struct sim_key *k = &s->k[key];

		sum += moem_sim_expert_ns(s, s->size, s->tok[key % s->N]);
		if (oracle)
			k->next_use = s->next_use[s->nu_i++];
		if (k->st == K_RES) {
			s->res[key % s->N] = 1;
			if (s->counted)
				s->r->hits++;
			if (k->pf) {
				if (s->counted)
					s->r->pf_used++;
				/* landed more than a layer's compute before its use */
				if (s->pf && k->ready_ns + s->c->layer_ns < t_r)
					moem_prefetch_early(s->pf);
				k->pf = 0;
			}
		} else if (k->st == K_FLIGHT) {
			if (s->counted)
				s->r->late++;
			moem_sim_ce_boost(s, k->xfer);
			if (k->pf) {
				if (s->counted)
					s->r->pf_used++;
				moem_prefetch_stall(s->pf);
				k->pf = 0;
			}
			s->pend[s->npend++] = key;
		} else {
			uint32_t id;

			ret = make_room(s, s->size);
			if (ret)
				return ret;
			id = moem_sim_ce_add(s, key, XK_DEMAND, PRIO_MISS, s->size,
					     moem_sim_link_bpn(s, key, s->size));
			if (id == SIM_NONE)
				return -ENOMEM;
			k->st = K_FLIGHT;
			k->xfer = id;
			k->bytes = s->size;
			if (s->ev)
				moem_evict_insert(s->ev, key, s->pos);
			s->pend[s->npend++] = key;
		}
		if (s->ev)
			moem_evict_access(s->ev, key, s->pos);
	}
	/* When does each pending expert land? (misses outrank everything else) */
	for (uint32_t i = 0; i < s->npend; i++)
		pend_done(s, s->pend[i]);
	qsort_r(s->pend, s->npend, sizeof(*s->pend), cmp_done, s);
	for (uint32_t i = 0; i < s->npend; i++) {
		uint64_t d = pend_done(s, s->pend[i]);

		latest = d > latest ? d : latest;
	}
	if (s->p->ordered) {
		/* resident experts first; each miss as it lands */
		cur = t_r;
		for (uint32_t i = 0; i < T; i++)
			if (s->res[s->keys[i] % s->N])
				cur += moem_sim_expert_ns(s, s->size, s->tok[s->keys[i] % s->N]);
		for (uint32_t i = 0; i < s->npend; i++) {
			uint64_t d = pend_done(s, s->pend[i]);

			cur = (d > cur ? d : cur) +
			      moem_sim_expert_ns(s, s->size, s->tok[s->pend[i] % s->N]);
		}
	} else {
		cur = latest + sum;
	}
	/* a wait for room (make_room) is stall too: it started the misses late */
	if (cur < s->now + sum)
		cur = s->now + sum;
	layer_comp = s->c->layer_ns + sum;
	if (s->counted) {
		s->r->stall_ns += cur - t_r - sum;
		s->r->compute_ns += layer_comp;
	}
	if (s->pf) {
		moem_prefetch_layer_time(s->pf, layer_comp);
		if (s->p->prefetch)
			prefetch(s);
	}
	*end = cur;
	return 0;
}

int moem_sim_oracle_prepass(struct sim *s, const char *trace)
{
	struct moem_route_out out = {s->ids, s->w, s->cnt};
	struct moem_access_log log;
	struct moem_trace_reader *tr;
	struct moem_trace_rec rec;
	uint64_t *seen = NULL;
	int ret;

	moem_access_log_init(&log, s->L * s->N);
	ret = moem_trace_open(trace, &tr);
	if (ret)
		return ret;
	while ((ret = moem_trace_next(tr, &rec)) > 0) {
		uint32_t T = 0;

		if (s->o->max_steps && rec.step >= s->o->max_steps)
			break;
		if (moem_route_policy_needs_logits(&s->rp)) {
			ret = moem_route_policy_apply(&s->rp, &s->rc, rec.tokens, rec.logits, NULL,
						      NULL, true, &out);
			if (ret)
				goto out;
		} else {
			memcpy(s->ids, rec.ids, (size_t)rec.tokens * s->K * sizeof(*s->ids));
			memcpy(s->cnt, rec.cnt, rec.tokens * sizeof(*s->cnt));
		}
		memset(s->act, 0, s->N);
		for (uint32_t t = 0; t < rec.tokens; t++)
			for (uint32_t j = 0; j < s->cnt[t]; j++)
				s->act[s->ids[(size_t)t * s->K + j]] = 1;
		for (uint32_t e = 0; e < s->N; e++)
			if (s->act[e])
				s->keys[T++] = moem_key(rec.layer, e, s->N);
		ret = moem_access_log_add(&log, s->keys, T);
		if (ret)
			goto out;
	}
	if (ret < 0)
		goto out;
	s->next_use = malloc((log.n_keys ? log.n_keys : 1) * sizeof(*s->next_use));
	seen = malloc((size_t)s->L * s->N * sizeof(*seen));
	if (!s->next_use || !seen) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < s->L * s->N; k++)
		seen[k] = SIM_INF;
	for (uint64_t p = log.n_pos; p-- > 0;)
		for (uint64_t i = log.off[p]; i < log.off[p + 1]; i++) {
			s->next_use[i] = seen[log.keys[i]];
			seen[log.keys[i]] = p;
		}
	ret = 0;
out:
	free(seen);
	moem_access_log_free(&log);
	moem_trace_close(tr);
	return ret;
}
