// SPDX-License-Identifier: GPL-2.0-only
/*
 * Tiered expert residency (tiers.h): the version state machine, handle
 * publication, HBM arena and DRAM staging budgets, and eviction.
 *
 * Per version:  HBM  ABSENT -> COPYING -> RESIDENT -> ABSENT
 *               DRAM ABSENT -> LOADING -> READY    -> ABSENT
 * A fetch takes an HBM slot first (so a miss cannot be starved of space by
 * its own load), then loads into DRAM if needed, then copies; a DRAM copy
 * is pinned while an H2D copy reads it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/extent.h>
#include <moem/tiers.h>
#include <moem/usdt.h>
#include <moem/util.h>

enum { H_ABSENT, H_COPYING, H_RESIDENT };
enum { D_ABSENT, D_LOADING, D_READY };

#define PUB_VALID  (1ULL << 63)
#define PUB_LO	   (1ULL << 62)
#define PUB_OFF(h) ((h) & (PUB_LO - 1))

struct ver {
	struct moem_xfer_req req; /* first: the xfer callback casts back */
	struct moem_tiers *t;
	uint32_t id;
	uint8_t hs, ds;
	uint8_t want_hbm;   /* an HBM slot waits for this DRAM load */
	uint8_t copying;    /* req is with the transfer engine */
	uint8_t prefetched; /* fetched at prefetch priority, not used since */
	uint64_t landed_ns, load_ns;
	uint16_t hpins, dpins, waiters;
	int err;
	uint64_t hoff, doff, wait_seq, last_use;
	struct ver *next_load;
};

struct grave {
	uint64_t off, len, seq;
};

struct moem_tiers {
	struct moem_tiers_cfg c;
	struct moem_tierdev *dev;
	struct moem_xfer *xfer;
	struct moem_stager *stager;
	struct moem_evictor *hev, *dev_ev;
	uint8_t *pool;
	uint64_t pool_bytes;
	moem_dptr base;
	uint64_t capacity, mapped, gran, slot_gran;
	uint64_t hbm_budget, dram_budget;
	struct moem_extent hx, dx;
	struct ver *v; /* [L * N * 2] */
	uint64_t *pub; /* [L * N] */
	uint8_t *plan; /* [L * N] */
	struct grave *grave;
	uint32_t n_grave, cap_grave;
	struct ver *loads; /* loads to start once the lock is dropped */
	uint32_t inflight; /* loads + copies */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct moem_tiers_stats st;
	moem_tiers_note_fn note;
	void *note_arg;
	uint64_t n_resident[2], n_ready; /* versions RESIDENT by pi, READY */
};

static inline void note(struct moem_tiers *t, const struct ver *v, int ready)
{
	if (t->note)
		t->note(t->note_arg, v->id, ready, v->doff);
}

static inline uint32_t le_of(const struct moem_tiers *t, const struct ver *v)
{
	return v->id / 2;
}

static inline uint32_t pi_of(const struct ver *v)
{
	return v->id & 1;
}

static inline uint64_t vbytes(const struct moem_tiers *t, const struct ver *v)
{
	return t->c.bytes[pi_of(v)];
}

static inline uint64_t hbm_need(const struct moem_tiers *t, uint64_t bytes)
{
	return moem_align_up(bytes, t->slot_gran);
}

/* ---- handles ---------------------------------------------------------- */

static void publish_best(struct moem_tiers *t, uint32_t le)
{
	uint32_t want = t->plan[le];
	struct ver *a = &t->v[le * 2 + want], *b = &t->v[le * 2 + (want ^ 1)];
	struct ver *p =
		a->hs == H_RESIDENT ? a : (t->c.n_prec > 1 && b->hs == H_RESIDENT ? b : NULL);

	__atomic_store_n(&t->pub[le], p ? PUB_VALID | (pi_of(p) ? PUB_LO : 0) | p->hoff : 0,
			 __ATOMIC_RELEASE);
}

/* ---- the arena's graveyard: freed space and its last reader ------------ */

static void grave_prune(struct moem_tiers *t)
{
	uint64_t done = t->dev->ops->compute_done(t->dev);
	uint32_t j = 0;

	for (uint32_t i = 0; i < t->n_grave; i++)
		if (t->grave[i].seq > done)
			t->grave[j++] = t->grave[i];
	t->n_grave = j;
}

static int grave_add(struct moem_tiers *t, uint64_t off, uint64_t len, uint64_t seq)
{
	if (!seq || seq <= t->dev->ops->compute_done(t->dev))
		return 0;
	if (t->n_grave == t->cap_grave) {
		uint32_t cap = t->cap_grave ? t->cap_grave * 2 : 64;
		struct grave *g = realloc(t->grave, sizeof(*g) * cap);

		if (!g)
			return -ENOMEM;
		t->grave = g;
		t->cap_grave = cap;
	}
	t->grave[t->n_grave++] = (struct grave){off, len, seq};
	return 0;
}

static uint64_t grave_seq(struct moem_tiers *t, uint64_t off, uint64_t len)
{
	uint64_t seq = 0;

	for (uint32_t i = 0; i < t->n_grave; i++) {
		const struct grave *g = &t->grave[i];

		if (g->off < off + len && off < g->off + g->len && g->seq > seq)
			seq = g->seq;
	}
	return seq;
}

/* ---- eviction ---------------------------------------------------------- */

static bool hbm_ok(void *arg, uint32_t id)
{
	const struct ver *v = &((struct moem_tiers *)arg)->v[id];

	return v->hs == H_RESIDENT && !v->hpins && !v->waiters;
}

static bool dram_ok(void *arg, uint32_t id)
{
	const struct ver *v = &((struct moem_tiers *)arg)->v[id];

	return v->ds == D_READY && !v->dpins;
}

static void hbm_evict(struct moem_tiers *t, struct ver *v)
{
	uint64_t need = hbm_need(t, vbytes(t, v));

	t->hev->del(t->hev, v->id);
	v->hs = H_ABSENT;
	t->n_resident[pi_of(v)]--;
	/* If the graveyard cannot grow, wait for the reader here instead. */
	if (grave_add(t, v->hoff, need, v->last_use))
		t->dev->ops->compute_wait(t->dev, v->last_use);
	moem_extent_free(&t->hx, v->hoff, need);
	publish_best(t, le_of(t, v));
	t->st.evict_hbm++;
}

static void dram_evict(struct moem_tiers *t, struct ver *v)
{
	t->dev_ev->del(t->dev_ev, v->id);
	v->ds = D_ABSENT;
	t->n_ready--;
	note(t, v, 0);
	moem_extent_free(&t->dx, v->doff, vbytes(t, v));
	t->st.evict_dram++;
}

static int hbm_alloc(struct moem_tiers *t, const struct ver *in, enum moem_prio prio, uint64_t *off,
		     uint64_t *wait_seq)
{
	uint64_t bytes = vbytes(t, in);
	uint64_t need = hbm_need(t, bytes);
	uint32_t id;

	if (need > t->hbm_budget)
		return moem_errf(ENOSPC, "expert version of %llu bytes exceeds the HBM budget %llu",
				 (unsigned long long)bytes, (unsigned long long)t->hbm_budget);
	for (;;) {
		if (moem_extent_used_bytes(&t->hx) + need <= t->hbm_budget &&
		    moem_extent_alloc(&t->hx, need, off) == 0)
			break;
		if (t->hev->pick(t->hev, in->id, prio, hbm_ok, t, &id))
			return -EAGAIN;
		hbm_evict(t, &t->v[id]);
	}
	grave_prune(t);
	*wait_seq = grave_seq(t, *off, need);
	return 0;
}

static int dram_alloc(struct moem_tiers *t, const struct ver *in, bool evict, uint64_t *off)
{
	uint64_t bytes = vbytes(t, in);
	uint32_t id;

	if (bytes > t->dram_budget)
		return moem_errf(ENOSPC,
				 "expert version of %llu bytes exceeds the DRAM budget %llu",
				 (unsigned long long)bytes, (unsigned long long)t->dram_budget);
	for (;;) {
		if (moem_extent_used_bytes(&t->dx) + moem_align_up(bytes, 4096) <= t->dram_budget &&
		    moem_extent_alloc(&t->dx, bytes, off) == 0)
			return 0;
		if (!evict || t->dev_ev->pick(t->dev_ev, in->id, MOEM_PRIO_MISS, dram_ok, t, &id))
			return -EAGAIN;
		dram_evict(t, &t->v[id]);
	}
}

/* ---- budgets ------------------------------------------------------------ */

/*
 * Bring both tiers within their budgets as far as pins allow, then move
 * the allocation limits and unmap arena memory no reader can touch.
 * Called whenever something is released or completes.
 */
static void apply_budgets(struct moem_tiers *t)
{
	uint64_t lim = t->hbm_budget & ~(t->slot_gran - 1), new_mapped;
	uint32_t id;

	/* Called on every release and completion: nothing to do once both
	 * tiers are within budget and their limits and mapping are in place. */
	if (moem_extent_used_bytes(&t->hx) <= t->hbm_budget &&
	    moem_extent_used_bytes(&t->dx) <= t->dram_budget &&
	    moem_extent_limit_bytes(&t->hx) == moem_min(lim, t->mapped) &&
	    moem_extent_limit_bytes(&t->dx) == (t->dram_budget & ~4095ULL) &&
	    t->mapped == moem_align_up(t->hbm_budget, t->gran))
		return;

	for (uint32_t i = 0; i < t->c.n_layers * t->c.n_experts * 2; i++) {
		struct ver *v = &t->v[i];

		if (v->hs == H_RESIDENT && v->hoff + hbm_need(t, vbytes(t, v)) > lim &&
		    hbm_ok(t, i))
			hbm_evict(t, v);
		if (v->ds == D_READY && v->doff + vbytes(t, v) > t->dram_budget && dram_ok(t, i))
			dram_evict(t, v);
	}
	while (moem_extent_used_bytes(&t->hx) > t->hbm_budget &&
	       !t->hev->pick(t->hev, MOEM_NO_VERSION, MOEM_PRIO_MISS, hbm_ok, t, &id))
		hbm_evict(t, &t->v[id]);
	while (moem_extent_used_bytes(&t->dx) > t->dram_budget &&
	       !t->dev_ev->pick(t->dev_ev, MOEM_NO_VERSION, MOEM_PRIO_MISS, dram_ok, t, &id))
		dram_evict(t, &t->v[id]);
	if (moem_extent_set_limit(&t->hx, moem_min(lim, t->mapped)) == 0) {
		new_mapped = moem_align_up(t->hbm_budget, t->gran);
		if (new_mapped < t->mapped) {
			grave_prune(t);
			t->dev->ops->compute_wait(t->dev,
						  grave_seq(t, new_mapped, t->mapped - new_mapped));
			if (t->dev->ops->unmap(t->dev, t->base + new_mapped,
					       t->mapped - new_mapped) == 0)
				t->mapped = new_mapped;
		}
	}
	moem_extent_set_limit(&t->dx, t->dram_budget & ~4095ULL);
}

/* ---- loads and copies ---------------------------------------------------- */

static void on_copy_done(struct moem_xfer_req *r, int status)
{
	struct ver *v = (struct ver *)r;
	struct moem_tiers *t = v->t;

	pthread_mutex_lock(&t->lock);
	v->dpins--;
	v->copying = 0;
	t->inflight--;
	if (status) {
		v->hs = H_ABSENT;
		moem_extent_free(&t->hx, v->hoff, hbm_need(t, vbytes(t, v)));
		v->err = status;
	} else {
		v->hs = H_RESIDENT;
		t->n_resident[pi_of(v)]++;
		v->landed_ns = moem_now_ns();
		MOEM_USDT_FETCH(le_of(t, v) / t->c.n_experts, le_of(t, v) % t->c.n_experts,
				(uint32_t)t->c.prec[pi_of(v)], MOEM_TIER_DRAM, MOEM_TIER_HBM,
				vbytes(t, v), v->landed_ns - r->t_submit);
		v->prefetched = r->prio == MOEM_PRIO_PREFETCH;
		t->hev->add(t->hev, v->id);
		t->st.bytes_h2d[r->prio] += vbytes(t, v);
		publish_best(t, le_of(t, v));
	}
	apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static int start_copy(struct moem_tiers *t, struct ver *v, enum moem_prio prio)
{
	int ret;

	v->want_hbm = 0;
	v->dpins++;
	v->copying = 1;
	t->dev_ev->touch(t->dev_ev, v->id);
	memset(&v->req, 0, sizeof(v->req));
	v->req.dst = t->base + v->hoff;
	v->req.src = t->pool + v->doff;
	v->req.bytes = vbytes(t, v);
	v->req.wait_compute = v->wait_seq;
	v->req.prio = prio;
	v->req.done = on_copy_done;
	t->inflight++;
	ret = moem_xfer_submit(t->xfer, &v->req);
	if (ret) {
		t->inflight--;
		v->dpins--;
		v->copying = 0;
		v->hs = H_ABSENT;
		moem_extent_free(&t->hx, v->hoff, hbm_need(t, vbytes(t, v)));
		v->err = ret;
	}
	return ret;
}

static void on_load_done(void *arg, int status)
{
	struct ver *v = arg;
	struct moem_tiers *t = v->t;

	pthread_mutex_lock(&t->lock);
	t->inflight--;
	if (status) {
		v->ds = D_ABSENT;
		moem_extent_free(&t->dx, v->doff, vbytes(t, v));
		v->err = status;
		note(t, v, 0);
		if (v->want_hbm) {
			v->want_hbm = 0;
			v->hs = H_ABSENT;
			moem_extent_free(&t->hx, v->hoff, hbm_need(t, vbytes(t, v)));
		}
	} else {
		v->ds = D_READY;
		t->n_ready++;
		t->dev_ev->add(t->dev_ev, v->id);
		t->st.bytes_nvme += vbytes(t, v);
		MOEM_USDT_FETCH(le_of(t, v) / t->c.n_experts, le_of(t, v) % t->c.n_experts,
				(uint32_t)t->c.prec[pi_of(v)], MOEM_TIER_NVME, MOEM_TIER_DRAM,
				vbytes(t, v), moem_now_ns() - v->load_ns);
		note(t, v, 1);
		if (v->want_hbm && v->hs == H_COPYING)
			start_copy(t, v, (enum moem_prio)v->req.prio);
	}
	apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static int start_load(struct moem_tiers *t, struct ver *v, bool evict)
{
	uint64_t off;
	int ret = dram_alloc(t, v, evict, &off);

	if (ret)
		return ret;
	v->ds = D_LOADING;
	v->doff = off;
	v->err = 0;
	v->load_ns = moem_now_ns();
	note(t, v, 0);
	t->inflight++;
	v->next_load = t->loads;
	t->loads = v;
	return 0;
}

/* Start the loads queued under the lock; called without it. */
static void flush_loads(struct moem_tiers *t)
{
	struct ver *v;

	pthread_mutex_lock(&t->lock);
	v = t->loads;
	t->loads = NULL;
	pthread_mutex_unlock(&t->lock);
	while (v) {
		struct ver *next = v->next_load;
		uint32_t le = le_of(t, v);
		int ret;

		ret = t->stager->read(t->stager, le / t->c.n_experts, le % t->c.n_experts, pi_of(v),
				      t->pool + v->doff, vbytes(t, v), on_load_done, v);
		if (ret)
			on_load_done(v, ret);
		v = next;
	}
}

/* Make sure version v is resident or on its way to HBM at prio. */
static int fetch(struct moem_tiers *t, struct ver *v, enum moem_prio prio)
{
	uint64_t off = 0, ws = 0;
	int ret;

	if (v->hs == H_RESIDENT)
		return 0;
	if (v->hs == H_COPYING) {
		if (prio < v->req.prio) {
			if (v->copying)
				moem_xfer_raise(t->xfer, &v->req, prio);
			else
				v->req.prio = prio;
		}
		return 0;
	}
	ret = hbm_alloc(t, v, prio, &off, &ws);
	if (ret)
		return ret;
	v->hs = H_COPYING;
	v->hoff = off;
	v->wait_seq = ws;
	v->err = 0;
	v->req.prio = prio;
	if (v->ds == D_READY) {
		ret = start_copy(t, v, prio);
		return ret ? ret : 1;
	}
	v->want_hbm = 1;
	if (v->ds == D_ABSENT) {
		ret = start_load(t, v, true);
		if (ret) {
			v->want_hbm = 0;
			v->hs = H_ABSENT;
			moem_extent_free(&t->hx, off, hbm_need(t, vbytes(t, v)));
			return ret;
		}
	}
	return 1;
}

/* ---- public API ---------------------------------------------------------- */

static int check_le(const struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return moem_errf(EINVAL, "expert (%u, %u) out of range (%u layers, %u experts)",
				 layer, expert, t->c.n_layers, t->c.n_experts);
	return 0;
}

int moem_tiers_acquire(struct moem_tiers *t, uint32_t layer, uint32_t expert, struct moem_xref *ref)
{
	uint32_t le = layer * t->c.n_experts + expert, pi;
	struct ver *v;
	uint64_t h;
	bool staged;
	int ret = check_le(t, layer, expert);

	if (ret)
		return ret;
	ref->layer = layer;
	ref->expert = expert;
	pthread_mutex_lock(&t->lock);
	h = t->pub[le];
	if (h) {
		pi = h & PUB_LO ? 1 : 0;
		if (pi == t->plan[le] || t->c.allow_fallback) {
			v = &t->v[le * 2 + pi];
			v->hpins++;
			t->hev->touch(t->hev, v->id);
			ref->pi = pi;
			ref->addr = t->base + PUB_OFF(h);
			ref->prefetched = v->prefetched;
			ref->landed_ns = v->landed_ns;
			v->prefetched = 0;
			ret = pi == t->plan[le] ? MOEM_ACQ_HIT : MOEM_ACQ_FALLBACK;
			if (ret == MOEM_ACQ_HIT)
				t->st.hits++;
			else
				t->st.fallbacks++;
			pthread_mutex_unlock(&t->lock);
			return ret;
		}
	}
	pi = t->plan[le];
	v = &t->v[le * 2 + pi];
	/* A prefetch still in flight when the layer needs it came too late. */
	ref->prefetched = v->hs == H_COPYING && v->req.prio == MOEM_PRIO_PREFETCH;
	ref->landed_ns = 0;
	staged = v->ds == D_READY;
	ret = fetch(t, v, MOEM_PRIO_MISS);
	if (ret >= 0) {
		v->waiters++;
		t->st.misses++;
		if (staged)
			t->st.dram_hits++;
		else
			t->st.dram_misses++;
		ref->pi = pi;
		ref->addr = 0;
		ret = MOEM_ACQ_PENDING;
	}
	pthread_mutex_unlock(&t->lock);
	flush_loads(t);
	return ret;
}

int moem_tiers_wait(struct moem_tiers *t, struct moem_xref *ref)
{
	uint32_t le = ref->layer * t->c.n_experts + ref->expert;
	struct ver *v = &t->v[le * 2 + ref->pi];
	uint64_t t0 = moem_now_ns();
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	while (v->hs == H_COPYING)
		pthread_cond_wait(&t->cond, &t->lock);
	v->waiters--;
	if (v->hs == H_RESIDENT) {
		v->hpins++;
		v->prefetched = 0;
		t->hev->touch(t->hev, v->id);
		ref->addr = t->base + v->hoff;
	} else {
		ret = moem_errf(v->err ? -v->err : EIO, "expert (%u, %u) %s: fetch failed: %s",
				ref->layer, ref->expert, ref->pi ? "lo" : "hi",
				strerror(v->err ? -v->err : EIO));
	}
	t->st.stall_ns += moem_now_ns() - t0;
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_release(struct moem_tiers *t, const struct moem_xref *refs, uint32_t n,
			uint64_t compute_seq)
{
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t le = refs[i].layer * t->c.n_experts + refs[i].expert;
		struct ver *v = &t->v[le * 2 + refs[i].pi];

		if (v->hpins)
			v->hpins--;
		if (compute_seq > v->last_use)
			v->last_use = compute_seq;
	}
	apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

int moem_tiers_prefetch(struct moem_tiers *t, uint32_t layer, uint32_t expert, enum moem_prio prio)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = check_le(t, layer, expert);

	if (ret)
		return ret;
	if ((unsigned int)prio >= MOEM_PRIO_NR)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	ret = fetch(t, &t->v[le * 2 + t->plan[le]], prio);
	pthread_mutex_unlock(&t->lock);
	flush_loads(t);
	return ret;
}

/* check_le() plus a managed precision index. */
static int check_version(const struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	int ret = check_le(t, layer, expert);

	if (!ret && pi >= t->c.n_prec)
		ret = moem_errf(EINVAL, "precision index %u: only %u managed", pi, t->c.n_prec);
	return ret;
}

int moem_tiers_stage(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = check_version(t, layer, expert, pi);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	if (t->v[le * 2 + pi].ds == D_ABSENT)
		ret = start_load(t, &t->v[le * 2 + pi], false);
	pthread_mutex_unlock(&t->lock);
	flush_loads(t);
	return ret;
}

bool moem_tiers_staged(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	bool r;

	if (check_version(t, layer, expert, pi))
		return false;
	pthread_mutex_lock(&t->lock);
	r = t->v[(layer * t->c.n_experts + expert) * 2 + pi].ds == D_READY;
	pthread_mutex_unlock(&t->lock);
	return r;
}

int moem_tiers_published(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	uint64_t h;

	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return -1;
	h = __atomic_load_n(&t->pub[layer * t->c.n_experts + expert], __ATOMIC_ACQUIRE);
	return h ? (h & PUB_LO ? 1 : 0) : -1;
}

int moem_tiers_published_range(struct moem_tiers *t, uint32_t layer, uint32_t expert,
			       moem_dptr *addr, uint64_t *bytes)
{
	uint64_t h;

	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return -1;
	h = __atomic_load_n(&t->pub[layer * t->c.n_experts + expert], __ATOMIC_ACQUIRE);
	if (!h)
		return -1;
	*addr = t->base + PUB_OFF(h);
	*bytes = t->c.bytes[h & PUB_LO ? 1 : 0];
	return h & PUB_LO ? 1 : 0;
}

int moem_tiers_set_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = check_version(t, layer, expert, pi);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	t->plan[le] = (uint8_t)pi;
	publish_best(t, le);
	pthread_mutex_unlock(&t->lock);
	return 0;
}

uint32_t moem_tiers_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	return __atomic_load_n(&t->plan[layer * t->c.n_experts + expert], __ATOMIC_RELAXED);
}

void moem_tiers_resident_mask(struct moem_tiers *t, uint32_t layer, uint8_t *mask)
{
	for (uint32_t e = 0; e < t->c.n_experts; e++)
		mask[e] =
			__atomic_load_n(&t->pub[layer * t->c.n_experts + e], __ATOMIC_ACQUIRE) != 0;
}

int moem_tiers_set_budget(struct moem_tiers *t, uint64_t hbm, uint64_t dram)
{
	uint64_t big = moem_max(t->c.bytes[0], t->c.n_prec > 1 ? t->c.bytes[1] : 0);
	uint64_t new_mapped;
	int ret = 0;

	if (hbm > t->capacity)
		return moem_errf(ERANGE, "HBM budget %llu above the %llu-byte reservation",
				 (unsigned long long)hbm, (unsigned long long)t->capacity);
	if (hbm < hbm_need(t, big))
		return moem_errf(ERANGE, "HBM budget %llu below one expert version (%llu bytes)",
				 (unsigned long long)hbm, (unsigned long long)hbm_need(t, big));
	if (dram > t->pool_bytes)
		return moem_errf(ERANGE, "DRAM budget %llu above the %llu-byte pool",
				 (unsigned long long)dram, (unsigned long long)t->pool_bytes);
	if (dram < big)
		return moem_errf(ERANGE, "DRAM budget %llu below one expert version (%llu bytes)",
				 (unsigned long long)dram, (unsigned long long)big);
	pthread_mutex_lock(&t->lock);
	new_mapped = moem_align_up(hbm, t->gran);
	if (new_mapped > t->mapped) {
		ret = t->dev->ops->map(t->dev, t->base + t->mapped, new_mapped - t->mapped);
		if (ret)
			goto out;
		t->mapped = new_mapped;
	}
	t->hbm_budget = hbm;
	t->dram_budget = dram;
	apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_set_note(struct moem_tiers *t, moem_tiers_note_fn fn, void *arg)
{
	pthread_mutex_lock(&t->lock);
	t->note = fn;
	t->note_arg = arg;
	pthread_mutex_unlock(&t->lock);
}

int moem_tiers_adopt(struct moem_tiers *t, uint32_t vid, uint64_t doff)
{
	struct ver *v;
	int ret;

	if (vid >= t->c.n_layers * t->c.n_experts * 2 || vid % 2 >= t->c.n_prec)
		return moem_errf(EINVAL, "adopt: version %u out of range", vid);
	pthread_mutex_lock(&t->lock);
	v = &t->v[vid];
	if (v->ds != D_ABSENT) {
		ret = moem_errf(EEXIST, "adopt: version %u already staged", vid);
		goto out;
	}
	if (!moem_is_aligned(doff, 4096) || doff + vbytes(t, v) > t->dram_budget) {
		ret = moem_errf(ERANGE, "adopt: version %u at %llu outside the DRAM budget", vid,
				(unsigned long long)doff);
		goto out;
	}
	ret = moem_extent_reserve(&t->dx, doff, vbytes(t, v));
	if (ret) {
		ret = moem_errf(-ret, "adopt: version %u at %llu overlaps another", vid,
				(unsigned long long)doff);
		goto out;
	}
	v->ds = D_READY;
	t->n_ready++;
	v->doff = doff;
	t->dev_ev->add(t->dev_ev, vid);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_drain(struct moem_tiers *t)
{
	pthread_mutex_lock(&t->lock);
	while (t->inflight)
		pthread_cond_wait(&t->cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
}

void moem_tiers_get_stats(struct moem_tiers *t, struct moem_tiers_stats *s)
{
	pthread_mutex_lock(&t->lock);
	*s = t->st;
	s->hbm_used = moem_extent_used_bytes(&t->hx);
	s->hbm_budget = t->hbm_budget;
	s->hbm_mapped = t->mapped;
	s->dram_used = moem_extent_used_bytes(&t->dx);
	s->dram_budget = t->dram_budget;
	s->hbm_resident[0] = t->n_resident[0];
	s->hbm_resident[1] = t->n_resident[1];
	s->dram_ready = t->n_ready;
	pthread_mutex_unlock(&t->lock);
	s->link_bw = moem_xfer_bandwidth(t->xfer);
	{
		struct moem_xfer_stats xs;

		moem_xfer_get_stats(t->xfer, &xs);
		s->link_busy_ns = xs.busy_ns;
	}
}

void moem_tiers_usage(struct moem_tiers *t, uint64_t *hbm_used, uint64_t *hbm_budget,
		      uint64_t *dram_used, uint64_t *dram_budget, uint64_t *bytes_nvme)
{
	pthread_mutex_lock(&t->lock);
	*hbm_used = moem_extent_used_bytes(&t->hx);
	*hbm_budget = t->hbm_budget;
	*dram_used = moem_extent_used_bytes(&t->dx);
	*dram_budget = t->dram_budget;
	*bytes_nvme = t->st.bytes_nvme;
	pthread_mutex_unlock(&t->lock);
}

const void *moem_tiers_host_view(struct moem_tiers *t, const struct moem_xref *ref)
{
	return t->dev->ops->host_view ? t->dev->ops->host_view(t->dev, ref->addr) : NULL;
}

/* ---- invariants --------------------------------------------------------- */

int moem_tiers_check(struct moem_tiers *t)
{
	const uint32_t nv = t->c.n_layers * t->c.n_experts * 2;
	uint64_t hsum = 0, dsum = 0, h_above = 0, d_above = 0, res[2] = {0, 0}, ready = 0;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	for (uint32_t le = 0; le < nv / 2 && !ret; le++) {
		uint64_t h = t->pub[le];
		const struct ver *v;

		if (!h)
			continue;
		v = &t->v[le * 2 + (h & PUB_LO ? 1 : 0)];
		if (v->hs != H_RESIDENT || v->hoff != PUB_OFF(h))
			ret = moem_errf(EFAULT,
					"handle %u publishes a version that is not resident", le);
	}
	for (uint32_t i = 0; i < nv && !ret; i++) {
		const struct ver *v = &t->v[i];
		uint64_t hn = hbm_need(t, vbytes(t, v)), dn = moem_align_up(vbytes(t, v), 4096);

		if (i % 2 >= t->c.n_prec && (v->hs != H_ABSENT || v->ds != D_ABSENT))
			ret = moem_errf(EFAULT, "version %u of an unmanaged precision is present",
					i);
		if (v->hs != H_ABSENT) {
			hsum += hn;
			if (v->hoff + hn > t->mapped)
				ret = moem_errf(EFAULT, "version %u lies in unmapped HBM", i);
			if (v->hoff + hn > t->hbm_budget && !v->hpins && !v->waiters &&
			    v->hs == H_RESIDENT)
				h_above++;
			for (uint32_t j = 0; j < i && !ret; j++) {
				const struct ver *w = &t->v[j];
				uint64_t wn = hbm_need(t, vbytes(t, w));

				if (w->hs != H_ABSENT && w->hoff < v->hoff + hn &&
				    v->hoff < w->hoff + wn)
					ret = moem_errf(EFAULT, "versions %u and %u overlap in HBM",
							j, i);
			}
		}
		if (v->ds != D_ABSENT) {
			dsum += dn;
			if (v->ds == D_READY && v->doff + dn > t->dram_budget && !v->dpins)
				d_above++;
		}
		res[i & 1] += v->hs == H_RESIDENT;
		ready += v->ds == D_READY;
		if (v->hs == H_RESIDENT && v->copying)
			ret = moem_errf(EFAULT, "version %u resident while copying", i);
		if (v->dpins != (v->copying ? 1 : 0))
			ret = moem_errf(EFAULT, "version %u: %u DRAM pins, %u copies", i, v->dpins,
					v->copying);
		if (v->hpins && v->hs != H_RESIDENT)
			ret = moem_errf(EFAULT, "version %u pinned but not resident", i);
	}
	if (!ret &&
	    (res[0] != t->n_resident[0] || res[1] != t->n_resident[1] || ready != t->n_ready))
		ret = moem_errf(EFAULT,
				"version counters: %llu/%llu resident, %llu ready counted as "
				"%llu/%llu, %llu",
				(unsigned long long)res[0], (unsigned long long)res[1],
				(unsigned long long)ready, (unsigned long long)t->n_resident[0],
				(unsigned long long)t->n_resident[1],
				(unsigned long long)t->n_ready);
	if (!ret && hsum != moem_extent_used_bytes(&t->hx))
		ret = moem_errf(EFAULT, "HBM accounting: versions hold %llu, allocator says %llu",
				(unsigned long long)hsum,
				(unsigned long long)moem_extent_used_bytes(&t->hx));
	if (!ret && dsum != moem_extent_used_bytes(&t->dx))
		ret = moem_errf(EFAULT, "DRAM accounting: versions hold %llu, allocator says %llu",
				(unsigned long long)dsum,
				(unsigned long long)moem_extent_used_bytes(&t->dx));
	/* Over budget only by what is pinned, waited for or in flight. */
	if (!ret && (h_above || d_above))
		ret = moem_errf(EFAULT, "%llu HBM / %llu DRAM versions above budget and evictable",
				(unsigned long long)h_above, (unsigned long long)d_above);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* ---- life cycle ---------------------------------------------------------- */

int moem_tiers_create(const struct moem_tiers_cfg *cfg, struct moem_tierdev *dev, void *pool,
		      uint64_t pool_bytes, struct moem_stager *stager, struct moem_evictor *hbm_ev,
		      struct moem_evictor *dram_ev, struct moem_tiers **out)
{
	struct moem_tiers *t;
	uint64_t nle, all = 0;
	int ret;

	if (!cfg->n_layers || !cfg->n_experts || cfg->n_layers > 1024 || cfg->n_experts > 4096)
		return moem_errf(EINVAL, "tiers: %u layers x %u experts out of range",
				 cfg->n_layers, cfg->n_experts);
	if (cfg->n_prec < 1 || cfg->n_prec > 2 || !cfg->bytes[0] ||
	    (cfg->n_prec == 2 && !cfg->bytes[1]))
		return moem_errf(EINVAL, "tiers: bad precision setup");
	if (!pool || !pool_bytes || !moem_is_aligned((uintptr_t)pool, 4096))
		return moem_errf(EINVAL, "tiers: staging pool missing or unaligned");
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->c = *cfg;
	t->dev = dev;
	t->stager = stager;
	t->hev = hbm_ev;
	t->dev_ev = dram_ev;
	t->pool = pool;
	t->pool_bytes = pool_bytes;
	t->gran = dev->ops->granularity(dev);
	t->slot_gran = 1ULL << (cfg->hbm_granule_shift ? cfg->hbm_granule_shift : 16);
	nle = (uint64_t)cfg->n_layers * cfg->n_experts;
	for (uint32_t p = 0; p < cfg->n_prec; p++)
		all += nle * moem_align_up(cfg->bytes[p], t->slot_gran);
	t->capacity = moem_align_up(cfg->hbm_capacity ? cfg->hbm_capacity : all, t->gran);
	t->v = calloc(nle * 2, sizeof(*t->v));
	t->pub = calloc(nle, sizeof(*t->pub));
	t->plan = calloc(nle, 1);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	if (!t->v || !t->pub || !t->plan) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (uint64_t i = 0; i < nle * 2; i++) {
		t->v[i].t = t;
		t->v[i].id = (uint32_t)i;
	}
	ret = moem_extent_init(&t->hx, t->capacity, 0, __builtin_ctzll(t->slot_gran));
	if (ret)
		goto err_free;
	ret = moem_extent_init(&t->dx, pool_bytes, 0, 12);
	if (ret)
		goto err_hx;
	ret = dev->ops->reserve(dev, t->capacity, &t->base);
	if (ret)
		goto err_dx;
	ret = dev->ops->host_register(dev, pool, pool_bytes);
	if (ret)
		goto err_reserve;
	ret = moem_xfer_create(dev, &cfg->xfer, &t->xfer);
	if (ret)
		goto err_register;
	ret = moem_tiers_set_budget(t, cfg->hbm_budget, cfg->dram_budget);
	if (ret)
		goto err_xfer;
	*out = t;
	return 0;

err_xfer:
	moem_xfer_destroy(t->xfer);
err_register:
	dev->ops->host_unregister(dev, pool);
err_reserve:
	dev->ops->unreserve(dev, t->base, t->capacity);
err_dx:
	moem_extent_fini(&t->dx);
err_hx:
	moem_extent_fini(&t->hx);
err_free:
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	free(t->v);
	free(t->pub);
	free(t->plan);
	free(t);
	return ret;
}

void moem_tiers_destroy(struct moem_tiers *t)
{
	uint64_t last = 0;

	if (!t)
		return;
	moem_tiers_drain(t);
	moem_xfer_destroy(t->xfer);
	/* No kernel may still read the arena when it goes. */
	for (uint32_t i = 0; i < t->c.n_layers * t->c.n_experts * 2; i++)
		last = moem_max(last, t->v[i].last_use);
	for (uint32_t i = 0; i < t->n_grave; i++)
		last = moem_max(last, t->grave[i].seq);
	t->dev->ops->compute_wait(t->dev, last);
	if (t->mapped)
		t->dev->ops->unmap(t->dev, t->base, t->mapped);
	t->dev->ops->unreserve(t->dev, t->base, t->capacity);
	t->dev->ops->host_unregister(t->dev, t->pool);
	moem_extent_fini(&t->hx);
	moem_extent_fini(&t->dx);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	free(t->grave);
	free(t->v);
	free(t->pub);
	free(t->plan);
	free(t);
}
