// SPDX-License-Identifier: GPL-2.0-only
/*
 * The structured synthetic workload (synth.h): rankings, Zipf draws,
 * layer maps, persistence, drift and batch churn. Two random streams: one
 * for the routing structure (intents), one for observation noise, so a
 * consumer that draws noise (traces, hidden states) never perturbs the
 * intents another consumer of the same seed sees.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/synth.h>

struct synth_slot {
	uint32_t workload;
	uint64_t seq_id;
	uint64_t remaining;
};

struct moem_synth {
	struct moem_synth_params p;
	uint32_t batch;
	double mix_cdf[MOEM_SYNTH_MAX_WORKLOADS];
	double *zipf_cdf;	 /* [N] over ranks */
	uint16_t *rank;		 /* [W][L][N]: rank -> expert */
	uint16_t *pos;		 /* [W][L][N]: expert -> rank */
	uint16_t *map;		 /* [L-1][N]: M[m] */
	struct synth_slot *slot; /* [B] */
	uint16_t *intent;	 /* [B][L][K] */
	struct moem_rng rng, noise_rng, pg_rng;
	uint64_t step; /* steps produced so far */
	uint64_t next_seq;
};

/*
 * The defaults reproduce the routing statistics published for real MoE
 * routers (checked by tests/unit/test_synth.c, "published_bands"):
 *
 *  - Activated experts per layer in decode, Qwen3-30B-A3B (N = 128,
 *    k = 8), DynaExq Table 1 (shared/seeds/002, "Expert activation ratio
 *    (%) in decode stage"): batch 1: 6.3%, 2: 11.6%, 4: 20.1%, 8: 31.9%,
 *    16: 46.5%, 32: 62.0%. (Uniform routing would give 6.3, 12.1, 22.8,
 *    40.4, 64.5, 87.4%.) zipf_s 1.7, overlap 0.8 and noise 0.5 give
 *    11.7-12.0, 19.0-21.0, 32.1-33.0, 47.1-47.8, 63.8-64.1% over three
 *    seeds at 48 layers (moem trace gen, 60 steps).
 *  - Skewed per-layer popularity: "a small subset of experts tends to
 *    receive a disproportionate fraction of routed tokens" (DynaExq sec.
 *    2.1); the Zipf law over each workload's ranking.
 *  - Temporal locality: consecutive tokens of a sequence pick the same
 *    expert far more often than chance (Mixtral of Experts, sec. 5,
 *    "Routing analysis": repeated assignments well above the random
 *    rate at the middle and last layers); persist 0.5.
 *  - Cross-layer affinity: a token's expert at layer l predicts its
 *    expert at layer l + 1 (the residual stream; what pre-gating and
 *    ExpertFlow's cross-layer predictor exploit); layer_corr 0.6.
 */
void moem_synth_defaults(struct moem_synth_params *p, uint32_t n_layers, uint32_t n_experts,
			 uint32_t top_k, uint64_t seed)
{
	static const char *const names[] = {"text", "math", "code"};

	memset(p, 0, sizeof(*p));
	p->n_layers = n_layers;
	p->n_experts = n_experts;
	p->top_k = top_k;
	p->n_workloads = 3;
	for (int i = 0; i < 3; i++)
		strcpy(p->workload[i], names[i]);
	p->zipf_s = 1.7;
	p->overlap = 0.8;
	p->reshuffle = 0.1;
	p->layer_corr = 0.6;
	p->persist = 0.5;
	p->drift = 0.02;
	p->mean_seq_len = 256;
	p->boost = 4.5;
	p->noise = 0.5;
	p->seed = seed;
}

static int check_unit(const char *name, double v)
{
	if (!(v >= 0.0 && v <= 1.0))
		return moem_errf(EINVAL, "synth: %s %g not in [0, 1]", name, v);
	return 0;
}

int moem_synth_validate(const struct moem_synth_params *p)
{
	int ret;

	if (!p->n_layers || p->n_layers > 256)
		return moem_errf(EINVAL, "synth: n_layers %u not in 1..256", p->n_layers);
	if (p->n_experts < 2 || p->n_experts > 1024)
		return moem_errf(EINVAL, "synth: n_experts %u not in 2..1024", p->n_experts);
	if (!p->top_k || p->top_k > p->n_experts || p->top_k > 64)
		return moem_errf(EINVAL, "synth: top_k %u not in 1..min(64, n_experts)", p->top_k);
	if (!p->n_workloads || p->n_workloads > MOEM_SYNTH_MAX_WORKLOADS)
		return moem_errf(EINVAL, "synth: %u workloads, want 1..%d", p->n_workloads,
				 MOEM_SYNTH_MAX_WORKLOADS);
	for (uint32_t w = 0; w < p->n_workloads; w++) {
		if (!p->workload[w][0] || strchr(p->workload[w], ':') ||
		    strchr(p->workload[w], ','))
			return moem_errf(EINVAL, "synth: bad workload name '%s'", p->workload[w]);
		for (uint32_t v = 0; v < w; v++)
			if (!strcmp(p->workload[v], p->workload[w]))
				return moem_errf(EINVAL, "synth: workload '%s' named twice",
						 p->workload[w]);
	}
	if (!(p->zipf_s >= 0.0 && p->zipf_s <= 4.0))
		return moem_errf(EINVAL, "synth: zipf_s %g not in [0, 4]", p->zipf_s);
	if ((ret = check_unit("overlap", p->overlap)) ||
	    (ret = check_unit("reshuffle", p->reshuffle)) ||
	    (ret = check_unit("layer_corr", p->layer_corr)) ||
	    (ret = check_unit("persist", p->persist)) || (ret = check_unit("drift", p->drift)))
		return ret;
	if (!(p->mean_seq_len >= 1.0 && p->mean_seq_len <= 1e9))
		return moem_errf(EINVAL, "synth: mean_seq_len %g not in [1, 1e9]", p->mean_seq_len);
	if (!(p->boost >= 0.0 && p->boost <= 100.0))
		return moem_errf(EINVAL, "synth: boost %g not in [0, 100]", p->boost);
	if (!(p->noise > 0.0 && p->noise <= 100.0))
		return moem_errf(EINVAL, "synth: noise %g not in (0, 100]", p->noise);
	return 0;
}

int moem_synth_parse_mix(const struct moem_synth_params *p, const char *s, double *mix)
{
	char buf[512], *save = NULL, *tok;
	double sum = 0;

	for (uint32_t w = 0; w < p->n_workloads; w++)
		mix[w] = s && *s ? 0.0 : 1.0 / p->n_workloads;
	if (!s || !*s)
		return 0;
	if (strlen(s) >= sizeof(buf))
		return moem_errf(EINVAL, "workload mix too long");
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':'), *end;
		double v = 1.0;
		uint32_t w;

		if (colon) {
			*colon = 0;
			v = strtod(colon + 1, &end);
			if (end == colon + 1 || *end || !(v >= 0.0) || !isfinite(v))
				return moem_errf(EINVAL, "workload mix: bad weight for '%s'", tok);
		}
		for (w = 0; w < p->n_workloads; w++)
			if (!strcmp(p->workload[w], tok))
				break;
		if (w == p->n_workloads)
			return moem_errf(EINVAL, "workload mix: unknown workload '%s'", tok);
		mix[w] = v;
	}
	for (uint32_t w = 0; w < p->n_workloads; w++)
		sum += mix[w];
	if (!(sum > 0))
		return moem_errf(EINVAL, "workload mix: all weights are zero");
	for (uint32_t w = 0; w < p->n_workloads; w++)
		mix[w] /= sum;
	return 0;
}

static void shuffle16(struct moem_rng *r, uint16_t *a, uint32_t n)
{
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = moem_rng_below(r, i + 1);
		uint16_t t = a[i];

		a[i] = a[j];
		a[j] = t;
	}
}

static uint16_t *rank_of(struct moem_synth *g, uint32_t w, uint32_t m)
{
	return g->rank + ((size_t)w * g->p.n_layers + m) * g->p.n_experts;
}

static uint16_t *pos_of(struct moem_synth *g, uint32_t w, uint32_t m)
{
	return g->pos + ((size_t)w * g->p.n_layers + m) * g->p.n_experts;
}

static void swap_ranks(struct moem_synth *g, uint32_t w, uint32_t m, uint32_t r1, uint32_t r2)
{
	uint16_t *rk = rank_of(g, w, m), *ps = pos_of(g, w, m);
	uint16_t t = rk[r1];

	rk[r1] = rk[r2];
	rk[r2] = t;
	ps[rk[r1]] = (uint16_t)r1;
	ps[rk[r2]] = (uint16_t)r2;
}

static uint32_t zipf_rank(struct moem_synth *g)
{
	double u = moem_rng_f64(&g->rng);
	uint32_t lo = 0, hi = g->p.n_experts - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (g->zipf_cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void build_rankings(struct moem_synth *g)
{
	const uint32_t N = g->p.n_experts, L = g->p.n_layers, W = g->p.n_workloads;
	uint16_t *global = malloc(sizeof(uint16_t) * N);

	for (uint32_t e = 0; e < N; e++)
		global[e] = (uint16_t)e;
	shuffle16(&g->rng, global, N);
	for (uint32_t m = 0; m + 1 < L; m++) {
		uint16_t *map = g->map + (size_t)m * N;

		for (uint32_t e = 0; e < N; e++)
			map[e] = (uint16_t)e;
		shuffle16(&g->rng, map, N);
	}
	for (uint32_t w = 0; w < W; w++) {
		uint32_t swaps = (uint32_t)lround((1.0 - g->p.overlap) * N);
		uint16_t *rk = rank_of(g, w, 0);

		memcpy(rk, global, sizeof(uint16_t) * N);
		for (uint32_t s = 0; s < swaps; s++) {
			uint32_t a = moem_rng_below(&g->rng, N), b = moem_rng_below(&g->rng, N);
			uint16_t t = rk[a];

			rk[a] = rk[b];
			rk[b] = t;
		}
		for (uint32_t m = 0; m + 1 < L; m++) {
			const uint16_t *map = g->map + (size_t)m * N;
			uint16_t *cur = rank_of(g, w, m), *next = rank_of(g, w, m + 1);

			for (uint32_t r = 0; r < N; r++)
				next[r] = map[cur[r]];
			swaps = (uint32_t)lround(g->p.reshuffle * N);
			for (uint32_t s = 0; s < swaps; s++) {
				uint32_t a = moem_rng_below(&g->rng, N),
					 b = moem_rng_below(&g->rng, N);
				uint16_t t = next[a];

				next[a] = next[b];
				next[b] = t;
			}
		}
		for (uint32_t m = 0; m < L; m++)
			for (uint32_t r = 0; r < N; r++)
				pos_of(g, w, m)[rank_of(g, w, m)[r]] = (uint16_t)r;
	}
	free(global);
}

int moem_synth_create(const struct moem_synth_params *p, const double *mix, uint32_t batch,
		      struct moem_synth **out)
{
	struct moem_synth *g;
	uint32_t N, L, W, K;
	double acc = 0;
	int ret;

	ret = moem_synth_validate(p);
	if (ret)
		return ret;
	if (!batch || batch > 65536)
		return moem_errf(EINVAL, "synth: batch %u not in 1..65536", batch);
	N = p->n_experts;
	L = p->n_layers;
	W = p->n_workloads;
	K = p->top_k;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->p = *p;
	g->batch = batch;
	g->zipf_cdf = malloc(sizeof(double) * N);
	g->rank = malloc(sizeof(uint16_t) * W * L * N);
	g->pos = malloc(sizeof(uint16_t) * W * L * N);
	g->map = malloc(sizeof(uint16_t) * (L > 1 ? L - 1 : 1) * N);
	g->slot = calloc(batch, sizeof(*g->slot));
	g->intent = calloc((size_t)batch * L * K, sizeof(uint16_t));
	if (!g->zipf_cdf || !g->rank || !g->pos || !g->map || !g->slot || !g->intent) {
		moem_synth_destroy(g);
		return -ENOMEM;
	}
	for (uint32_t w = 0; w < W; w++) {
		acc += mix ? mix[w] : 1.0 / W;
		g->mix_cdf[w] = acc;
	}
	for (uint32_t w = 0; w < W; w++)
		g->mix_cdf[w] /= acc;
	acc = 0;
	for (uint32_t r = 0; r < N; r++) {
		acc += pow(r + 1.0, -p->zipf_s);
		g->zipf_cdf[r] = acc;
	}
	for (uint32_t r = 0; r < N; r++)
		g->zipf_cdf[r] /= acc;
	g->zipf_cdf[N - 1] = 1.0;
	moem_rng_seed(&g->rng, p->seed, 1);
	moem_rng_seed(&g->noise_rng, p->seed, 2);
	moem_rng_seed(&g->pg_rng, p->seed, 4);
	build_rankings(g);
	*out = g;
	return 0;
}

void moem_synth_destroy(struct moem_synth *g)
{
	if (!g)
		return;
	free(g->zipf_cdf);
	free(g->rank);
	free(g->pos);
	free(g->map);
	free(g->slot);
	free(g->intent);
	free(g);
}

static uint16_t *intents_of(struct moem_synth *g, uint32_t b, uint32_t m)
{
	return g->intent + ((size_t)b * g->p.n_layers + m) * g->p.top_k;
}

static int has(const uint16_t *set, uint32_t n, uint16_t e)
{
	for (uint32_t i = 0; i < n; i++)
		if (set[i] == e)
			return 1;
	return 0;
}

/* Zipf draw for workload w at layer m, distinct from the n in set. */
static uint16_t draw_fresh(struct moem_synth *g, uint32_t w, uint32_t m, const uint16_t *set,
			   uint32_t n)
{
	const uint16_t *rk = rank_of(g, w, m);
	uint16_t e;

	for (int tries = 0; tries < 64; tries++) {
		e = rk[zipf_rank(g)];
		if (!has(set, n, e))
			goto done;
	}
	/* Pathological skew: take the best-ranked expert not yet used. */
	for (uint32_t r = 0; r < g->p.n_experts; r++) {
		e = rk[r];
		if (!has(set, n, e))
			break;
	}
done:
	return e;
}

/* Choose intent j of layer m, given layer m - 1 is already chosen. */
static void choose(struct moem_synth *g, uint32_t b, uint32_t m, uint32_t j, int keep)
{
	uint16_t *cur = intents_of(g, b, m);
	uint32_t w = g->slot[b].workload, K = g->p.top_k;
	uint16_t old = cur[j], e;

	/* Exclude the others of this layer; slot j itself is being replaced. */
	cur[j] = UINT16_MAX;
	if (keep && !has(cur, K, old)) {
		e = old;
	} else if (m > 0 && moem_rng_f64(&g->rng) < g->p.layer_corr) {
		e = g->map[(size_t)(m - 1) * g->p.n_experts + intents_of(g, b, m - 1)[j]];
		if (has(cur, K, e))
			e = draw_fresh(g, w, m, cur, K);
	} else {
		e = draw_fresh(g, w, m, cur, K);
	}
	cur[j] = e;
}

static void start_sequence(struct moem_synth *g, uint32_t b)
{
	struct synth_slot *s = &g->slot[b];
	double u = moem_rng_f64(&g->rng), q = 1.0 / g->p.mean_seq_len;
	uint32_t w = 0;

	while (w + 1 < g->p.n_workloads && u >= g->mix_cdf[w])
		w++;
	s->workload = w;
	s->seq_id = g->next_seq++;
	/* geometric length >= 1 with mean mean_seq_len */
	s->remaining =
		q >= 1.0 ? 1 : 1 + (uint64_t)floor(log(1.0 - moem_rng_f64(&g->rng)) / log(1.0 - q));
	for (uint32_t m = 0; m < g->p.n_layers; m++) {
		memset(intents_of(g, b, m), 0xff, sizeof(uint16_t) * g->p.top_k);
		for (uint32_t j = 0; j < g->p.top_k; j++)
			choose(g, b, m, j, 0);
	}
}

static void drift(struct moem_synth *g)
{
	for (uint32_t w = 0; w < g->p.n_workloads; w++)
		for (uint32_t m = 0; m < g->p.n_layers; m++)
			if (moem_rng_f64(&g->rng) < g->p.drift)
				swap_ranks(g, w, m, zipf_rank(g),
					   moem_rng_below(&g->rng, g->p.n_experts));
}

void moem_synth_step(struct moem_synth *g)
{
	if (g->step)
		drift(g);
	for (uint32_t b = 0; b < g->batch; b++) {
		struct synth_slot *s = &g->slot[b];

		if (!s->remaining) {
			start_sequence(g, b);
		} else {
			for (uint32_t m = 0; m < g->p.n_layers; m++)
				for (uint32_t j = 0; j < g->p.top_k; j++)
					choose(g, b, m, j, moem_rng_f64(&g->rng) < g->p.persist);
		}
		s->remaining--;
	}
	g->step++;
}

uint64_t moem_synth_cur_step(const struct moem_synth *g)
{
	return g->step ? g->step - 1 : 0;
}

uint32_t moem_synth_batch(const struct moem_synth *g)
{
	return g->batch;
}

const struct moem_synth_params *moem_synth_params(const struct moem_synth *g)
{
	return &g->p;
}

uint32_t moem_synth_workload(const struct moem_synth *g, uint32_t b)
{
	return g->slot[b].workload;
}

uint64_t moem_synth_seq_id(const struct moem_synth *g, uint32_t b)
{
	return g->slot[b].seq_id;
}

const uint16_t *moem_synth_intents(const struct moem_synth *g, uint32_t b, uint32_t m)
{
	return g->intent + ((size_t)b * g->p.n_layers + m) * g->p.top_k;
}

double moem_synth_zipf_p(const struct moem_synth *g, uint32_t w, uint32_t m, uint32_t e)
{
	const uint32_t r = g->pos[((size_t)w * g->p.n_layers + m) * g->p.n_experts + e];

	return g->zipf_cdf[r] - (r ? g->zipf_cdf[r - 1] : 0.0);
}

const uint16_t *moem_synth_layer_map(const struct moem_synth *g, uint32_t m)
{
	return m + 1 < g->p.n_layers ? g->map + (size_t)m * g->p.n_experts : NULL;
}

double moem_synth_intent_logit(const struct moem_synth_params *p, uint32_t j)
{
	return p->boost * (1.0 - 0.5 * (double)j / p->top_k);
}

void moem_synth_logits(struct moem_synth *g, uint32_t b, uint32_t m, float *z)
{
	const uint16_t *in = moem_synth_intents(g, b, m);

	for (uint32_t e = 0; e < g->p.n_experts; e++)
		z[e] = (float)(g->p.noise * moem_rng_normal(&g->noise_rng));
	for (uint32_t j = 0; j < g->p.top_k; j++)
		z[in[j]] += (float)moem_synth_intent_logit(&g->p, j);
}

/*
 * MOEM_SYNTH_PG_*: ExpertFlow (shared/seeds/003, Table 2) fits pre-gate
 * accuracy against the distance t in layers as a e^(-bt) + c with the
 * asymptote c = 26.4% (DeepSeek), 33.3% (Qwen1.5), 29.6% (Qwen2); the
 * text gives no value at t = 1. moem assumes 85% one layer ahead (a
 * residual stream changes little per block) and a decay over about two
 * layers; PG_FAR 0.1 plus the popular experts a pre-gate still picks
 * lands near the published asymptote: 87% at one layer, 64% at two, 44%
 * at four, 34% at eight (test_synth, "pregate_accuracy_decays").
 */
void moem_synth_pregate(struct moem_synth *g, uint32_t b, uint32_t m, uint32_t d, float *z)
{
	const uint32_t N = g->p.n_experts, K = g->p.top_k, L = g->p.n_layers;
	const uint32_t t = (m + d) % L, w = g->slot[b].workload;
	const uint16_t *in = moem_synth_intents(g, b, t);
	const uint16_t *rk = rank_of(g, w, t);
	double p = MOEM_SYNTH_PG_FAR + (MOEM_SYNTH_PG_NEAR - MOEM_SYNTH_PG_FAR) *
					       exp(-(double)(d ? d - 1 : 0) / MOEM_SYNTH_PG_DECAY);

	for (uint32_t e = 0; e < N; e++)
		z[e] = (float)(g->p.noise * moem_rng_normal(&g->pg_rng));
	for (uint32_t j = 0; j < K; j++) {
		uint32_t e = in[j];
		double u = moem_rng_f64(&g->pg_rng), v = moem_rng_f64(&g->pg_rng);

		if (d && u >= p) {
			/* a popular expert instead: Zipf over the workload's ranking */
			uint32_t lo = 0, hi = N - 1;

			while (lo < hi) {
				uint32_t mid = (lo + hi) / 2;

				if (g->zipf_cdf[mid] > v)
					hi = mid;
				else
					lo = mid + 1;
			}
			e = rk[lo];
		}
		z[e] += (float)moem_synth_intent_logit(&g->p, j);
	}
}

double moem_synth_gain(const struct moem_synth_params *p, uint32_t hidden)
{
	double a2 = 0;

	for (uint32_t j = 0; j < p->top_k; j++) {
		double a = moem_synth_intent_logit(p, j);

		a2 += a * a;
	}
	return sqrt((p->n_layers * a2 + p->noise * p->noise * hidden) / hidden);
}

int moem_synth_basis(const struct moem_synth_params *p, uint32_t hidden, float *out)
{
	const size_t rows = (size_t)p->n_layers * p->n_experts;
	const int ortho = rows <= hidden;
	struct moem_rng r;

	if (!hidden)
		return moem_errf(EINVAL, "synth: hidden size 0");
	moem_rng_seed(&r, p->seed, 3);
	for (size_t i = 0; i < rows; i++) {
		float *v = out + i * hidden;
		double norm;

		for (uint32_t k = 0; k < hidden; k++)
			v[k] = (float)moem_rng_normal(&r);
		/* Modified Gram-Schmidt against the earlier rows, when they fit. */
		for (size_t j = 0; ortho && j < i; j++) {
			const float *u = out + j * hidden;
			double dot = 0;

			for (uint32_t k = 0; k < hidden; k++)
				dot += (double)v[k] * u[k];
			for (uint32_t k = 0; k < hidden; k++)
				v[k] -= (float)(dot * u[k]);
		}
		norm = 0;
		for (uint32_t k = 0; k < hidden; k++)
			norm += (double)v[k] * v[k];
		norm = sqrt(norm);
		if (!(norm > 1e-6))
			return moem_errf(EDOM, "synth: degenerate basis row %zu", i);
		for (uint32_t k = 0; k < hidden; k++)
			v[k] = (float)(v[k] / norm);
	}
	return 0;
}

void moem_synth_hidden(struct moem_synth *g, uint32_t b, const float *basis, uint32_t hidden,
		       float *h0)
{
	const uint32_t N = g->p.n_experts;

	for (uint32_t k = 0; k < hidden; k++)
		h0[k] = (float)(g->p.noise * moem_rng_normal(&g->noise_rng));
	for (uint32_t m = 0; m < g->p.n_layers; m++) {
		const uint16_t *in = moem_synth_intents(g, b, m);

		for (uint32_t j = 0; j < g->p.top_k; j++) {
			const float *u = basis + ((size_t)m * N + in[j]) * hidden;
			float a = (float)moem_synth_intent_logit(&g->p, j);

			for (uint32_t k = 0; k < hidden; k++)
				h0[k] += a * u[k];
		}
	}
}
