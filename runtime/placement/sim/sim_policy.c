// SPDX-License-Identifier: GPL-2.0-only
/*
 * Simulated policy presets (sim.h): a preset fixes the components (route,
 * eviction, prefetch, execution order, or a whole mode), and the flat
 * key=value list overrides them. Each key is forwarded to the component
 * parser that owns it, so ranges and defaults live in one place.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>
#include <moem/driver.h>
#include <moem/sim.h>

struct preset {
	const char *name;
	enum moem_sim_mode mode;
	const char *route, *evict, *prefetch;
	bool ordered;
	double qmin; /* prefetch threshold (0: the prefetcher's default, 0.05) */
};

static const struct preset presets[] = {
	{"lru", MOEM_SIM_CACHE, "none", "lru", "none", false},
	{"lru2", MOEM_SIM_CACHE, "none", "lru2", "none", false},
	{"lfu", MOEM_SIM_CACHE, "none", "lfu", "none", false},
	{"pred", MOEM_SIM_CACHE, "none", "pred", "none", false},
	{"belady", MOEM_SIM_BELADY, "none", "lru", "none", false},
	{"prefetch-fixed", MOEM_SIM_CACHE, "cache-aware", "lru2", "fixed", true},
	{"expertflow", MOEM_SIM_CACHE, "cache-aware", "lru2", "adaptive", true},
	/* moem's own: only confident prefetches (a wrong one costs link time a miss needs) */
	{"moem", MOEM_SIM_CACHE, "cache-aware", "pred", "adaptive", true, 0.3},
	{"lynx", MOEM_SIM_CACHE, "lynx", "pred", "adaptive", true, 0.3},
	{"oea", MOEM_SIM_CACHE, "oea", "pred", "adaptive", true, 0.3},
	{"piggyback", MOEM_SIM_CACHE, "piggyback", "pred", "adaptive", true, 0.3},
	{"dynaexq", MOEM_SIM_DYNAEXQ, "none", "lru", "none", false},
	{"fluxmoe", MOEM_SIM_FLUXMOE, "cache-aware", "pred", "none", true},
};

const char *const *moem_sim_policy_all(bool logits, uint32_t *n)
{
	static const char *const with[] = {
		"lru",	"lru2", "lfu", "pred",	    "belady",  "prefetch-fixed", "expertflow",
		"moem", "lynx", "oea", "piggyback", "dynaexq", "fluxmoe"};
	static const char *const without[] = {"lru",	 "lru2",	   "lfu",	 "pred",
					      "belady",	 "prefetch-fixed", "expertflow", "moem",
					      "dynaexq", "fluxmoe"};

	*n = logits ? MOEM_ARRAY_SIZE(with) : MOEM_ARRAY_SIZE(without);
	return logits ? with : without;
}

/* Append ",key=value" (or ":key=value" first) to a component spec if key is given. */
static int fwd(struct moem_spec *sp, const char *key, const char *as, char *dst, size_t len)
{
	const char *v = moem_spec_str(sp, key);
	size_t n = strlen(dst);

	if (!v)
		return 0;
	if (snprintf(dst + n, len - n, "%s%s=%s", strchr(dst, ':') ? "," : ":", as, v) >=
	    (int)(len - n))
		return moem_errf(EINVAL, "policy %s: parameters too long", sp->name);
	return 0;
}

static int fwd_all(struct moem_spec *sp, const char *const *keys, const char *const *as, char *dst,
		   size_t len)
{
	int ret = 0;

	for (int i = 0; keys[i] && !ret; i++)
		ret = fwd(sp, keys[i], as ? as[i] : keys[i], dst, len);
	return ret;
}

/* A component's kind: key=value if given, else the preset's (parameters as separate keys). */
static int set_kind(struct moem_spec *sp, const char *key, const char *def, char *dst, size_t len)
{
	const char *v = moem_spec_str(sp, key);

	if (snprintf(dst, len, "%s", v ? v : def) >= (int)len || strchr(dst, ':'))
		return moem_errf(EINVAL, "policy %s: %s=%s: give parameters as separate keys",
				 sp->name, key, v ? v : def);
	return 0;
}

/* belady's restrictions (sim.h): look=TICKS, gran=tick|step, fb=lru|lfu|pred */
static int oracle_parts(struct moem_spec *sp, struct moem_sim_policy *p)
{
	static const char *const fbs[] = {"lru", "lfu", "pred"};
	const char *gran = moem_spec_str(sp, "gran"), *fb = moem_spec_str(sp, "fb");
	int ret;

	ret = moem_spec_u32(sp, "look", 0, 1u << 30, &p->oracle_look);
	if (ret)
		return ret;
	if (gran && strcmp(gran, "tick") && strcmp(gran, "step"))
		return moem_errf(EINVAL, "policy %s: gran=%s (tick, step)", sp->name, gran);
	p->oracle_step = gran && !strcmp(gran, "step");
	p->oracle_fb = MOEM_SIM_FB_LRU;
	if (!fb)
		return 0;
	for (int i = 0; i < (int)MOEM_ARRAY_SIZE(fbs); i++)
		if (!strcmp(fb, fbs[i])) {
			p->oracle_fb = i;
			return 0;
		}
	return moem_errf(EINVAL, "policy %s: fb=%s (lru, lfu, pred)", sp->name, fb);
}

static int cache_parts(struct moem_spec *sp, const struct preset *ps, struct moem_sim_policy *p)
{
	static const char *const rkeys[] = {"alpha", "beta", "any", "k0", NULL};
	static const char *const pkeys[] = {"S",    "cum",  "qmin", "stall",
					    "over", "hops", "max",  NULL};
	char ev[64], pf[96], kind[32];
	struct moem_route_policy rp;
	const char *order;
	int ret;

	/* route */
	if ((ret = set_kind(sp, "route", ps->route, p->route, sizeof(p->route))) ||
	    (ret = fwd_all(sp, rkeys, NULL, p->route, sizeof(p->route))) ||
	    (ret = moem_route_policy_parse(p->route, 64, &rp)))
		return ret;
	p->ordered = ps->ordered || moem_route_policy_ordered(&rp);
	if (p->mode == MOEM_SIM_BELADY && rp.kind == MOEM_RP_PIGGYBACK)
		return moem_errf(EINVAL, "belady: piggyback routing depends on residency, so the "
					 "oracle cannot know the future accesses");
	order = moem_spec_str(sp, "order");
	if (order && !strcmp(order, "cache-aware"))
		p->ordered = true;
	else if (order && !strcmp(order, "fifo"))
		p->ordered = false;
	else if (order)
		return moem_errf(EINVAL, "policy %s: order=%s (fifo, cache-aware)", sp->name,
				 order);
	if (p->mode == MOEM_SIM_BELADY)
		return oracle_parts(sp, p);
	/* eviction */
	if ((ret = set_kind(sp, "evict", ps->evict, ev, sizeof(ev))) ||
	    (ret = fwd(sp, "W", "W", ev, sizeof(ev))) ||
	    (ret = fwd(sp, "half", "half", ev, sizeof(ev))) ||
	    (ret = moem_evict_parse(ev, &p->evict)))
		return ret;
	/* prefetch */
	if ((ret = set_kind(sp, "prefetch", ps->prefetch, kind, sizeof(kind))))
		return ret;
	/* (fixed defaults to S = 4 in moem_prefetch_parse) */
	if (ps->qmin > 0 && strcmp(kind, "none") && !moem_spec_str(sp, "qmin"))
		snprintf(pf, sizeof(pf), "%s:qmin=%g", kind, ps->qmin);
	else
		snprintf(pf, sizeof(pf), "%s", kind);
	if ((ret = fwd_all(sp, pkeys, NULL, pf, sizeof(pf))))
		return ret;
	ret = moem_prefetch_parse(pf, &p->pf);
	if (ret == -ENOENT) {
		p->prefetch = false;
		ret = 0;
	} else if (!ret) {
		p->prefetch = true;
	}
	if (ret)
		return ret;
	p->pf_queue = 64;
	p->copy_back = true;
	ret = moem_spec_u32(sp, "queue", 1, 4096, &p->pf_queue)
		      ?: moem_spec_bool(sp, "pregate", &p->pregate)
		      ?: moem_spec_bool(sp, "copyback", &p->copy_back);
	if (!ret) {
		enum moem_dram_rule dr;

		ret = moem_dram_rule_parse(moem_spec_str(sp, "dram"), &dr);
		p->dram = (int)dr;
	}
	return ret;
}

int moem_sim_policy_parse(const char *spec, struct moem_sim_policy *p)
{
	static const char *const dkeys[] = {"hi",     "lo",	  "ema",  "interval_ms",
					    "margin", "inflight", "n_hi", NULL};
	static const char *const das[] = {"hi",	    "lo",	"alpha", "interval_ms",
					  "margin", "inflight", "n_hi",	 NULL};
	static const char *const fkeys[] = {"theta", "upper", "initial", "margin", NULL};
	const struct preset *ps = NULL;
	struct moem_spec sp;
	char sub[160];
	int ret;

	memset(p, 0, sizeof(*p));
	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(presets); i++)
		if (!strcmp(sp.name, presets[i].name))
			ps = &presets[i];
	if (!ps)
		return moem_errf(EINVAL,
				 "policy '%s': unknown (lru, lru2, lfu, pred, belady, "
				 "prefetch-fixed, expertflow, moem, lynx, oea, piggyback, "
				 "dynaexq, fluxmoe)",
				 sp.name);
	snprintf(p->label, sizeof(p->label), "%s", spec);
	p->mode = ps->mode;
	p->pregate = true;
	moem_prefetch_default(&p->pf, 1, 2, 1);
	moem_dynaexq_default(&p->dx, 1, 1);
	moem_paging_default(&p->pg, 1, 1);
	switch (p->mode) {
	case MOEM_SIM_CACHE:
	case MOEM_SIM_BELADY:
		ret = cache_parts(&sp, ps, p);
		break;
	case MOEM_SIM_DYNAEXQ:
		strcpy(sub, "dynaexq");
		p->dx_pair_given = moem_spec_str(&sp, "hi") || moem_spec_str(&sp, "lo");
		ret = fwd_all(&sp, dkeys, das, sub, sizeof(sub));
		if (!ret)
			ret = moem_dynaexq_parse(sub, &p->dx, &p->dx_n_hi_given);
		strcpy(p->route, "none");
		break;
	case MOEM_SIM_FLUXMOE:
		/* the cache the resident set and the window leave: route, eviction */
		ret = cache_parts(&sp, ps, p);
		strcpy(sub, "fluxmoe");
		if (!ret)
			ret = fwd_all(&sp, fkeys, NULL, sub, sizeof(sub));
		if (!ret)
			ret = moem_paging_parse(sub, &p->pg, &p->pg_initial_given);
		break;
	}
	if (ret)
		return ret;
	return moem_spec_done(&sp);
}
