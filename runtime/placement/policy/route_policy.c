// SPDX-License-Identifier: GPL-2.0-only
/* Routing policy: choice and parameters over route.h (policy_route.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

static const char *const kind_names[MOEM_RP_NR] = {
	"none", "lynx", "oea", "cache-aware", "piggyback", "prune",
};

const char *moem_route_kind_name(enum moem_route_kind k)
{
	return (unsigned)k < MOEM_RP_NR ? kind_names[k] : "invalid";
}

void moem_route_policy_default(enum moem_route_kind kind, uint32_t top_k,
			       struct moem_route_policy *rp)
{
	memset(rp, 0, sizeof(*rp));
	rp->kind = kind;
	rp->lynx.alpha = 2.0f;
	rp->lynx.beta = 4;
	rp->k0 = moem_oea_default_k0(top_k);
}

int moem_route_policy_parse(const char *spec, uint32_t top_k, struct moem_route_policy *rp)
{
	struct moem_spec sp;
	int kind = -1, ret;
	double alpha;

	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	for (int k = 0; k < MOEM_RP_NR; k++)
		if (!strcmp(sp.name, kind_names[k]))
			kind = k;
	if (kind < 0)
		return moem_errf(EINVAL,
				 "route policy '%s': unknown (none, lynx, oea, "
				 "cache-aware, piggyback, prune)",
				 sp.name);
	moem_route_policy_default((enum moem_route_kind)kind, top_k, rp);
	alpha = rp->lynx.alpha;
	switch (rp->kind) {
	case MOEM_RP_LYNX:
		if ((ret = moem_spec_f64(&sp, "alpha", 1e-3, 64, &alpha)) ||
		    (ret = moem_spec_u32(&sp, "beta", 1, 64, &rp->lynx.beta)) ||
		    (ret = moem_spec_bool(&sp, "any", &rp->any_batch)))
			return ret;
		rp->lynx.alpha = (float)alpha;
		break;
	case MOEM_RP_OEA:
	case MOEM_RP_PIGGYBACK:
	case MOEM_RP_PRUNE:
		ret = moem_spec_u32(&sp, "k0", 1, top_k, &rp->k0);
		if (ret)
			return ret;
		break;
	default:
		break;
	}
	return moem_spec_done(&sp);
}

void moem_route_policy_format(const struct moem_route_policy *rp, char *buf, unsigned len)
{
	switch (rp->kind) {
	case MOEM_RP_LYNX:
		snprintf(buf, len, "lynx:alpha=%g,beta=%u%s", (double)rp->lynx.alpha, rp->lynx.beta,
			 rp->any_batch ? ",any=1" : "");
		break;
	case MOEM_RP_OEA:
	case MOEM_RP_PIGGYBACK:
	case MOEM_RP_PRUNE:
		snprintf(buf, len, "%s:k0=%u", kind_names[rp->kind], rp->k0);
		break;
	default:
		snprintf(buf, len, "%s", moem_route_kind_name(rp->kind));
		break;
	}
}

bool moem_route_policy_needs_logits(const struct moem_route_policy *rp)
{
	return rp->kind == MOEM_RP_LYNX || rp->kind == MOEM_RP_OEA ||
	       rp->kind == MOEM_RP_PIGGYBACK || rp->kind == MOEM_RP_PRUNE;
}

bool moem_route_policy_ordered(const struct moem_route_policy *rp)
{
	return rp->kind == MOEM_RP_CACHE_AWARE || rp->kind == MOEM_RP_PIGGYBACK;
}

int moem_route_policy_apply(const struct moem_route_policy *rp, const struct moem_route_cfg *c,
			    uint32_t B, const float *z, const uint8_t *pad, const uint8_t *resident,
			    bool memory_bound, struct moem_route_out *out)
{
	struct moem_route_cfg pc;
	int ret;

	switch (rp->kind) {
	case MOEM_RP_LYNX:
		if (memory_bound || rp->any_batch)
			return moem_route_lynx(c, &rp->lynx, B, z, pad, out);
		return moem_route_topk(c, B, z, pad, out);
	case MOEM_RP_OEA:
		return moem_route_oea(c, rp->k0, B, z, pad, NULL, out);
	case MOEM_RP_PIGGYBACK:
		return moem_route_oea(c, rp->k0, B, z, pad, resident, out);
	case MOEM_RP_PRUNE:
		/* top-k0 with the model's weight rule, written into k slots */
		if (!rp->k0 || rp->k0 > c->top_k)
			return moem_errf(EINVAL, "prune: k0 %u, want 1..k (%u)", rp->k0, c->top_k);
		ret = moem_route_oea(c, rp->k0, B, z, pad, NULL, out);
		if (ret)
			return ret;
		pc = *c;
		for (uint32_t t = 0; t < B; t++) {
			int32_t *ids = out->ids + (size_t)t * c->top_k;
			float *w = out->w + (size_t)t * c->top_k;

			if (out->cnt[t] > rp->k0)
				out->cnt[t] = rp->k0;
			for (uint32_t j = out->cnt[t]; j < c->top_k; j++) {
				ids[j] = -1;
				w[j] = 0;
			}
			moem_route_weights(&pc, z + (size_t)t * c->n_experts, ids, out->cnt[t], w);
		}
		return 0;
	default:
		return moem_route_topk(c, B, z, pad, out);
	}
}

uint32_t moem_route_exec_order(uint32_t n_experts, const uint8_t *active, const uint8_t *resident,
			       uint32_t *order, uint32_t *n_resident)
{
	uint32_t n = 0;

	for (uint32_t e = 0; e < n_experts; e++)
		if (active[e] && resident && resident[e])
			order[n++] = e;
	*n_resident = n;
	for (uint32_t e = 0; e < n_experts; e++)
		if (active[e] && !(resident && resident[e]))
			order[n++] = e;
	return n;
}
