// SPDX-License-Identifier: GPL-2.0-only
/*
 * The HBM expert cache the engine keeps, simulated: the mechanism under
 * the driver's decisions (driver.h). Slots are reserved from the HBM
 * budget; a miss makes room with the driver's victims (or, for the
 * Belady oracle, MIN's), then by withdrawing a waiting prefetch, and as
 * a last resort waits for a transfer to land; prefetches take only what
 * the driver gives up for them. The oracle replays the same timeline with
 * MIN's choices, from a pre-pass over the trace.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/cost.h>
#include <moem/error.h>
#include <moem/route.h>

#include "sim_int.h"

static bool resident(void *arg, uint32_t vid)
{
	const struct sim *s = arg;

	return s->k[vid / 2].st == K_RES;
}

/* The key gives its slot back (evicted, or its prefetch withdrawn). */
static void drop(struct sim *s, uint32_t key)
{
	struct sim_key *k = &s->k[key];

	moem_tier_budget_release(&s->hbm, k->bytes);
	k->bytes = 0;
	k->st = K_ABSENT;
	moem_driver_removed(s->d, key * 2);
}

/* A DRAM victim for a copy back: staged, and not being copied to HBM. */
static bool dram_ok(void *arg, uint32_t vid)
{
	const struct sim *s = arg;

	return s->in_dram[vid / 2] && s->k[vid / 2].st != K_FLIGHT;
}

/*
 * key leaves HBM: copy it back to DRAM if DRAM lacks it and the driver
 * (the cost model) says so. The copy runs on the one copy engine at the
 * priority of the fetch that takes the slot, ahead of it (the slot is
 * overwritten only once it is out): the cost model charges it on the
 * critical path, and so does the simulator. Its DRAM copy counts from
 * now, as a load into DRAM does.
 */
static void copy_back(struct sim *s, uint32_t key, int prio)
{
	const struct moem_cost *c = &s->c->cost;
	bool room = s->dram.limit - s->dram.used >= s->size && s->dram.used <= s->dram.limit;
	uint32_t v;

	if (!s->copy_back || s->in_dram[key])
		return;
	if (!moem_driver_copy_back(s->d, key * 2, s->size, room, dram_ok, s, &v))
		return;
	if (!room) {
		moem_driver_dram_removed(s->d, v);
		s->in_dram[v / 2] = 0;
		moem_tier_budget_release(&s->dram, s->size);
	}
	if (!moem_tier_budget_try_reserve(&s->dram, s->size))
		return;
	if (moem_sim_ce_add(s, key, XK_WRITEBACK, prio, s->size,
			    c->d2h_gbps > 0 ? c->d2h_gbps : c->link_gbps) == SIM_NONE) {
		moem_tier_budget_release(&s->dram, s->size);
		return;
	}
	s->in_dram[key] = 1;
	moem_driver_dram_inserted(s->d, key * 2);
}

/*
 * The oracle's rank of a resident key: the larger, the sooner evicted.
 * MIN: its next use. A restricted oracle (sim.h) knows next uses only
 * look ticks ahead, or only to the step; what it does not know, it ranks
 * by its fallback below every key it knows a nearer use of.
 */
static void oracle_rank(struct sim *s, uint32_t key, uint64_t now, uint64_t *known, double *fb)
{
	const struct moem_sim_policy *p = s->p;
	const struct sim_key *k = &s->k[key];
	uint64_t nu = k->next_use;

	if (p->oracle_look && nu != SIM_INF && nu - now > p->oracle_look)
		nu = SIM_INF;
	if (p->oracle_step && nu != SIM_INF)
		nu /= s->L;
	*known = nu;
	switch (p->oracle_fb) {
	case MOEM_SIM_FB_LFU:
		*fb = -(double)k->uses * 1e12 - (double)k->last_use;
		break;
	case MOEM_SIM_FB_PRED:
		*fb = moem_driver_expected_use(s->d, key);
		break;
	default:
		*fb = -(double)k->last_use;
		break;
	}
}

/* MIN (or a restricted oracle): the resident key used farthest in the future, not used by this
 * layer (lowest on ties). */
static int oracle_victim(struct sim *s, uint32_t *v)
{
	const uint32_t m = (uint32_t)(s->pos % s->L);
	const bool plain = !s->p->oracle_look && !s->p->oracle_step;
	const uint64_t now = s->log.n_pos - 1;
	uint32_t best = SIM_NONE;
	uint64_t bk = 0, kn;
	double bf = 0, f;

	for (uint32_t key = 0; key < s->L * s->N; key++) {
		if (s->k[key].st != K_RES || (key / s->N == m && s->act[key % s->N]))
			continue;
		if (plain) {
			if (best == SIM_NONE || s->k[key].next_use > s->k[best].next_use)
				best = key;
			continue;
		}
		oracle_rank(s, key, now, &kn, &f);
		if (best == SIM_NONE || kn > bk || (kn == bk && f > bf)) {
			best = key;
			bk = kn;
			bf = f;
		}
	}
	if (best == SIM_NONE)
		return -ENOENT;
	*v = best;
	return 0;
}

/* Let the policy evict this layer's experts (resident ones only, or all); true if any. */
static bool unpin_layer(struct sim *s, bool resident_only)
{
	bool any = false;

	s->unpin_stage = resident_only ? 1 : 2;
	for (uint32_t i = 0; i < s->layer_T; i++) {
		uint32_t key = s->keys[i];

		if (resident_only && s->k[key].st != K_RES)
			continue;
		moem_driver_unpin(s->d, key);
		any = true;
	}
	return any;
}

/*
 * Reserve bytes of HBM for a miss of key, evicting as the driver (or the
 * oracle) says; failing that, withdraw a waiting prefetch, and as a last
 * resort wait for a transfer to land (s->now moves on: that wait is stall).
 */
static int make_room(struct sim *s, uint32_t key, uint64_t bytes)
{
	for (;;) {
		uint32_t v;
		int ret;

		if (moem_tier_budget_try_reserve(&s->hbm, bytes))
			return 0;
		if (s->p->mode == MOEM_SIM_BELADY) {
			ret = oracle_victim(s, &v);
		} else {
			ret = moem_driver_pick(s->d, key * 2, MOEM_PRIO_MISS, resident, s, &v);
			v /= 2;
		}
		if (!ret) {
			copy_back(s, v, PRIO_MISS);
			drop(s, v);
			continue;
		}
		if (moem_driver_reclaim(s->d))
			continue;
		/*
		 * A budget of fewer experts than the layer needs: as the engine
		 * does, what of this layer is resident runs and lets its slot go,
		 * then misses land and run, then the rest may be evicted too.
		 */
		if (s->unpin_stage == 0 && unpin_layer(s, true))
			continue;
		if (!s->ce.queued && s->unpin_stage < 2 && unpin_layer(s, false))
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

/* Room for a speculative fetch: only what the driver gives up for it. */
static int prefetch_room(struct sim *s, uint32_t key)
{
	for (;;) {
		uint32_t v;

		if (moem_tier_budget_try_reserve(&s->hbm, s->size))
			return 0;
		if (moem_driver_pick(s->d, key * 2, MOEM_PRIO_PREFETCH, resident, s, &v))
			return -EAGAIN;
		copy_back(s, v / 2, PRIO_PREFETCH);
		drop(s, v / 2);
	}
}

/* ---- the driver's ops ------------------------------------------------------ */

enum moem_res moem_sim_cache_state(void *arg, uint32_t key)
{
	const struct sim *s = arg;

	return s->k[key].st == K_RES	  ? MOEM_RES_RESIDENT
	       : s->k[key].st == K_FLIGHT ? MOEM_RES_FLIGHT
					  : MOEM_RES_ABSENT;
}

int moem_sim_cache_fetch(void *arg, uint32_t key, enum moem_prio prio, uint64_t tpos)
{
	struct sim *s = arg;
	struct sim_key *k = &s->k[key];
	bool miss = prio == MOEM_PRIO_MISS;
	uint32_t id;
	int ret;

	if (k->st != K_ABSENT)
		return 0;
	/* placed on the CPU: never takes HBM (as the engine's op_fetch) */
	if (s->place && s->place[key] == MOEM_PLACE_CPU)
		return 0;
	ret = miss ? make_room(s, key, s->size) : prefetch_room(s, key);
	if (ret)
		return ret;
	id = moem_sim_ce_add(s, key, miss ? XK_DEMAND : XK_PREFETCH,
			     miss ? PRIO_MISS : PRIO_PREFETCH, s->size,
			     moem_sim_link_bpn(s, key, s->size));
	if (id == SIM_NONE) {
		moem_tier_budget_release(&s->hbm, s->size);
		return -ENOMEM;
	}
	s->ce.x[id].tpos = tpos;
	k->st = K_FLIGHT;
	k->xfer = id;
	k->bytes = s->size;
	moem_driver_inserted(s->d, key * 2);
	return 1;
}

bool moem_sim_cache_cancel(void *arg, uint32_t key)
{
	struct sim *s = arg;

	if (s->k[key].st != K_FLIGHT || !moem_sim_ce_cancel(s, s->k[key].xfer))
		return false;
	drop(s, key);
	return true;
}

/* ---- the layer --------------------------------------------------------------- */

void moem_sim_cache_done(struct sim *s, struct sim_xfer *x)
{
	struct sim_key *k = &s->k[x->key];

	k->st = K_RES;
	k->ready_ns = x->done_ns;
	moem_driver_transfer(s->d, x->bytes, x->done_ns - x->start_ns);
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

static uint64_t expert_ns(const struct sim *s, uint32_t key)
{
	return moem_cost_gpu_ns(&s->c->cost, s->size, s->tok[key % s->N]);
}

/*
 * Hybrid execution: does expert key, in state was, run on the CPU this
 * step (the engine's moem_eng_exec_of, behind the layer's queue q)? If so
 * its time is in q->cpu_ns (it is read from NVMe into the DRAM cache first
 * if it is not there), and one the cost model chose is listed for
 * moem_driver_exec_keep() after the layer's split.
 */
static bool on_cpu(struct sim *s, struct moem_exec_queue *q, uint32_t key, enum moem_res was)
{
	bool in_dram = !s->dram_cache || s->in_dram[key];
	enum moem_place w = s->place ? (enum moem_place)s->place[key] : MOEM_PLACE_AUTO;
	bool force = w == MOEM_PLACE_CPU;

	/* the engine's moem_eng_exec_of() */
	if (w == MOEM_PLACE_GPU || (!force && !s->c->exec_hybrid))
		return false;
	if (moem_driver_exec_next(s->d, &s->xc, q, key, s->size, s->tok[key % s->N],
				  was == MOEM_RES_RESIDENT, in_dram, force) != MOEM_EXEC_CPU)
		return false;
	/* a use of its DRAM copy (or the NVMe read that puts it there), as the engine's */
	if (s->dram_cache)
		moem_sim_link_bpn(s, key, s->size);
	if (!force)
		s->cpu_keys[s->n_cpu_keys++] = key;
	return true;
}

int moem_sim_cache_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end)
{
	const bool oracle = s->p->mode == MOEM_SIM_BELADY;
	uint64_t sum = 0, cur, latest = t_r, layer_comp, cpu;
	struct moem_exec_queue q = {0};
	uint32_t n_cpu = 0;
	int ret;

	s->npend = 0;
	s->n_cpu_keys = 0;
	s->unpin_stage = 0;
	s->layer_T = T;
	if (s->p->ordered) {
		/*
		 * The engine's cache-aware order (moem_route_exec_order): the
		 * resident experts are used first, then the misses are issued,
		 * each in expert order; the policy hears of them in that order.
		 */
		uint32_t n = 0;

		/* s->pend is free until the misses below are listed */
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t i = 0; i < T; i++)
				if ((s->k[s->keys[i]].st == K_RES) == (pass == 0))
					s->pend[n++] = s->keys[i];
		memcpy(s->keys, s->pend, n * sizeof(*s->pend));
	}
	memset(s->res, 0, s->N); /* experts that hit, for the execution order */
	for (uint32_t i = 0; i < T; i++) {
		uint32_t key = s->keys[i];
		struct sim_key *k = &s->k[key];
		enum moem_res was = moem_sim_cache_state(s, key);

		if (oracle) {
			k->next_use = s->next_use[s->nu_i++];
			k->last_use = s->log.n_pos - 1;
			k->uses++;
		}
		if ((s->c->exec_hybrid || s->n_placed_cpu) && on_cpu(s, &q, key, was)) {
			n_cpu++; /* neither a hit nor a miss, and the policy does not hear of it */
			continue;
		}
		sum += expert_ns(s, key);
		if (was == MOEM_RES_RESIDENT) {
			s->res[key % s->N] = 1;
			if (s->counted)
				s->r->hits++;
		} else if (was == MOEM_RES_FLIGHT) {
			s->step_bytes += s->size;
			if (s->counted)
				s->r->late++;
			moem_sim_ce_boost(s, k->xfer);
			s->pend[s->npend++] = key;
		} else {
			ret = moem_sim_cache_fetch(s, key, MOEM_PRIO_MISS, s->pos);
			if (ret < 0)
				return ret;
			s->step_bytes += s->size;
			s->pend[s->npend++] = key;
		}
		moem_driver_used(s->d, key, was, k->ready_ns + s->c->cost.layer_ns < t_r);
	}
	/* the engine's, before its lookahead: the CPU's experts into HBM behind the layer */
	ret = moem_driver_exec_keep(s->d, &q, s->cpu_keys, s->n_cpu_keys);
	if (ret)
		return ret;
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
				cur += expert_ns(s, s->keys[i]);
		for (uint32_t i = 0; i < s->npend; i++) {
			uint64_t d = pend_done(s, s->pend[i]);

			cur = (d > cur ? d : cur) + expert_ns(s, s->pend[i]);
		}
	} else {
		cur = latest + sum;
	}
	/* a wait for room (make_room) is stall too: it started the misses late */
	if (cur < s->now + sum)
		cur = s->now + sum;
	/* the CPU's experts beside the GPU's, from when the routing is known */
	cpu = q.cpu_ns;
	if (cur < t_r + cpu)
		cur = t_r + cpu;
	layer_comp = s->c->cost.layer_ns + sum;
	s->tau_comp += (double)layer_comp;
	if (s->counted) {
		s->r->stall_ns += cur - t_r - sum;
		s->r->compute_ns += layer_comp;
		s->r->cpu_experts += n_cpu;
		s->r->cpu_ns += cpu;
		s->r->accesses -= n_cpu;
	}
	moem_driver_layer_time(s->d, layer_comp);
	/* as the engine: once the misses have their slots, FluxMoE's window or the prefetches */
	ret = moem_driver_page_next(s->d);
	if (!ret)
		ret = moem_driver_lookahead(s->d);
	*end = cur;
	return ret;
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
