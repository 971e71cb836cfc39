// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU routing: top-k, LYNX, OEA and the resident-set piggyback (route.h).
 * The arithmetic that decides a choice (bins, comparisons) is done in
 * float or in exact integer counts so the CUDA kernels can reproduce the
 * same choices; weights are computed in double and rounded once.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/route.h>

int moem_route_groups_check(const struct moem_route_cfg *c)
{
	if (!c->n_group && !c->topk_group)
		return 0;
	if (!c->n_group || c->n_group > MOEM_ROUTE_MAX_GROUPS || !c->n_experts ||
	    c->n_experts % c->n_group)
		return moem_errf(EINVAL, "n_group %u must divide the %u experts (at most %u)",
				 c->n_group, c->n_experts, MOEM_ROUTE_MAX_GROUPS);
	if (!c->topk_group || c->topk_group > c->n_group)
		return moem_errf(EINVAL, "topk_group %u, want 1..n_group (%u)", c->topk_group,
				 c->n_group);
	if ((uint64_t)c->topk_group * (c->n_experts / c->n_group) < c->top_k)
		return moem_errf(EINVAL,
				 "topk_group %u groups of %u experts hold fewer than top_k %u",
				 c->topk_group, c->n_experts / c->n_group, c->top_k);
	return 0;
}

static int check_cfg(const struct moem_route_cfg *c, uint32_t B)
{
	if (!c->n_experts || c->n_experts > 1024)
		return moem_errf(EINVAL, "route: %u experts, want 1..1024", c->n_experts);
	if (!c->top_k || c->top_k > c->n_experts || c->top_k > 64)
		return moem_errf(EINVAL, "route: top_k %u, want 1..min(64, N)", c->top_k);
	if (B > 65536)
		return moem_errf(EINVAL, "route: batch of %u tokens is too large", B);
	if (moem_route_groups_check(c))
		return moem_err_prefix(EINVAL, "route");
	return 0;
}

/* NaN logits rank below everything, so a corrupt row cannot win. */
static inline float clean(float v)
{
	return isnan(v) ? -INFINITY : v;
}

/*
 * Softmax over the N logits, then (norm) over the chosen. Normalised,
 * the softmax's denominator cancels: it is taken as 1 and only the cnt
 * chosen exps are computed, not N (at 128 experts and top-8 a sixteenth;
 * the routing of 64 tokens had been a third of the router's time). The
 * doubles differ from dividing twice in their last bits only, below a
 * float's rounding. cuda/route.cu's emit() does the same.
 */
void moem_route_weights(const struct moem_route_cfg *c, const float *z, const int32_t *ids,
			uint32_t cnt, float *w)
{
	double m = -INFINITY, sum = 0, chosen = 0, p[64];
	float scale;
	bool norm;

	if (!cnt)
		return;
	moem_route_rule_flat(c, &norm, &scale);
	for (uint32_t e = 0; e < c->n_experts; e++)
		m = fmax(m, clean(z[e]));
	if (norm)
		sum = 1;
	else
		for (uint32_t e = 0; e < c->n_experts; e++)
			sum += exp(clean(z[e]) - m);
	for (uint32_t j = 0; j < cnt; j++) {
		p[j] = exp(clean(z[ids[j]]) - m) / sum;
		chosen += p[j];
	}
	for (uint32_t j = 0; j < cnt; j++) {
		double v = p[j];

		if (norm && chosen > 0)
			v /= chosen;
		w[j] = (float)(v * scale);
	}
}

/*
 * Insert candidate e with primary score a and secondary score b into the
 * sorted list (best first) of at most cap entries: higher a, then higher
 * b, then lower id wins.
 */
struct cand {
	double a;
	float b;
	int32_t e;
};

static inline int cand_better(const struct cand *x, const struct cand *y)
{
	if (x->a != y->a)
		return x->a > y->a;
	if (x->b != y->b)
		return x->b > y->b;
	return x->e < y->e;
}

static void cand_insert(struct cand *list, uint32_t *n, uint32_t cap, struct cand c)
{
	uint32_t i;

	if (*n == cap && !cand_better(&c, &list[cap - 1]))
		return;
	i = *n < cap ? (*n)++ : cap - 1;
	while (i > 0 && cand_better(&c, &list[i - 1])) {
		list[i] = list[i - 1];
		i--;
	}
	list[i] = c;
}

static void emit(const struct moem_route_cfg *c, const float *zr, const struct cand *list,
		 uint32_t n, uint32_t t, struct moem_route_out *out)
{
	int32_t *ids = out->ids + (size_t)t * c->top_k;
	float *w = out->w + (size_t)t * c->top_k;

	for (uint32_t j = 0; j < c->top_k; j++) {
		ids[j] = j < n ? list[j].e : -1;
		w[j] = 0;
	}
	out->cnt[t] = n;
	moem_route_weights(c, zr, ids, n, w);
}

static void emit_empty(const struct moem_route_cfg *c, uint32_t t, struct moem_route_out *out)
{
	for (uint32_t j = 0; j < c->top_k; j++) {
		out->ids[(size_t)t * c->top_k + j] = -1;
		out->w[(size_t)t * c->top_k + j] = 0;
	}
	out->cnt[t] = 0;
}

uint64_t moem_route_groups(const struct moem_route_cfg *c, const float *zr)
{
	struct cand best[MOEM_ROUTE_MAX_GROUPS];
	uint32_t gs, n = 0;
	uint64_t m = 0;

	if (!moem_route_grouped(c))
		return ~0ULL;
	gs = c->n_experts / c->n_group;
	for (uint32_t g = 0; g < c->n_group; g++) {
		struct cand x = {-INFINITY, 0, (int32_t)g};

		for (uint32_t e = g * gs; e < (g + 1) * gs; e++)
			x.a = fmax(x.a, clean(zr[e]));
		cand_insert(best, &n, c->topk_group, x);
	}
	for (uint32_t j = 0; j < n; j++)
		m |= 1ULL << best[j].e;
	return m;
}

/* Expert e is in one of the groups of mask gm. */
static inline bool in_groups(const struct moem_route_cfg *c, uint64_t gm, uint32_t e)
{
	return !moem_route_grouped(c) || (gm >> (e / (c->n_experts / c->n_group)) & 1);
}

/*
 * Top-cap experts of row zr by logit, within the token's groups gm
 * (moem_route_groups()), optionally restricted to mask.
 */
static uint32_t row_topk(const struct moem_route_cfg *c, const float *zr, uint64_t gm,
			 const uint8_t *mask, uint32_t cap, struct cand *list)
{
	uint32_t n = 0;

	for (uint32_t e = 0; e < c->n_experts; e++) {
		struct cand x = {clean(zr[e]), 0, (int32_t)e};

		if ((!mask || mask[e]) && in_groups(c, gm, e))
			cand_insert(list, &n, cap, x);
	}
	return n;
}

int moem_route_topk(const struct moem_route_cfg *c, uint32_t B, const float *z, const uint8_t *pad,
		    struct moem_route_out *out)
{
	struct cand list[64];
	int ret = check_cfg(c, B);

	if (ret)
		return ret;
	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * c->n_experts;

		if (pad && pad[t]) {
			emit_empty(c, t, out);
			continue;
		}
		emit(c, zr, list, row_topk(c, zr, moem_route_groups(c, zr), NULL, c->top_k, list),
		     t, out);
	}
	return 0;
}

/* T of vanilla top-k routing, without writing any output. */
static uint32_t lynx_vanilla_t(const struct moem_route_cfg *c, uint32_t B, const float *z,
			       const uint8_t *pad)
{
	uint8_t seen[1024] = {0};
	struct cand list[64];
	uint32_t T = 0;

	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * c->n_experts;
		uint32_t n;

		if (pad && pad[t])
			continue;
		n = row_topk(c, zr, moem_route_groups(c, zr), NULL, c->top_k, list);
		for (uint32_t j = 0; j < n; j++)
			if (!seen[list[j].e]) {
				seen[list[j].e] = 1;
				T++;
			}
	}
	return T;
}

int moem_route_lynx(const struct moem_route_cfg *c, const struct moem_lynx_params *p, uint32_t B,
		    const float *z, const uint8_t *pad, struct moem_route_out *out)
{
	const uint32_t N = c->n_experts;
	uint32_t *votes = NULL, nreal = 0;
	int8_t *bin = NULL;
	double *S = NULL, base;
	struct cand list[64];
	int ret = check_cfg(c, B);

	if (ret)
		return ret;
	if (!(p->alpha > 0 && p->alpha <= 64) || !p->beta || p->beta > 64)
		return moem_errf(EINVAL, "lynx: alpha %g / beta %u out of range (0, 64] / 1..64",
				 (double)p->alpha, p->beta);
	bin = malloc((size_t)B * N);
	votes = calloc((size_t)N * (p->beta + 1), sizeof(*votes));
	S = calloc(N, sizeof(*S));
	if (!bin || !votes || !S) {
		ret = -ENOMEM;
		goto out;
	}
	/* Token-wise binning, and per-(expert, bin) vote counts. */
	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * N;
		float m = -INFINITY;

		if (pad && pad[t])
			continue;
		nreal++;
		for (uint32_t e = 0; e < N; e++)
			m = fmaxf(m, clean(zr[e]));
		for (uint32_t e = 0; e < N; e++) {
			float q = ceilf(p->alpha * (clean(zr[e]) - m));
			int b = isfinite(q) && q > -(float)p->beta ? (int)q : -(int)p->beta;

			bin[(size_t)t * N + e] = (int8_t)b;
			votes[(size_t)e * (p->beta + 1) + (uint32_t)(-b)]++;
		}
	}
	/* S[e] = sum_q votes[e][q] * B^-q, summed in a fixed order. */
	base = nreal ? (double)nreal : 1.0;
	for (uint32_t e = 0; e < N; e++) {
		double s = 0, scale = 1.0;

		for (uint32_t q = 0; q <= p->beta; q++, scale /= base)
			s += votes[(size_t)e * (p->beta + 1) + q] * scale;
		S[e] = s;
	}
	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * N;
		struct cand top1 = {-INFINITY, 0, 0}, x;
		uint64_t gm;
		uint32_t n = 0;

		if (pad && pad[t]) {
			emit_empty(c, t, out);
			continue;
		}
		gm = moem_route_groups(c, zr);
		row_topk(c, zr, gm, NULL, 1, &top1);
		list[0] = top1;
		/* Slot 0 stays the token's own top-1; slots 1..k-1 compete by key,
		 * then by the token's own logit, then by lower id, within the
		 * token's groups. */
		for (uint32_t e = 0; c->top_k > 1 && e < N; e++) {
			if ((int32_t)e == top1.e || !in_groups(c, gm, e))
				continue;
			x.a = bin[(size_t)t * N + e] + S[e] / (base + 1.0);
			x.b = clean(zr[e]);
			x.e = (int32_t)e;
			cand_insert(list + 1, &n, c->top_k - 1, x);
		}
		emit(c, zr, list, n + 1, t, out);
	}
	/*
	 * moem deviation (Documentation/policies.md): the key above does not
	 * guarantee T(lynx) <= T(vanilla) on every batch (rare adversarial
	 * cases activate one more expert). LYNX exists to lower T, so such a
	 * batch is routed normally instead; the invariant then holds exactly.
	 */
	if (moem_route_active(c, B, out, NULL) > lynx_vanilla_t(c, B, z, pad))
		ret = moem_route_topk(c, B, z, pad, out);
out:
	free(bin);
	free(votes);
	free(S);
	return ret;
}

int moem_route_oea(const struct moem_route_cfg *c, uint32_t k0, uint32_t B, const float *z,
		   const uint8_t *pad, const uint8_t *extra, struct moem_route_out *out)
{
	const uint32_t N = c->n_experts;
	struct cand list[64];
	uint8_t *base;
	int ret = check_cfg(c, B);

	if (ret)
		return ret;
	if (!k0 || k0 > c->top_k)
		return moem_errf(EINVAL, "oea: k0 %u, want 1..k (%u)", k0, c->top_k);
	base = calloc(N, 1);
	if (!base)
		return -ENOMEM;
	if (extra)
		for (uint32_t e = 0; e < N; e++)
			base[e] = extra[e] != 0;
	/* Phase 1: S_base = union of top-k0. */
	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * N;
		uint32_t n;

		if (pad && pad[t])
			continue;
		n = row_topk(c, zr, moem_route_groups(c, zr), NULL, k0, list);
		for (uint32_t j = 0; j < n; j++)
			base[list[j].e] = 1;
	}
	/* Phase 2: top-k masked to S_base (own top-k0 rank first by logit). */
	for (uint32_t t = 0; t < B; t++) {
		const float *zr = z + (size_t)t * N;

		if (pad && pad[t]) {
			emit_empty(c, t, out);
			continue;
		}
		emit(c, zr, list, row_topk(c, zr, moem_route_groups(c, zr), base, c->top_k, list),
		     t, out);
	}
	free(base);
	return 0;
}

uint32_t moem_route_active(const struct moem_route_cfg *c, uint32_t B,
			   const struct moem_route_out *out, uint8_t *active)
{
	uint8_t local[1024];
	uint8_t *a = active ? active : local;
	uint32_t T = 0;

	memset(a, 0, c->n_experts);
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t j = 0; j < out->cnt[t]; j++) {
			int32_t e = out->ids[(size_t)t * c->top_k + j];

			if (e >= 0 && (uint32_t)e < c->n_experts && !a[e]) {
				a[e] = 1;
				T++;
			}
		}
	return T;
}
