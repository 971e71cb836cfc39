// SPDX-License-Identifier: GPL-2.0-only
/*
 * ExpertFlow prefetch: adaptive horizon and a learned predictor
 * (policy_prefetch.h). Vectors over a layer's experts are "expected
 * counts": how many of the batch's tokens pick each expert; a
 * probability of activation follows as q = 1 - exp(-v) (Poisson).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

#define MAXT	    256	       /* tokens per batch kept for statistics */
#define TABLE_MAX   (1u << 24) /* L * N * N entries */
#define PRIOR	    1.0f       /* pseudo-tokens of frequency prior per row */
#define ROW_CAP	    4096.0f    /* halve a row past this many pairs (drift) */
#define FREQ_DECAY  0.98f
#define RECALL_EMA  0.05
#define FREQ_WEIGHT 0.05
#define NONE64	    UINT64_MAX
#define PG_DIST	    8 /* pre-gate recall is kept per distance up to this */

struct moem_prefetch {
	struct moem_prefetch_cfg c;
	uint32_t L, N, K;
	bool tables;
	float *C, *Rc;	    /* [L][N][N], [L][N]: layer m -> m + 1 (L-1 -> 0, next step) */
	float *T, *Rt;	    /* same layer, next step */
	float *freq, *fsum; /* [L][N], [L] */
	int16_t *sets;	    /* [L][MAXT][K]: last observed sets */
	uint32_t *ntok;	    /* [L] */
	uint64_t *obs_pos;  /* [L] */
	float *vt;	    /* [L][N]: temporal prediction of the next occurrence */
	float *vp;	    /* [L][N]: persistence prediction of the next occurrence */
	float *rho;	    /* [L]: fraction of a token's experts kept to its next step */
	float *pg;	    /* [L][N] pre-gate counts */
	uint64_t *pg_pos;   /* [L] */
	uint8_t *pg_dist;   /* [L] layers between the pre-gate's source and its target */
	uint64_t last_pos;
	double r_chain, r_temp, r_pers, r_pg[PG_DIST + 1]; /* pre-gate recall by distance */
	int32_t delta;
	uint32_t stall_cnt, over_cnt;
	double bw, lns, xfer, ne;
	uint64_t planned_upto;
	bool planned_any;
	float *chainv; /* [hops + 1][N] */
	float *v, *tmp, *q;
	float *fh; /* [N] scratch: fhat() of one layer */
	uint32_t *idx;
};

void moem_prefetch_default(struct moem_prefetch_cfg *c, uint32_t n_layers, uint32_t n_experts,
			   uint32_t top_k)
{
	memset(c, 0, sizeof(*c));
	c->n_layers = n_layers;
	c->n_experts = n_experts;
	c->top_k = top_k;
	c->adaptive = true;
	c->t_stall = 4;
	c->t_over = 32;
	c->cum = 0.9;
	c->bw_alpha = 0.2;
	c->q_min = 0.05;
	c->hops = 4;
}

int moem_prefetch_parse(const char *spec, struct moem_prefetch_cfg *c)
{
	struct moem_spec sp;
	int ret;

	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	if (!strcmp(sp.name, "none"))
		return sp.n ? moem_errf(EINVAL, "prefetch none takes no parameters") : -ENOENT;
	if (strcmp(sp.name, "adaptive") && strcmp(sp.name, "fixed"))
		return moem_errf(EINVAL, "prefetch policy '%s': unknown (none, adaptive, fixed)",
				 sp.name);
	c->adaptive = !strcmp(sp.name, "adaptive");
	c->S = c->adaptive ? 0 : 4;
	if ((ret = moem_spec_u32(&sp, "S", c->adaptive ? 0 : 1, 255, &c->S)) ||
	    (ret = moem_spec_f64(&sp, "cum", 0.01, 1.0, &c->cum)) ||
	    (ret = moem_spec_u32(&sp, "stall", 1, 1u << 20, &c->t_stall)) ||
	    (ret = moem_spec_u32(&sp, "over", 1, 1u << 20, &c->t_over)) ||
	    (ret = moem_spec_f64(&sp, "qmin", 0.0, 1.0, &c->q_min)) ||
	    (ret = moem_spec_u32(&sp, "hops", 0, 16, &c->hops)) ||
	    (ret = moem_spec_u32(&sp, "max", 0, 1024, &c->max_per_layer)))
		return ret;
	return moem_spec_done(&sp);
}

void moem_prefetch_format(const struct moem_prefetch_cfg *c, char *buf, unsigned len)
{
	int n;

	if (c->adaptive && !c->S)
		n = snprintf(buf, len, "adaptive");
	else
		n = snprintf(buf, len, "%s:S=%u", c->adaptive ? "adaptive" : "fixed", c->S);
	if (n > 0 && (unsigned)n < len && c->q_min != 0.05)
		snprintf(buf + n, len - (unsigned)n, "%sqmin=%g", strchr(buf, ':') ? "," : ":",
			 c->q_min);
}

int moem_prefetch_create(const struct moem_prefetch_cfg *c, struct moem_prefetch **out)
{
	const size_t L = c->n_layers, N = c->n_experts, K = c->top_k;
	struct moem_prefetch *pf;

	if (!L || L > 256 || N < 2 || N > 1024 || !K || K > N || K > 64)
		return moem_errf(EINVAL, "prefetch: shape %zu x %zu, top-%zu out of range", L, N,
				 K);
	if (!c->adaptive && (!c->S || c->S > 255))
		return moem_errf(EINVAL, "prefetch: fixed S must be 1..255");
	if (!(c->cum > 0 && c->cum <= 1) || !(c->q_min >= 0 && c->q_min <= 1) ||
	    !(c->bw_alpha > 0 && c->bw_alpha <= 1) || !c->t_stall || !c->t_over || c->hops > 16)
		return moem_errf(EINVAL, "prefetch: parameter out of range");
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return -ENOMEM;
	pf->c = *c;
	pf->L = (uint32_t)L;
	pf->N = (uint32_t)N;
	pf->K = (uint32_t)K;
	pf->tables = L * N * N <= TABLE_MAX;
	if (pf->tables) {
		pf->C = calloc(L * N * N, sizeof(float));
		pf->T = calloc(L * N * N, sizeof(float));
		pf->Rc = calloc(L * N, sizeof(float));
		pf->Rt = calloc(L * N, sizeof(float));
	}
	pf->freq = calloc(L * N, sizeof(float));
	pf->fsum = calloc(L, sizeof(float));
	pf->sets = malloc(L * MAXT * K * sizeof(int16_t));
	pf->ntok = calloc(L, sizeof(uint32_t));
	pf->obs_pos = malloc(L * sizeof(uint64_t));
	pf->vt = calloc(L * N, sizeof(float));
	pf->vp = calloc(L * N, sizeof(float));
	pf->rho = calloc(L, sizeof(float));
	pf->pg = calloc(L * N, sizeof(float));
	pf->pg_pos = malloc(L * sizeof(uint64_t));
	pf->pg_dist = calloc(L, 1);
	pf->chainv = calloc((c->hops + 1) * N, sizeof(float));
	pf->v = malloc(N * sizeof(float));
	pf->tmp = malloc(N * sizeof(float));
	pf->q = malloc(N * sizeof(float));
	pf->fh = malloc(N * sizeof(float));
	pf->idx = malloc(N * sizeof(uint32_t));
	if ((pf->tables && (!pf->C || !pf->T || !pf->Rc || !pf->Rt)) || !pf->freq || !pf->fsum ||
	    !pf->sets || !pf->ntok || !pf->obs_pos || !pf->vt || !pf->vp || !pf->rho || !pf->pg ||
	    !pf->pg_pos || !pf->pg_dist || !pf->chainv || !pf->v || !pf->tmp || !pf->q || !pf->fh ||
	    !pf->idx) {
		moem_prefetch_destroy(pf);
		return -ENOMEM;
	}
	for (size_t l = 0; l < L; l++)
		pf->obs_pos[l] = pf->pg_pos[l] = NONE64;
	pf->last_pos = NONE64;
	pf->r_chain = pf->r_temp = pf->r_pers = 0.5;
	for (int d = 0; d <= PG_DIST; d++)
		pf->r_pg[d] = 0.5;
	for (size_t l = 0; l < L; l++)
		pf->rho[l] = 0.5f;
	pf->bw = c->bw_bytes_per_ns;
	pf->lns = (double)c->layer_ns;
	pf->xfer = 1.0;
	pf->ne = 0;
	*out = pf;
	return 0;
}

void moem_prefetch_destroy(struct moem_prefetch *pf)
{
	if (!pf)
		return;
	free(pf->C);
	free(pf->T);
	free(pf->Rc);
	free(pf->Rt);
	free(pf->freq);
	free(pf->fsum);
	free(pf->sets);
	free(pf->ntok);
	free(pf->obs_pos);
	free(pf->vt);
	free(pf->vp);
	free(pf->rho);
	free(pf->pg);
	free(pf->pg_pos);
	free(pf->pg_dist);
	free(pf->chainv);
	free(pf->v);
	free(pf->tmp);
	free(pf->q);
	free(pf->fh);
	free(pf->idx);
	free(pf);
}

static int16_t *set_of(struct moem_prefetch *pf, uint32_t m, uint32_t t)
{
	return pf->sets + ((size_t)m * MAXT + t) * pf->K;
}

/* Normalised frequency of layer m (uniform before any observation). */
static float fhat(const struct moem_prefetch *pf, uint32_t m, uint32_t e)
{
	float s = pf->fsum[m];

	return s > 0 ? pf->freq[(size_t)m * pf->N + e] / s : 1.0f / pf->N;
}

/* fhat(m, e) for every e into pf->fh: the loops below take it N times a token. */
static const float *fhat_row(struct moem_prefetch *pf, uint32_t m)
{
	for (uint32_t e = 0; e < pf->N; e++)
		pf->fh[e] = fhat(pf, m, e);
	return pf->fh;
}

/*
 * out = in through table X (rows of layer m, towards layer `to`):
 * P(e'|e) = (X[e][e'] + PRIOR * K * fhat(to, e')) / (R[e] + PRIOR * K).
 */
static void propagate(struct moem_prefetch *pf, const float *X, const float *R, uint32_t m,
		      uint32_t to, const float *in, float *out)
{
	const uint32_t N = pf->N;
	const float pk = PRIOR * pf->K;
	const float *fh = fhat_row(pf, to);
	double prior_mass = 0;

	memset(out, 0, N * sizeof(float));
	for (uint32_t e = 0; e < N; e++) {
		float a;

		if (in[e] <= 0)
			continue;
		if (!pf->tables) {
			prior_mass += in[e];
			continue;
		}
		a = in[e] / (R[(size_t)m * N + e] + pk);
		prior_mass += (double)a * pk;
		{
			const float *row = X + ((size_t)m * N + e) * N;

			for (uint32_t f = 0; f < N; f++)
				out[f] += a * row[f];
		}
	}
	for (uint32_t f = 0; f < N; f++)
		out[f] += (float)(prior_mass * fh[f]);
}

/*
 * Per token, noisy-OR over its experts e of P(e' next | e) =
 * K * (X[e][e'] + PRIOR * K * fhat(to, e')) / (R[e] + PRIOR * K), summed
 * over tokens: the expected number of the batch's tokens that pick e'
 * (layer m's last observed sets through table X, towards layer `to`).
 * Averaging the rows instead would dilute a strong pair (an expert that
 * persists) by 1/K against the background.
 */
static void noisy_or(struct moem_prefetch *pf, const float *X, const float *R, uint32_t m,
		     uint32_t to, float *out)
{
	const uint32_t N = pf->N, K = pf->K;
	const float pk = PRIOR * K;
	float *miss = pf->q; /* scratch: product of (1 - p) for one token */
	const float *fh = fhat_row(pf, to);

	memset(out, 0, N * sizeof(float));
	for (uint32_t t = 0; t < pf->ntok[m]; t++) {
		const int16_t *set = set_of(pf, m, t);

		for (uint32_t f = 0; f < N; f++)
			miss[f] = 1.0f;
		for (uint32_t j = 0; j < K && set[j] >= 0; j++) {
			const float *row = pf->tables ? X + ((size_t)m * N + set[j]) * N : NULL;
			float a = pf->tables ? K / (R[(size_t)m * N + set[j]] + pk) : 0.0f;

			for (uint32_t f = 0; f < N; f++) {
				float p = pf->tables ? a * (row[f] + pk * fh[f]) : K * fh[f];

				miss[f] *= p >= 1.0f ? 0.0f : 1.0f - p;
			}
		}
		for (uint32_t f = 0; f < N; f++)
			out[f] += 1.0f - miss[f];
	}
}

static int cmp_desc(const void *a, const void *b, void *arg)
{
	const float *q = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (q[x] != q[y])
		return q[x] > q[y] ? -1 : 1;
	return x < y ? -1 : 1;
}

/*
 * Choose experts from expected counts v: by probability, descending,
 * until the cumulative normalised probability reaches cum; only those with
 * q >= q_min, at most max. Writes indices to pf->idx (and q to pf->q).
 */
static uint32_t choose(struct moem_prefetch *pf, const float *v)
{
	const uint32_t N = pf->N, max = pf->c.max_per_layer ? pf->c.max_per_layer : N;
	double tot = 0, acc = 0;
	uint32_t n = 0;

	for (uint32_t e = 0; e < N; e++) {
		pf->q[e] = v[e] > 0 ? (float)(1.0 - exp(-(double)v[e])) : 0.0f;
		tot += pf->q[e];
		pf->idx[e] = e;
	}
	if (!(tot > 0))
		return 0;
	qsort_r(pf->idx, N, sizeof(uint32_t), cmp_desc, pf->q);
	while (n < max && n < N && acc < pf->c.cum * tot && pf->q[pf->idx[n]] >= pf->c.q_min &&
	       pf->q[pf->idx[n]] > 0) {
		acc += pf->q[pf->idx[n]];
		n++;
	}
	return n;
}

/*
 * Accuracy of v against actual ([N] counts): of the |actual| experts v
 * ranks highest, the fraction that were used (recall at the true set
 * size, so predicting everything scores no better than chance).
 */
static double recall(struct moem_prefetch *pf, const float *v, const float *actual)
{
	uint32_t hit = 0, tot = 0;

	for (uint32_t e = 0; e < pf->N; e++) {
		tot += actual[e] > 0;
		pf->q[e] = v[e];
		pf->idx[e] = e;
	}
	if (!tot)
		return 0.0;
	/*
	 * Only which experts rank in the first tot counts, not their order:
	 * a selection, not a sort (this runs for every source at every layer;
	 * the sort was most of the predictor's time). cmp_desc is a strict
	 * total order, so the set is the one the sort gave.
	 */
	moem_select_top(pf->idx, pf->N, tot, pf->q);
	for (uint32_t i = 0; i < tot; i++)
		hit += actual[pf->idx[i]] > 0;
	return (double)hit / tot;
}

static void pair_update(struct moem_prefetch *pf, float *X, float *R, uint32_t m, const int16_t *a,
			const int16_t *b)
{
	const uint32_t N = pf->N;

	for (uint32_t i = 0; i < pf->K && a[i] >= 0; i++) {
		float *row = X + ((size_t)m * N + a[i]) * N;
		float *r = R + (size_t)m * N + a[i];

		if (*r > ROW_CAP) {
			for (uint32_t f = 0; f < N; f++)
				row[f] *= 0.5f;
			*r *= 0.5f;
		}
		for (uint32_t j = 0; j < pf->K && b[j] >= 0; j++) {
			row[b[j]] += 1.0f;
			*r += 1.0f;
		}
	}
}

int moem_prefetch_observe(struct moem_prefetch *pf, uint64_t pos, uint32_t tokens,
			  const int32_t *ids)
{
	const uint32_t L = pf->L, N = pf->N, K = pf->K, m = (uint32_t)(pos % L);
	const uint32_t prev = (m + L - 1) % L, nt = tokens < MAXT ? tokens : MAXT;
	const bool chained = pf->last_pos != NONE64 && pf->last_pos + 1 == pos;
	const bool temporal = pf->obs_pos[m] != NONE64 && pf->obs_pos[m] + L == pos;
	float *actual = pf->tmp;
	int16_t cur[MAXT * 64];

	if (pf->last_pos != NONE64 && pos <= pf->last_pos)
		return moem_errf(EINVAL, "prefetch: tick %llu after %llu", (unsigned long long)pos,
				 (unsigned long long)pf->last_pos);
	memset(actual, 0, N * sizeof(float));
	for (uint32_t t = 0; t < nt; t++)
		for (uint32_t j = 0; j < K; j++) {
			int32_t e = ids[(size_t)t * K + j];

			cur[t * K + j] = e >= 0 && (uint32_t)e < N ? (int16_t)e : -1;
			if (cur[t * K + j] >= 0)
				actual[e] += 1.0f;
		}
	/* How well each source would have predicted this layer at distance 1. */
	if (chained) {
		noisy_or(pf, pf->C, pf->Rc, prev, m, pf->v);
		pf->r_chain += RECALL_EMA * (recall(pf, pf->v, actual) - pf->r_chain);
	}
	if (pf->obs_pos[m] != NONE64) {
		pf->r_temp +=
			RECALL_EMA * (recall(pf, pf->vt + (size_t)m * N, actual) - pf->r_temp);
		pf->r_pers +=
			RECALL_EMA * (recall(pf, pf->vp + (size_t)m * N, actual) - pf->r_pers);
	}
	/* persistence: how many of a token's experts it kept from its last step */
	if (temporal) {
		uint32_t kept = 0, had = 0;

		for (uint32_t t = 0; t < nt && t < pf->ntok[m]; t++) {
			const int16_t *old = set_of(pf, m, t);

			for (uint32_t i = 0; i < K && old[i] >= 0; i++) {
				had++;
				for (uint32_t j = 0; j < K; j++)
					kept += cur[t * K + j] == old[i];
			}
		}
		if (had)
			pf->rho[m] += (float)(RECALL_EMA * ((double)kept / had - pf->rho[m]));
	}
	if (pf->pg_pos[m] == pos) {
		double *r = &pf->r_pg[pf->pg_dist[m]];

		*r += RECALL_EMA * (recall(pf, pf->pg + (size_t)m * N, actual) - *r);
	}
	/* Learn. */
	for (uint32_t t = 0; pf->tables && t < nt; t++) {
		if (chained && t < pf->ntok[prev])
			pair_update(pf, pf->C, pf->Rc, prev, set_of(pf, prev, t), cur + t * K);
		if (temporal && t < pf->ntok[m])
			pair_update(pf, pf->T, pf->Rt, m, set_of(pf, m, t), cur + t * K);
	}
	pf->fsum[m] = 0;
	for (uint32_t e = 0; e < N; e++) {
		float *f = pf->freq + (size_t)m * N + e;

		*f = *f * FREQ_DECAY + actual[e];
		pf->fsum[m] += *f;
	}
	/* cur[0 .. nt*K) was filled above */
	if (nt)
		// cppcheck-suppress uninitvar
		memcpy(set_of(pf, m, 0), cur, (size_t)nt * K * sizeof(int16_t));
	pf->ntok[m] = nt;
	pf->obs_pos[m] = pos;
	pf->last_pos = pos;
	/* Predictions of this layer's next occurrence (fixed until then). */
	noisy_or(pf, pf->T, pf->Rt, m, m, pf->vt + (size_t)m * N);
	{
		float mass = 0, *vp = pf->vp + (size_t)m * N;

		for (uint32_t e = 0; e < N; e++)
			mass += actual[e];
		/* a token keeps each expert with probability rho, else draws by frequency */
		for (uint32_t e = 0; e < N; e++)
			vp[e] = pf->rho[m] * actual[e] + (1 - pf->rho[m]) * mass * fhat(pf, m, e);
	}
	return 0;
}

void moem_prefetch_pregate(struct moem_prefetch *pf, uint64_t target_pos, const float *prob)
{
	uint32_t m = (uint32_t)(target_pos % pf->L);
	float *dst = pf->pg + (size_t)m * pf->N;
	uint64_t d;

	for (uint32_t e = 0; e < pf->N; e++) {
		double q = prob[e] < 0 ? 0 : prob[e] > 0.999f ? 0.999 : prob[e];

		dst[e] = (float)-log1p(-q);
	}
	pf->pg_pos[m] = target_pos;
	/* the source is the newest observed layer (its input gave the pre-gate) */
	d = pf->last_pos != NONE64 && target_pos > pf->last_pos ? target_pos - pf->last_pos : 1;
	pf->pg_dist[m] = (uint8_t)(d > PG_DIST ? PG_DIST : d);
}

void moem_prefetch_transfer(struct moem_prefetch *pf, uint64_t bytes, uint64_t ns)
{
	double s;

	if (!ns || !bytes)
		return;
	s = (double)bytes / (double)ns;
	pf->bw = pf->bw > 0 ? pf->bw + pf->c.bw_alpha * (s - pf->bw) : s;
}

void moem_prefetch_layer_time(struct moem_prefetch *pf, uint64_t ns)
{
	if (!ns)
		return;
	pf->lns = pf->lns > 0 ? pf->lns + pf->c.bw_alpha * ((double)ns - pf->lns) : (double)ns;
}

void moem_prefetch_issued(struct moem_prefetch *pf, uint32_t planned, uint32_t fetched)
{
	if (!planned)
		return;
	pf->xfer += pf->c.bw_alpha * ((double)fetched / planned - pf->xfer);
}

/* The horizon before feedback: the formula, or the configured start. */
static int32_t base_S(const struct moem_prefetch *pf)
{
	double s;

	if (!pf->c.adaptive || pf->c.S)
		return (int32_t)pf->c.S;
	if (!(pf->bw > 0) || !(pf->lns > 0) || !pf->c.expert_bytes)
		return 1;
	/* (the small slack keeps an EWMA converging on an integer from rounding up) */
	s = ceil(pf->ne * (double)pf->c.expert_bytes * pf->xfer / (pf->bw * pf->lns) - 1e-6);
	return s > 1024 ? 1024 : (int32_t)s;
}

static uint32_t clamp_S(const struct moem_prefetch *pf, int64_t s)
{
	int64_t hi = pf->L > 1 ? pf->L - 1 : 1;

	return (uint32_t)(s < 1 ? 1 : s > hi ? hi : s);
}

uint32_t moem_prefetch_horizon(const struct moem_prefetch *pf)
{
	return clamp_S(pf, (int64_t)base_S(pf) + (pf->c.adaptive ? pf->delta : 0));
}

void moem_prefetch_stall(struct moem_prefetch *pf)
{
	if (!pf->c.adaptive || ++pf->stall_cnt < pf->c.t_stall)
		return;
	/* Only move delta while it moves S: no wind-up against the clamp. */
	if (moem_prefetch_horizon(pf) < clamp_S(pf, INT32_MAX))
		pf->delta++;
	pf->stall_cnt = pf->over_cnt = 0;
}

void moem_prefetch_early(struct moem_prefetch *pf)
{
	if (!pf->c.adaptive || ++pf->over_cnt < pf->c.t_over)
		return;
	if (moem_prefetch_horizon(pf) > 1)
		pf->delta--;
	pf->stall_cnt = pf->over_cnt = 0;
}

/* Mixture prediction (expected counts) for tick p at distance d from the last observation. */
static void mix(struct moem_prefetch *pf, uint64_t p, uint32_t d, float *out)
{
	const uint32_t N = pf->N, m = (uint32_t)(p % pf->L),
		       last = (uint32_t)(pf->last_pos % pf->L);
	double w[5] = {0}, wsum = 0;
	const float *src[5] = {NULL};
	float mass = 0;

	for (uint32_t t = 0; t < pf->ntok[last]; t++)
		for (uint32_t j = 0; j < pf->K && set_of(pf, last, t)[j] >= 0; j++)
			mass += 1.0f;
	if (d <= pf->c.hops && d >= 1) {
		src[0] = pf->chainv + (size_t)d * N;
		w[0] = pow(pf->r_chain, d);
	}
	if (pf->obs_pos[m] != NONE64) {
		src[1] = pf->vt + (size_t)m * N;
		w[1] = pf->r_temp;
		src[2] = pf->vp + (size_t)m * N;
		w[2] = pf->r_pers;
	}
	if (pf->pg_pos[m] == p) {
		src[3] = pf->pg + (size_t)m * N;
		w[3] = pf->r_pg[pf->pg_dist[m]];
	}
	/*
	 * Sharpen the weights (recall^8): a source that predicts clearly better
	 * should dominate, not be averaged with the others.
	 */
	for (int s = 0; s < 4; s++) {
		w[s] = src[s] ? pow(w[s], 8) : 0;
		wsum += w[s];
	}
	w[4] = FREQ_WEIGHT * (wsum > 0 ? wsum : 1);
	wsum += w[4];
	/* every source is in expected counts already: a convex combination */
	for (uint32_t e = 0; e < N; e++)
		out[e] = (float)(w[4] / wsum * mass * fhat(pf, m, e));
	for (int s = 0; s < 4; s++) {
		if (!src[s] || !(w[s] > 0))
			continue;
		for (uint32_t e = 0; e < N; e++)
			out[e] += (float)(w[s] / wsum * src[s][e]);
	}
}

/* chainv[d] for d = 1..hops from the last observed layer. */
static void chain_from_last(struct moem_prefetch *pf)
{
	const uint32_t L = pf->L, N = pf->N, m = (uint32_t)(pf->last_pos % L);

	if (!pf->c.hops)
		return;
	/* first hop per token; further hops propagate the batch's expected counts */
	noisy_or(pf, pf->C, pf->Rc, m, (m + 1) % L, pf->chainv + N);
	for (uint32_t d = 2; d <= pf->c.hops; d++) {
		uint32_t from = (m + d - 1) % L;

		propagate(pf, pf->C, pf->Rc, from, (from + 1) % L, pf->chainv + (size_t)(d - 1) * N,
			  pf->chainv + (size_t)d * N);
	}
}

uint32_t moem_prefetch_plan(struct moem_prefetch *pf, uint64_t pos, struct moem_prefetch_req *req,
			    uint32_t cap)
{
	uint32_t S, n = 0;

	if (pf->last_pos == NONE64 || pos < pf->last_pos)
		return 0;
	chain_from_last(pf);
	/* N_e for the next layer sets the formula's horizon. */
	mix(pf, pf->last_pos + 1, 1, pf->v);
	pf->ne += pf->c.bw_alpha * ((double)choose(pf, pf->v) - pf->ne);
	S = moem_prefetch_horizon(pf);
	for (uint32_t d = 1; d <= S && n < cap; d++) {
		uint64_t p = pos + d;
		uint32_t k;

		if (pf->planned_any && p <= pf->planned_upto && p - pf->last_pos > pf->c.hops)
			continue;
		mix(pf, p, (uint32_t)(p - pf->last_pos), pf->v);
		k = choose(pf, pf->v);
		for (uint32_t i = 0; i < k && n < cap; i++) {
			req[n].pos = p;
			req[n].layer = (uint32_t)(p % pf->L);
			req[n].expert = pf->idx[i];
			req[n].prob = pf->q[pf->idx[i]];
			n++;
		}
	}
	if (!pf->planned_any || pos + S > pf->planned_upto)
		pf->planned_upto = pos + S;
	pf->planned_any = true;
	return n;
}

int moem_prefetch_predict(struct moem_prefetch *pf, uint64_t target_pos, float *prob)
{
	if (pf->last_pos == NONE64 || target_pos <= pf->last_pos ||
	    target_pos - pf->last_pos >= pf->L)
		return moem_errf(EINVAL, "prefetch: cannot predict tick %llu",
				 (unsigned long long)target_pos);
	chain_from_last(pf);
	mix(pf, target_pos, (uint32_t)(target_pos - pf->last_pos), pf->v);
	for (uint32_t e = 0; e < pf->N; e++)
		prob[e] = (float)(1.0 - exp(-(double)pf->v[e]));
	return 0;
}

int moem_prefetch_reuse(struct moem_prefetch *pf, uint32_t layer, float *prob)
{
	uint64_t target;

	if (layer >= pf->L)
		return moem_errf(EINVAL, "prefetch: layer %u of %u", layer, pf->L);
	if (pf->obs_pos[layer] == NONE64)
		return -ENOENT; /* not observed yet: the caller's normal case, no message */
	target = pf->obs_pos[layer] + pf->L;
	mix(pf, target, (uint32_t)(target - pf->last_pos), pf->v);
	for (uint32_t e = 0; e < pf->N; e++)
		prob[e] = (float)(1.0 - exp(-(double)pf->v[e]));
	return 0;
}

void moem_prefetch_rates(const struct moem_prefetch *pf, double *bytes_per_ns, double *layer_ns)
{
	*bytes_per_ns = pf->bw;
	*layer_ns = pf->lns;
}

void moem_prefetch_recall(const struct moem_prefetch *pf, double *chain, double *temporal,
			  double *pregate)
{
	*chain = pf->r_chain;
	*temporal = pf->r_temp > pf->r_pers ? pf->r_temp : pf->r_pers;
	*pregate = pf->r_pg[1];
}
