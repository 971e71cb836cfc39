// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CPU backend's paged attention (runtime/compute/cpu/attention.c),
 * which computes the queries of one KV head for several tokens of a
 * sequence together so that each key and value is read once for all of
 * them. Checked: every output against a double-precision reference
 * (GQA groups of 1, 4 and 8, MLA's shared key/value entry, a sliding
 * window, a missing block, a padding token, tokens of three sequences
 * mixed in one call, runs longer than a tile); and bitwise the same
 * whatever the batch around a token (alone, or among the others) and the
 * thread count, which is what lets the decoder give a sequence the same
 * tokens alone, batched and from the prefix cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>

#include "kselftest_harness.h"
#include "test_backend_util.h"

#define BT     4  /* tokens per block */
#define NB     40 /* blocks in the pool */
#define MAXB   12 /* blocks per sequence */
#define LAYERS 2
#define MAXT   48

struct shape {
	uint32_t n_heads, n_kv, qk_dim, v_dim, k_off, v_off, entry, window;
};

static const struct shape shapes[] = {
	{8, 2, 32, 32, 0, 64, 128, 0}, /* GQA, groups of 4 */
	{4, 4, 20, 20, 0, 80, 160, 0}, /* MHA, a width that is no multiple of 8 */
	{16, 2, 16, 16, 0, 32, 64, 6}, /* groups of 8, a sliding window */
	{8, 1, 40, 32, 0, 0, 40, 0},   /* MLA: keys and values one entry */
	{160, 1, 8, 8, 0, 0, 8, 0},    /* a group wider than a tile */
};

struct fixture_data {
	float *pool, *q;
	int32_t tables[3 * MAXB];
	int32_t pos[MAXT];
	uint32_t tab[MAXT];
	uint32_t T;
};

/* Three sequences: 21 prompt tokens of one, a decode token, 6 of another, a pad. */
static void make_batch(struct fixture_data *f)
{
	uint32_t t = 0;

	for (int s = 0; s < 3; s++)
		for (int b = 0; b < MAXB; b++)
			f->tables[s * MAXB + b] = s * MAXB + b < NB ? s * MAXB + b : -1;
	f->tables[2 * MAXB + 1] = -1; /* sequence 2's second block is missing */
	for (int p = 9; p < 30; p++, t++) {
		f->pos[t] = p;
		f->tab[t] = 0;
	}
	f->pos[t] = 33;
	f->tab[t++] = MAXB;
	f->pos[t] = -1; /* padding */
	f->tab[t++] = MAXB;
	for (int p = 2; p < 8; p++, t++) {
		f->pos[t] = p;
		f->tab[t] = 2 * MAXB;
	}
	f->T = t;
}

static const float *entry_of(const struct fixture_data *f, const struct shape *sh, uint32_t tab,
			     uint32_t j)
{
	int32_t b = f->tables[tab + j / BT];

	if (b < 0)
		return NULL;
	return f->pool + (((size_t)b * LAYERS + 1) * BT + j % BT) * sh->entry;
}

/* out[t][h][v_dim] in double, every key up to the token's position (within the window). */
static void reference(const struct fixture_data *f, const struct shape *sh, float scale,
		      double *out)
{
	const uint32_t group = sh->n_heads / sh->n_kv;

	memset(out, 0, sizeof(double) * f->T * sh->n_heads * sh->v_dim);
	for (uint32_t t = 0; t < f->T; t++) {
		uint32_t lo = 0, hi;

		if (f->pos[t] < 0)
			continue;
		hi = (uint32_t)f->pos[t] + 1;
		if (sh->window && hi > sh->window)
			lo = hi - sh->window;
		for (uint32_t h = 0; h < sh->n_heads; h++) {
			const float *q = f->q + ((size_t)t * sh->n_heads + h) * sh->qk_dim;
			double sc[64], mx = -INFINITY, sum = 0;
			double *o = out + ((size_t)t * sh->n_heads + h) * sh->v_dim;
			uint32_t g = h / group;

			for (uint32_t j = lo; j < hi; j++) {
				const float *k = entry_of(f, sh, f->tab[t], j);
				double d = 0;

				sc[j - lo] = -INFINITY;
				if (!k)
					continue;
				for (uint32_t c = 0; c < sh->qk_dim; c++)
					d += (double)q[c] * k[sh->k_off + g * sh->qk_dim + c];
				sc[j - lo] = d * scale;
				mx = fmax(mx, sc[j - lo]);
			}
			for (uint32_t j = lo; j < hi; j++)
				sum += sc[j - lo] = exp(sc[j - lo] - mx);
			for (uint32_t j = lo; j < hi; j++) {
				const float *v = entry_of(f, sh, f->tab[t], j);

				for (uint32_t c = 0; v && c < sh->v_dim; c++)
					o[c] += sc[j - lo] / sum * v[sh->v_off + g * sh->v_dim + c];
			}
		}
	}
}

/* The backend's attention over tokens [t0, t0 + n) of the batch into out. */
static int run(struct moem_backend *be, const struct fixture_data *f, const struct shape *sh,
	       float scale, uint32_t t0, uint32_t n, float *out)
{
	const size_t pool_b = sizeof(float) * NB * LAYERS * BT * sh->entry;
	const size_t q_b = sizeof(float) * n * sh->n_heads * sh->qk_dim;
	const size_t o_b = sizeof(float) * n * sh->n_heads * sh->v_dim;
	moem_dptr pool = 0, tables = 0, q = 0, pos = 0, tab = 0, o = 0;
	struct moem_attn_args a = {0};
	int ret;

	ret = moem_be_alloc(be, pool_b, &pool);
	ret = ret ?: moem_be_alloc(be, sizeof(f->tables), &tables);
	ret = ret ?: moem_be_alloc(be, q_b, &q);
	ret = ret ?: moem_be_alloc(be, 4 * n, &pos);
	ret = ret ?: moem_be_alloc(be, 4 * n, &tab);
	ret = ret ?: moem_be_alloc(be, o_b, &o);
	ret = ret ?: moem_be_htod(be, pool, f->pool, pool_b, NULL);
	ret = ret ?: moem_be_htod(be, tables, f->tables, sizeof(f->tables), NULL);
	ret = ret ?: moem_be_htod(be, q, f->q + (size_t)t0 * sh->n_heads * sh->qk_dim, q_b, NULL);
	ret = ret ?: moem_be_htod(be, pos, f->pos + t0, 4 * n, NULL);
	ret = ret ?: moem_be_htod(be, tab, f->tab + t0, 4 * n, NULL);
	if (!ret) {
		a.kv = (struct moem_kv_geom){pool, NB, LAYERS, BT, sh->entry, 1, tables};
		a.T = n;
		a.n_heads = sh->n_heads;
		a.n_kv_heads = sh->n_kv;
		a.qk_dim = sh->qk_dim;
		a.v_dim = sh->v_dim;
		a.k_off = sh->k_off;
		a.v_off = sh->v_off;
		a.q_stride = sh->n_heads * sh->qk_dim;
		a.window = sh->window;
		a.scale = scale;
		a.q = q;
		a.pos = pos;
		a.tab = tab;
		a.out = o;
		ret = moem_op_attention(be, NULL, &a);
	}
	ret = ret ?: moem_be_stream_sync(be, NULL);
	ret = ret ?: moem_be_dtoh(be, out, o, o_b, NULL);
	ret = ret ?: moem_be_stream_sync(be, NULL);
	moem_be_free(be, pool);
	moem_be_free(be, tables);
	moem_be_free(be, q);
	moem_be_free(be, pos);
	moem_be_free(be, tab);
	moem_be_free(be, o);
	return ret;
}

TEST(tiles_match_the_reference_and_each_token_alone)
{
	static const uint32_t threads[] = {1, 2, 3};
	struct fixture_data f;

	make_batch(&f);
	for (size_t si = 0; si < MOEM_ARRAY_SIZE(shapes); si++) {
		const struct shape *sh = &shapes[si];
		const size_t per = (size_t)sh->n_heads * sh->v_dim;
		const float scale = 1.0f / sqrtf((float)sh->qk_dim);
		float *first = malloc(sizeof(float) * f.T * per);
		float *got = malloc(sizeof(float) * f.T * per);
		double *ref = malloc(sizeof(double) * f.T * per);

		ASSERT_NE(NULL, first);
		ASSERT_NE(NULL, got);
		ASSERT_NE(NULL, ref);
		f.pool = tb_rand_f32(100 + si, (size_t)NB * LAYERS * BT * sh->entry, 1.0);
		f.q = tb_rand_f32(200 + si, (size_t)f.T * sh->n_heads * sh->qk_dim, 1.0);
		reference(&f, sh, scale, ref);
		for (size_t ti = 0; ti < MOEM_ARRAY_SIZE(threads); ti++) {
			struct moem_backend_opts o = {.threads = threads[ti]};
			struct moem_backend *be;

			ASSERT_EQ(0, moem_backend_open("cpu", &o, &be))
			TH_LOG("%s", moem_last_error());
			ASSERT_EQ(0, run(be, &f, sh, scale, 0, f.T, got))
			TH_LOG("%s", moem_last_error());
			if (!ti) {
				memcpy(first, got, sizeof(float) * f.T * per);
				for (size_t i = 0; i < f.T * per; i++) {
					ASSERT_LE(fabs(got[i] - ref[i]), 1e-5 + 1e-5 * fabs(ref[i]))
					TH_LOG("shape %zu output %zu: %g, reference %g", si, i,
					       (double)got[i], ref[i]);
				}
			} else {
				EXPECT_EQ(0, memcmp(first, got, sizeof(float) * f.T * per))
				TH_LOG("shape %zu: %u threads differ from 1", si, threads[ti]);
			}
			/* each token alone: the same bits as among the others */
			for (uint32_t t = 0; t < f.T; t++) {
				ASSERT_EQ(0, run(be, &f, sh, scale, t, 1, got));
				EXPECT_EQ(0, memcmp(first + t * per, got, sizeof(float) * per))
				TH_LOG("shape %zu token %u alone differs (%u threads)", si, t,
				       threads[ti]);
			}
			moem_backend_close(be);
		}
		free(f.pool);
		free(f.q);
		free(first);
		free(got);
		free(ref);
	}
}

TEST_HARNESS_MAIN
