/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Deterministic pseudo-random numbers (xoshiro256**, seeded by
 * splitmix64): the same seed gives the same bytes on every machine, which
 * synthetic models, traces and stress tests rely on. Not for security.
 */
#ifndef MOEM_RNG_H
#define MOEM_RNG_H

#include <math.h>
#include <stdint.h>

struct moem_rng {
	uint64_t s[4];
};

static inline uint64_t moem_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Seed from (seed, stream) so independent streams share one user seed. */
static inline void moem_rng_seed(struct moem_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);

	for (int i = 0; i < 4; i++)
		r->s[i] = moem_splitmix64(&x);
}

static inline uint64_t moem_rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t moem_rng_u64(struct moem_rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = moem_rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = moem_rotl64(s[3], 45);
	return res;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double moem_rng_f64(struct moem_rng *r)
{
	return (double)(moem_rng_u64(r) >> 11) * 0x1p-53;
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, unbiased). */
static inline uint32_t moem_rng_below(struct moem_rng *r, uint32_t n)
{
	uint64_t m = (moem_rng_u64(r) >> 32) * (uint64_t)n;
	uint32_t lo = (uint32_t)m;

	if (lo < n) {
		uint32_t t = (uint32_t)(-n) % n;

		while (lo < t) {
			m = (moem_rng_u64(r) >> 32) * (uint64_t)n;
			lo = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

/* Standard normal (Box-Muller, one value per call: simple and portable). */
static inline double moem_rng_normal(struct moem_rng *r)
{
	double u1 = moem_rng_f64(r), u2 = moem_rng_f64(r);

	if (u1 < 0x1p-60)
		u1 = 0x1p-60;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif /* MOEM_RNG_H */
