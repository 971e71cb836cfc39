// SPDX-License-Identifier: GPL-2.0-only
/*
 * online_bound: how close to Belady MIN an online eviction policy can get
 * on the synthetic workload, measured with a policy that knows the
 * generator (synth.h). It regenerates the routing of `moem trace gen` with
 * the same options (same seed, same random streams, so the same accesses
 * as the trace bench/sim/run.sh replays), and pages it on demand through
 * `slots` uniform slots three ways:
 *
 *  - MIN (moem_belady(), as `moem sim` computes it);
 *  - LRU;
 *  - "gen": on a miss, evict the resident expert least likely to be used
 *    at its layer's next run, that probability computed from the
 *    generator's own hidden state as it stands after the last layer that
 *    ran: each token's intents (what the noisy router picks from), its
 *    workload's per-layer Zipf popularity, the persistence and
 *    layer-correlation parameters and the cross-layer maps. No online
 *    policy that sees only routing outputs knows more; its hit rate is the
 *    measured answer to "what could a perfect predictor of this
 *    generator's next step do".
 *
 * What the gen policy does not know is the future's draws: a token's
 * redrawn intents (1 - persist of them each step) are new Zipf draws,
 * which MIN sees and no predictor can. Scores (--score): p (the
 * probability), density (probability per tick until that layer runs) or
 * next (the expected ticks until the next use, later runs taken at the
 * Zipf draws' rate: Belady's farthest next use in expectation).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy_evict.h>
#include <moem/route.h>
#include <moem/synth.h>

enum { SC_P, SC_DENSITY, SC_NEXT };

struct bound {
	uint32_t L, N, K, B;
	uint64_t slots;
	const struct moem_synth_params *p;
	uint16_t *known; /* [B][L][K]: each token's intents at layer m's last run */
	double *prob;	 /* [L][N]: P(used at layer m's next run) */
	double *base;	 /* [L][N]: P(used at a later run): Zipf draws only */
	int mode;	 /* SC_P, SC_DENSITY, SC_NEXT */
};

struct cache {
	uint64_t slots, n;
	uint32_t *res;	 /* resident keys [slots] */
	uint32_t *where; /* key -> index in res, or UINT32_MAX */
	uint64_t *last;	 /* key -> last tick used (LRU) */
	uint64_t hits, acc;
};

static int cache_init(struct cache *c, uint64_t slots, uint32_t keys)
{
	memset(c, 0, sizeof(*c));
	c->slots = slots;
	c->res = malloc(sizeof(*c->res) * (slots ? slots : 1));
	c->where = malloc(sizeof(*c->where) * keys);
	c->last = calloc(keys, sizeof(*c->last));
	if (!c->res || !c->where || !c->last)
		return -ENOMEM;
	memset(c->where, 0xff, sizeof(*c->where) * keys);
	return 0;
}

static void cache_free(struct cache *c)
{
	free(c->res);
	free(c->where);
	free(c->last);
}

/* Layer m's next-run probabilities from the tokens' known intents. */
static void layer_prob(struct bound *bd, struct moem_synth *g, uint32_t m, bool exact_follow)
{
	const uint32_t N = bd->N, K = bd->K, L = bd->L;
	const double ps = bd->p->persist, lc = m ? bd->p->layer_corr : 0.0;
	const uint16_t *map = m ? moem_synth_layer_map(g, m - 1) : NULL;
	double *P = bd->prob + (size_t)m * N, *Q = bd->base + (size_t)m * N, z[1024], pb[1024];

	for (uint32_t e = 0; e < N; e++)
		P[e] = Q[e] = 1.0;
	for (uint32_t b = 0; b < bd->B; b++) {
		const uint16_t *I = bd->known + ((size_t)b * L + m) * K;
		const uint16_t *X = m ? bd->known + ((size_t)b * L + m - 1) * K : NULL;
		const uint32_t w = moem_synth_workload(g, b);
		/* a followed intent is exact once layer m - 1 ran this step */
		const double fa = exact_follow ? 1.0 : ps;

		for (uint32_t e = 0; e < N; e++) {
			z[e] = moem_synth_zipf_p(g, w, m, e);
			pb[e] = 1.0;
			Q[e] *= pow(1.0 - z[e], K);
		}
		for (uint32_t j = 0; j < K; j++) {
			const uint32_t f = m ? map[X[j]] : UINT32_MAX;

			/* intent j: kept, else followed from layer m - 1, else a Zipf draw */
			for (uint32_t e = 0; e < N; e++) {
				double q = (1.0 - ps) * ((1.0 - lc) + lc * (1.0 - fa)) * z[e];

				if (e == I[j])
					q += ps;
				if (e == f)
					q += (1.0 - ps) * lc * fa;
				pb[e] *= 1.0 - (q < 1.0 ? q : 1.0);
			}
		}
		for (uint32_t e = 0; e < N; e++)
			P[e] *= pb[e];
	}
	for (uint32_t e = 0; e < N; e++) {
		P[e] = 1.0 - P[e];
		Q[e] = 1.0 - Q[e];
	}
}

static double score(const struct bound *bd, uint32_t key, uint32_t m_now)
{
	const uint32_t m = key / bd->N;
	/* ticks until layer m runs again, counted from the layer now running */
	const uint32_t d = m > m_now ? m - m_now : m + bd->L - m_now;

	if (bd->mode == SC_NEXT) /* minus the expected ticks until the next use */
		return -(d + (double)bd->L * (1.0 - bd->prob[key]) / fmax(bd->base[key], 1e-9));
	return bd->mode == SC_DENSITY ? bd->prob[key] / d : bd->prob[key];
}

/* Demand-page one tick's distinct keys; gen picks victims by score, else LRU. */
static void cache_tick(struct cache *c, const struct bound *bd, const uint32_t *keys, uint32_t n,
		       uint64_t tick, uint32_t m, bool counted, bool gen)
{
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t k = keys[i];

		c->acc += counted;
		if (c->where[k] != UINT32_MAX) {
			c->hits += counted;
		} else if (c->slots) {
			if (c->n == c->slots) {
				uint64_t v = UINT64_MAX;
				double best = INFINITY;

				for (uint64_t r = 0; r < c->n; r++) {
					const uint32_t q = c->res[r];
					double s;

					if (c->last[q] == tick) /* this tick's keys stay */
						continue;
					s = gen ? score(bd, q, m) : (double)c->last[q];
					if (s < best) {
						best = s;
						v = r;
					}
				}
				if (v == UINT64_MAX)
					goto skip;
				{ /* the victim's slot takes the last resident */
					const uint32_t victim = c->res[v], moved = c->res[--c->n];

					c->res[v] = moved;
					c->where[moved] = (uint32_t)v;
					c->where[victim] = UINT32_MAX;
				}
			}
			c->where[k] = (uint32_t)c->n;
			c->res[c->n++] = k;
		}
	skip:
		c->last[k] = tick;
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: online_bound [--batch B] [--seed S] [--steps N] [--warmup W]\n"
		   "                    [--hbm PCT] [--layers L] [--experts N] [--top-k K]\n"
		   "                    [--score p|density|next]\n"
		   "Pages moem trace gen's routing (same options, same accesses) through\n"
		   "PCT%% of all experts' slots: Belady MIN, LRU, and an eviction policy\n"
		   "that knows the generator's hidden state (the bound on online policies).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"batch", required_argument, NULL, 'b'},
					     {"seed", required_argument, NULL, 's'},
					     {"steps", required_argument, NULL, 'n'},
					     {"warmup", required_argument, NULL, 'w'},
					     {"hbm", required_argument, NULL, 'h'},
					     {"layers", required_argument, NULL, 'L'},
					     {"experts", required_argument, NULL, 'E'},
					     {"top-k", required_argument, NULL, 'k'},
					     {"score", required_argument, NULL, 'c'},
					     {"help", no_argument, NULL, 'H'},
					     {NULL, 0, NULL, 0}};
	uint32_t L = 48, N = 128, K = 8, B = 8, *cnt = NULL, *keys = NULL;
	uint64_t seed = 1, steps = 150, warmup = 0, mh = 0, ma = 0;
	double hbm = 25.0;
	struct moem_synth_params sp;
	struct moem_synth *g = NULL;
	struct moem_access_log log;
	struct bound bd = {0};
	struct cache lru, gen;
	int32_t *ids = NULL;
	float *wt = NULL, *z = NULL;
	uint8_t *seen = NULL;
	int ch, idx = 0, ret;

	while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		char *end = NULL;
		unsigned long long v = 0;
		uint32_t v32;

		if (ch == 'H') {
			usage(stdout);
			return 0;
		}
		if (ch == '?') {
			usage(stderr);
			return 2;
		}
		if (ch == 'c') {
			bd.mode = !strcmp(optarg, "p")	       ? SC_P
				  : !strcmp(optarg, "density") ? SC_DENSITY
				  : !strcmp(optarg, "next")    ? SC_NEXT
							       : -1;
			if (bd.mode < 0) {
				fprintf(stderr,
					"online_bound: --score %s: want p, density or next\n",
					optarg);
				return 2;
			}
			continue;
		}
		if (ch == 'h') {
			hbm = strtod(optarg, &end);
			if (end == optarg || (*end && strcmp(end, "%")) ||
			    !(hbm >= 0 && hbm <= 100)) {
				fprintf(stderr,
					"online_bound: --hbm %s: want a percentage 0..100\n",
					optarg);
				return 2;
			}
			continue;
		}
		errno = 0;
		v = strtoull(optarg, &end, 10);
		if (errno || end == optarg || *end || optarg[0] == '-') {
			fprintf(stderr, "online_bound: --%s %s: not a number\n", opts[idx].name,
				optarg);
			return 2;
		}
		/* out of every range below when it does not fit */
		v32 = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
		if (ch == 's')
			seed = v;
		else if (ch == 'n')
			steps = v;
		else if (ch == 'w')
			warmup = v;
		else if (ch == 'b')
			B = v32;
		else if (ch == 'L')
			L = v32;
		else if (ch == 'E')
			N = v32;
		else if (ch == 'k')
			K = v32;
	}
	if (optind < argc || !steps || steps > 100000 || warmup >= steps || !B || B > 4096) {
		fprintf(stderr, "online_bound: want --steps 1..100000 above --warmup, --batch "
				"1..4096, no operands\n");
		return 2;
	}
	moem_synth_defaults(&sp, L, N, K, seed);
	ret = moem_synth_create(&sp, NULL, B, &g);
	if (ret) {
		fprintf(stderr, "online_bound: %s\n", moem_strerror(ret));
		return 1;
	}
	bd = (struct bound){L,	 N,    K,    B,	   (uint64_t)floor(hbm / 100.0 * L * N),
			    &sp, NULL, NULL, NULL, bd.mode};
	bd.known = calloc((size_t)B * L * K, sizeof(*bd.known));
	bd.prob = calloc((size_t)L * N, sizeof(*bd.prob));
	bd.base = calloc((size_t)L * N, sizeof(*bd.base));
	ids = malloc(sizeof(*ids) * B * K);
	wt = malloc(sizeof(*wt) * B * K);
	cnt = malloc(sizeof(*cnt) * B);
	z = malloc(sizeof(*z) * B * N);
	keys = malloc(sizeof(*keys) * B * K);
	seen = calloc((size_t)L * N, 1);
	moem_access_log_init(&log, L * N);
	ret = cache_init(&lru, bd.slots, L * N) ?: cache_init(&gen, bd.slots, L * N);
	if (ret || !bd.known || !bd.prob || !bd.base || !ids || !wt || !cnt || !z || !keys ||
	    !seen) {
		fprintf(stderr, "online_bound: out of memory\n");
		return 1;
	}
	{
		const struct moem_route_cfg rc = {N, K, true, 1.0f};
		struct moem_route_out out = {ids, wt, cnt};
		uint64_t count_from = 0;

		for (uint64_t s = 0; s < steps; s++) {
			moem_synth_step(g);
			if (s == warmup)
				count_from = log.n_pos;
			for (uint32_t m = 0; m < L; m++) {
				const uint64_t tick = s * L + m + 1;
				uint32_t n = 0;

				/* the same calls, in the same order, as moem_trace_gen() */
				for (uint32_t b = 0; b < B; b++)
					moem_synth_logits(g, b, m, z + (size_t)b * N);
				ret = moem_route_topk(&rc, B, z, NULL, &out);
				if (ret)
					goto fail;
				for (uint32_t i = 0; i < B * K; i++) {
					const uint32_t k = m * N + (uint32_t)ids[i];

					if (ids[i] >= 0 && !seen[k]) {
						seen[k] = 1;
						keys[n++] = k;
					}
				}
				for (uint32_t i = 0; i < n; i++)
					seen[keys[i]] = 0;
				ret = moem_access_log_add(&log, keys, n);
				if (ret)
					goto fail;
				cache_tick(&lru, &bd, keys, n, tick, m, s >= warmup, false);
				cache_tick(&gen, &bd, keys, n, tick, m, s >= warmup, true);
				/* what the policy learns from this layer's run */
				for (uint32_t b = 0; b < B; b++)
					memcpy(bd.known + ((size_t)b * L + m) * K,
					       moem_synth_intents(g, b, m), sizeof(uint16_t) * K);
				layer_prob(&bd, g, m, false);
				if (m + 1 < L)
					layer_prob(&bd, g, m + 1, true);
			}
		}
		ret = moem_belady(&log, bd.slots, count_from, &mh, &ma);
		if (ret)
			goto fail;
	}
	{
		const double hm = ma ? (double)mh / ma : 0,
			     hl = lru.acc ? (double)lru.hits / lru.acc : 0,
			     hg = gen.acc ? (double)gen.hits / gen.acc : 0;

		printf("batch %u seed %llu steps %llu warmup %llu slots %llu (%.1f%% of %u x %u) "
		       "score %s\n",
		       B, (unsigned long long)seed, (unsigned long long)steps,
		       (unsigned long long)warmup, (unsigned long long)bd.slots, hbm, L, N,
		       bd.mode == SC_P	       ? "p"
		       : bd.mode == SC_DENSITY ? "density"
					       : "next");
		printf("hit rate: belady %.4f  lru %.4f (%.3f x belady)  gen %.4f (%.3f x "
		       "belady)\n",
		       hm, hl, hm > 0 ? hl / hm : 0, hg, hm > 0 ? hg / hm : 0);
	}
	ret = 0;
	goto out;
fail:
	fprintf(stderr, "online_bound: %s\n", moem_strerror(ret));
	ret = 1;
out:
	cache_free(&lru);
	cache_free(&gen);
	moem_access_log_free(&log);
	moem_synth_destroy(g);
	free(bd.known);
	free(bd.prob);
	free(bd.base);
	free(ids);
	free(wt);
	free(cnt);
	free(z);
	free(keys);
	free(seen);
	return ret;
}
