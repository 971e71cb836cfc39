// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CPU backend's vector kernels (runtime/compute/cpu/kern_*.c) against
 * the scalar reference kernels: every instruction set this CPU runs, and
 * the AVX-512 kernels also built against SIMDe's portable AVX-512 so that
 * their logic is tested on any x86-64; all precisions; random shapes;
 * batch 1..64; the same bits for 1, 2 and N threads and for a token
 * alone or in a batch; ISA selection and its errors; NUMA placement of
 * work on a made-up two-node topology.
 *
 * Tolerances (max |vector - scalar| / max |scalar| over one output row
 * of H values), from what each path changes against the reference:
 *  - bf16 on AVX2: the same fp32 products summed in another order. A sum
 *    of K terms moves by ~sqrt(K) 2^-24 of its scale in practice (K <=
 *    640 here: 1.5e-6); three matmuls and silu: 1e-5 (measured 4e-7).
 *  - bf16 on AVX-512: act (fp32) is rounded to bf16 for vdpbf16ps, at
 *    most 2^-9 relative per element, random in sign, so an output moves
 *    by ~2^-9/sqrt(3) = 1.1e-3 of the scale of its terms; the max over a
 *    row of H outputs is ~3.5 sigma, and a row's largest output can be
 *    smaller than its terms' scale: 8e-3 (measured 3.2e-3).
 *  - q8/q4/q2 (both ISAs): activations are quantized to int8 per block
 *    of 64, error uniform in +-amax/254; for Gaussian data amax/rms ~ 3
 *    in a block, so ~0.7% per element of x, more for act's heavier
 *    tails, and an output row of H = 128 averages little: q8 6e-2
 *    (measured 2.6e-2). q4 and q2 codes are not centred (0..15, 0..3;
 *    the min is added exactly from the block sums), so the activation
 *    error is multiplied by the codes' mean rather than the weights'
 *    spread, 2-3x: 0.15 (measured 7.4e-2). For scale: q4's own error
 *    against bf16 weights is ~15% (test_backend_cpu).
 * No data-independent bound exists for a relative error under
 * cancellation, so each tolerance is about twice the worst measured on
 * these seeds, and the estimates above say why that size is right.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/rng.h>

#include "../../runtime/compute/cpu/cpu_int.h"
#include "../../runtime/compute/cpu/kern.h"
#include "kselftest_harness.h"
#include "test_backend_util.h"

static const double tol_f32 = 1e-5, tol_bf16 = 8e-3, tol_q8 = 6e-2, tol_q = 0.15;

static double tol_for(const struct moem_cpu_kern *k, enum moem_prec p)
{
	switch (k->fmt[p]) {
	case CPU_ACT_F32:
		return tol_f32;
	case CPU_ACT_BF16:
		return tol_bf16;
	default:
		return p == MOEM_PREC_Q8 ? tol_q8 : tol_q;
	}
}

/* The kernel tables this run tests: what the CPU runs, and the AVX-512 code on SIMDe. */
struct kcase {
	const char *name;
	const struct moem_cpu_kern *k;
};

static int kcases(struct kcase *out)
{
	int n = 0;

	if (moem_cpu_isa_check(MOEM_CPU_ISA_AVX2) == 0)
		out[n++] = (struct kcase){"avx2", &moem_cpu_kern_avx2};
	if (moem_cpu_isa_check(MOEM_CPU_ISA_AVX512) == 0)
		out[n++] = (struct kcase){"avx512", &moem_cpu_kern_avx512};
	if (moem_cpu_isa_check(MOEM_CPU_ISA_AMX) == 0)
		out[n++] = (struct kcase){"amx", &moem_cpu_kern_amx};
	out[n++] = (struct kcase){"avx512 on SIMDe", &moem_cpu_kern_avx512_emu};
	return n;
}

static int open_kern(const struct moem_cpu_kern *k, uint32_t threads, struct moem_backend **be)
{
	struct moem_backend_opts o = {.threads = threads, .isa = MOEM_CPU_ISA_SCALAR};
	struct moem_cpu_hooks h = {.kern = k};

	return moem_cpu_backend_open_hooks(&o, &h, be);
}

/* One grouped FFN call: experts ex[0..ne), expert j takes tokens tok[j][0..n[j]) into slot j. */
struct call {
	uint32_t B, H, I, ne;
	struct tb_expert ex[6];
	uint16_t *x;
	uint32_t n[6];
	uint16_t tok[6][64];
};

static void call_make(struct call *c, uint64_t seed, uint32_t B, uint32_t H, uint32_t I,
		      uint32_t ne)
{
	struct moem_rng r;

	moem_rng_seed(&r, seed, 0);
	memset(c, 0, sizeof(*c));
	c->B = B;
	c->H = H;
	c->I = I;
	c->ne = ne;
	for (uint32_t j = 0; j < ne; j++) {
		tb_expert_make(&c->ex[j], (enum moem_prec)(j % MOEM_PREC_NR), H, I, seed * 7 + j);
		for (uint32_t t = 0; t < B; t++)
			if (j == 0 || moem_rng_below(&r, 3))
				c->tok[j][c->n[j]++] = (uint16_t)t;
		if (!c->n[j])
			c->tok[j][c->n[j]++] = (uint16_t)(j % B);
	}
	c->x = tb_rand_bf16(seed * 13 + 1, (size_t)B * H, 1.0);
}

static void call_free(struct call *c)
{
	for (uint32_t j = 0; j < c->ne; j++)
		tb_expert_free(&c->ex[j]);
	free(c->x);
}

/* Run c on be into out [B][ne][H] (NaN where no expert wrote). */
static int call_run(struct moem_backend *be, const struct call *c, float *out)
{
	struct moem_ffn_expert fe[6];
	struct moem_ffn_assign as[6 * 64];
	struct moem_ffn_args a = {.B = c->B, .H = c->H, .I = c->I, .n_slots = c->ne};
	size_t outn = (size_t)c->B * c->ne * c->H;
	uint32_t na = 0;
	int ret;

	for (size_t i = 0; i < outn; i++)
		out[i] = NAN;
	for (uint32_t j = 0; j < c->ne; j++) {
		fe[j] = (struct moem_ffn_expert){tb_put(be, c->ex[j].blob, c->ex[j].l.bytes),
						 c->ex[j].l.prec, na, c->n[j]};
		for (uint32_t t = 0; t < c->n[j]; t++)
			as[na++] = (struct moem_ffn_assign){c->tok[j][t], (uint16_t)j};
	}
	a.x = tb_put(be, c->x, 2 * (size_t)c->B * c->H);
	a.out = tb_put(be, out, 4 * outn);
	a.n_experts = c->ne;
	a.experts = fe;
	a.n_assign = na;
	a.assign = as;
	ret = moem_op_ffn(be, NULL, &a);
	if (!ret)
		ret = tb_get(be, out, a.out, 4 * outn);
	for (uint32_t j = 0; j < c->ne; j++)
		moem_be_free(be, fe[j].blob);
	moem_be_free(be, a.x);
	moem_be_free(be, a.out);
	return ret;
}

static double row_err(const float *a, const float *ref, uint32_t H)
{
	double num = 0, den = 0;

	for (uint32_t h = 0; h < H; h++) {
		num = fmax(num, fabs((double)a[h] - ref[h]));
		den = fmax(den, fabs((double)ref[h]));
	}
	return den > 0 ? num / den : num;
}

TEST(isa_names_checks_and_errors)
{
	struct moem_backend_opts o = {.threads = 1};
	struct moem_backend *be;
	struct moem_backend_info info;
	enum moem_cpu_isa isa;

	ASSERT_EQ(0, moem_cpu_isa_parse("avx2", &isa));
	EXPECT_EQ(MOEM_CPU_ISA_AVX2, isa);
	EXPECT_EQ(-EINVAL, moem_cpu_isa_parse("avx3", &isa));
	EXPECT_NE(NULL, strstr(moem_last_error(), "avx3"));
	EXPECT_EQ(0, moem_cpu_isa_check(MOEM_CPU_ISA_SCALAR));
	EXPECT_EQ(-EINVAL, moem_cpu_isa_check((enum moem_cpu_isa)9));
	/* the best path opens, and says which it is */
	o.isa = moem_cpu_isa_best();
	ASSERT_EQ(0, moem_backend_open("cpu", &o, &be)) TH_LOG("%s", moem_last_error());
	moem_backend_get_info(be, &info);
	EXPECT_EQ(o.isa, info.isa);
	EXPECT_NE(NULL, strstr(info.device, moem_cpu_isa_name(o.isa))) TH_LOG("%s", info.device);
	moem_backend_close(be);
	/* a path the CPU lacks is a clear error at open, never SIGILL later */
	for (int i = MOEM_CPU_ISA_AVX2; i < MOEM_CPU_ISA_NR; i++) {
		if (moem_cpu_isa_check((enum moem_cpu_isa)i) == 0)
			continue;
		o.isa = (enum moem_cpu_isa)i;
		EXPECT_EQ(-ENOTSUP, moem_backend_open("cpu", &o, &be));
		EXPECT_NE(NULL, strstr(moem_last_error(), "lacks")) TH_LOG("%s", moem_last_error());
	}
	/* the environment override, and its errors */
	o.isa = MOEM_CPU_ISA_AUTO;
	setenv("MOEM_CPU_ISA", "scalar", 1);
	ASSERT_EQ(0, moem_backend_open("cpu", &o, &be));
	moem_backend_get_info(be, &info);
	EXPECT_EQ(MOEM_CPU_ISA_SCALAR, info.isa);
	moem_backend_close(be);
	setenv("MOEM_CPU_ISA", "neon", 1);
	EXPECT_EQ(-EINVAL, moem_backend_open("cpu", &o, &be));
	EXPECT_NE(NULL, strstr(moem_last_error(), "MOEM_CPU_ISA=neon"))
	TH_LOG("%s", moem_last_error());
	if (moem_cpu_isa_check(MOEM_CPU_ISA_AVX512)) {
		setenv("MOEM_CPU_ISA", "avx512", 1);
		EXPECT_EQ(-ENOTSUP, moem_backend_open("cpu", &o, &be));
		EXPECT_NE(NULL, strstr(moem_last_error(), "MOEM_CPU_ISA=avx512"));
	}
	/* an explicit choice is not overridden by the environment */
	o.isa = MOEM_CPU_ISA_SCALAR;
	EXPECT_EQ(0, moem_backend_open("cpu", &o, &be));
	moem_backend_close(be);
	unsetenv("MOEM_CPU_ISA");
}

/* Whole grouped FFN calls, every path against the scalar backend, random shapes and batches. */
TEST(ffn_every_path_matches_scalar)
{
	static const uint32_t shapes[][2] = {{128, 128}, {384, 256}, {640, 384}, {256, 640}};
	static const uint32_t batches[] = {1, 2, 3, 5, 8, 13, 31, 64};
	struct kcase kc[6];
	int nk = kcases(kc);
	struct moem_backend *ref;
	double worst[6][MOEM_PREC_NR] = {{0}};

	ASSERT_EQ(0, open_kern(&moem_cpu_kern_scalar, 2, &ref));
	for (unsigned int s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (unsigned int bi = s % 2; bi < sizeof(batches) / sizeof(batches[0]); bi += 2) {
			struct call c;
			float *want, *got;
			size_t n;

			call_make(&c, 100 + s * 10 + bi, batches[bi], shapes[s][0], shapes[s][1],
				  5);
			n = (size_t)c.B * c.ne * c.H;
			want = malloc(4 * n);
			got = malloc(4 * n);
			ASSERT_EQ(0, call_run(ref, &c, want)) TH_LOG("%s", moem_last_error());
			for (int k = 0; k < nk; k++) {
				struct moem_backend *be;

				ASSERT_EQ(0, open_kern(kc[k].k, 2, &be));
				ASSERT_EQ(0, call_run(be, &c, got)) TH_LOG("%s", moem_last_error());
				moem_backend_close(be);
				for (uint32_t j = 0; j < c.ne; j++)
					for (uint32_t i = 0; i < c.n[j]; i++) {
						size_t o = ((size_t)c.tok[j][i] * c.ne + j) * c.H;
						enum moem_prec p = c.ex[j].l.prec;
						double e = row_err(got + o, want + o, c.H);

						worst[k][p] = fmax(worst[k][p], e);
						ASSERT_LE(e, tol_for(kc[k].k, p))
						TH_LOG("%s %s H %u I %u B %u token %u: err %g",
						       kc[k].name, moem_prec_name(p), c.H, c.I, c.B,
						       c.tok[j][i], e);
					}
			}
			free(want);
			free(got);
			call_free(&c);
		}
	for (int k = 0; k < nk; k++)
		TH_LOG("%s: worst rel err bf16 %.2e q8 %.2e q4 %.2e q2 %.2e", kc[k].name,
		       worst[k][0], worst[k][1], worst[k][2], worst[k][3]);
	moem_backend_close(ref);
}

/* The kernels alone on odd row ranges and token subsets: the tile edges. */
TEST(rows_odd_ranges_match_scalar)
{
	struct kcase kc[6];
	int nk = kcases(kc);
	struct moem_rng r;

	moem_rng_seed(&r, 5, 0);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		const uint32_t H = 384, I = 256, B = 11;
		struct tb_expert ex;
		const struct moem_qmat_layout *l;
		float *xf = tb_rand_f32(40 + p, (size_t)B * H, 1.0);

		for (size_t i = 0; i < (size_t)B * H; i++) /* FFN inputs are bf16 */
			xf[i] = moem_bf16_to_f32(moem_f32_to_bf16(xf[i]));

		ASSERT_EQ(0, tb_expert_make(&ex, (enum moem_prec)p, H, I, 50 + p));
		l = &ex.l.mat[MOEM_MAT_GATE];
		for (int k = 0; k < nk; k++) {
			uint32_t fmts = (1u << CPU_ACT_F32) | (1u << kc[k].k->fmt[p]);
			for (int trial = 0; trial < 6; trial++) {
				uint32_t r0 = (uint32_t)moem_rng_below(&r, I - 8);
				uint32_t r1 = r0 + 1 + (uint32_t)moem_rng_below(&r, 9);
				uint32_t T = 1 + (uint32_t)moem_rng_below(&r, B), tok[16];
				float want[16 * 16], got[16 * 16];
				static float scratch[MOEM_CPU_SCRATCH_FLOATS(384)];
				struct cpu_act a;

				if (r1 > I)
					r1 = I;
				for (uint32_t t = 0; t < T; t++)
					tok[t] = (uint32_t)moem_rng_below(&r, B);
				ASSERT_EQ(0, moem_cpu_prepare_act(xf, B, H, fmts, &a));
				moem_cpu_kern_scalar.rows[p](l,
							     ex.blob + ex.l.mat_off[MOEM_MAT_GATE],
							     r0, r1, &a, tok, T, want, 16, scratch);
				kc[k].k->rows[p](l, ex.blob + ex.l.mat_off[MOEM_MAT_GATE], r0, r1,
						 &a, tok, T, got, 16, scratch);
				moem_cpu_free_act(&a);
				for (uint32_t t = 0; t < T; t++) {
					double num = 0, den = 0;

					for (uint32_t i = 0; i < r1 - r0; i++) {
						num = fmax(num, fabs(got[t * 16 + i] -
								     want[t * 16 + i]));
						den = fmax(den, fabs(want[t * 16 + i]));
					}
					/* a few rows: scale by the row's own size, plus slack */
					ASSERT_LE(num, 2 * tol_for(kc[k].k, p) * den + 1e-6)
					TH_LOG("%s %s rows %u..%u T %u", kc[k].name,
					       moem_prec_name(p), r0, r1, T);
				}
			}
		}
		free(xf);
		tb_expert_free(&ex);
	}
}

/*
 * R x K bf16 weights w as a row kernel's matrix of precision p, layout in
 * *l: w itself for bf16, else quantized into memory of its own (free()
 * it when it is not w). NULL on a layout or quantization error.
 */
static uint8_t *kern_mat(enum moem_prec p, uint16_t *w, uint32_t R, uint32_t K,
			 struct moem_qmat_layout *l)
{
	uint8_t *q;

	if (p == MOEM_PREC_BF16) {
		*l = (struct moem_qmat_layout){.prec = MOEM_PREC_BF16,
					       .rows = R,
					       .cols = K,
					       .row_bytes = 2 * K,
					       .bytes = (uint64_t)2 * R * K};
		return (uint8_t *)w;
	}
	if (moem_qmat_layout(p, R, K, l))
		return NULL;
	q = aligned_alloc(64, (l->bytes + 63) & ~(uint64_t)63);
	if (q && moem_quantize(p, w, R, K, q, l->bytes)) {
		free(q);
		q = NULL;
	}
	return q;
}

/*
 * The kernels alone: every output of a call over 73 rows x 64 tokens has
 * the same bits as the same row and token computed alone (one row, one
 * token: decode's GEMV) and as in calls over every smaller token count
 * 1..12 and row ranges with every remainder of the row and token tiles
 * (bf16 3 x 4 and 4 x 1-2 on AVX2, quantized 1 x 4, short rows 4 x 1
 * at batch 1 and 2 x 4), and each token alone over all rows. K 384 is
 * three quantized groups of 128 (an odd number), K 1152 nine (8 in the
 * min term's vector lanes, 1 after; q2: 16 and 2), K 320 five blocks of
 * 64 (q2 only: AVX-512 takes blocks in pairs), K 832 thirteen (q2 only:
 * AVX-512 takes q2 in groups of 4 blocks, two groups at a time, then
 * one group and a block left over), and 73 rows leave 1 over
 * the tiles of 2, 3 and 4; on AMX 73 rows are four row tiles of 16 and a
 * last tile moved back to end on row 72, 64 tokens two groups of 32 and
 * the smaller calls one group of 16.
 */
TEST(rows_same_bits_for_any_call_shape)
{
	static const uint32_t Ks[] = {256, 320, 384, 832, 1152};
	const uint32_t R = 73, B = 64;
	struct kcase kc[6];
	int nk = kcases(kc);
	struct moem_rng rng;

	kc[nk++] = (struct kcase){"scalar", &moem_cpu_kern_scalar};
	moem_rng_seed(&rng, 11, 0);
	for (unsigned int ki = 0; ki < sizeof(Ks) / sizeof(Ks[0]); ki++)
		for (int p = 0; p < MOEM_PREC_NR; p++) {
			const uint32_t K = Ks[ki];
			struct moem_qmat_layout l;
			uint16_t *w;
			float *xf, *full, *part;
			static float scratch[MOEM_CPU_SCRATCH_FLOATS(1152)]; /* kern.h */
			uint32_t tok[64];
			uint8_t *q;

			/* K 320, 832: q2 only (odd blocks a row); q8 and q4 groups are 128 */
			if (p != MOEM_PREC_BF16 && K % 128 && p != MOEM_PREC_Q2)
				continue;
			w = tb_rand_bf16(90 + p, (size_t)R * K, 0.05);
			xf = tb_rand_f32(95 + p, (size_t)B * K, 1.0);
			full = malloc(4 * (size_t)B * R);
			part = malloc(4 * (size_t)B * R);

			for (size_t i = 0; i < (size_t)B * K; i++) /* FFN inputs are bf16 */
				xf[i] = moem_bf16_to_f32(moem_f32_to_bf16(xf[i]));
			q = kern_mat((enum moem_prec)p, w, R, K, &l);
			ASSERT_NE(NULL, q);
			for (uint32_t t = 0; t < B; t++) /* the tokens out of order */
				tok[t] = (t * 29 + 5) % B;
			for (int k = 0; k < nk; k++) {
				const struct moem_cpu_kern *kt = kc[k].k;
				const char *pn = moem_prec_name((enum moem_prec)p);
				uint32_t fmts = (1u << CPU_ACT_F32) | (1u << kt->fmt[p]);
				struct cpu_act a;

				ASSERT_EQ(0, moem_cpu_prepare_act(xf, B, K, fmts, &a));
				kt->rows[p](&l, q, 0, R, &a, tok, B, full, R, scratch);
				/* each output alone */
				for (uint32_t t = 0; t < B; t++)
					for (uint32_t r = 0; r < R; r++) {
						float one;

						kt->rows[p](&l, q, r, r + 1, &a, &tok[t], 1, &one,
							    1, scratch);
						ASSERT_EQ(0, memcmp(&one, &full[t * R + r], 4))
						TH_LOG("%s %s K %u: row %u token %u alone %a, in "
						       "73 x "
						       "64 %a",
						       kc[k].name, pn, K, r, tok[t], one,
						       full[t * R + r]);
					}
				/* each token alone over all rows (batch 1's row tiles) */
				for (uint32_t t = 0; t < B; t++) {
					kt->rows[p](&l, q, 0, R, &a, &tok[t], 1, part, R, scratch);
					ASSERT_EQ(0, memcmp(part, full + t * R, 4 * R))
					TH_LOG("%s %s K %u: token %u alone over %u rows",
					       kc[k].name, pn, K, tok[t], R);
				}
				/* every token count 1..12 at random rows and a random first token */
				for (uint32_t n = 1; n <= 12; n++) {
					uint32_t r0 = (uint32_t)moem_rng_below(&rng, R - 1);
					uint32_t r1 =
						r0 + 1 + (uint32_t)moem_rng_below(&rng, R - r0);
					/* a group's first row (in place) or any */
					uint32_t t0 =
						n % 2 ? 16 * (uint32_t)moem_rng_below(
								     &rng, (B - n) / 16 + 1)
						      : (uint32_t)moem_rng_below(&rng, B - n + 1);

					kt->rows[p](&l, q, r0, r1, &a, tok + t0, n, part, r1 - r0,
						    scratch);
					for (uint32_t t = 0; t < n; t++)
						ASSERT_EQ(0, memcmp(part + t * (r1 - r0),
								    full + (t0 + t) * R + r0,
								    4 * (r1 - r0)))
					TH_LOG("%s %s K %u: rows %u..%u x %u tokens from %u",
					       kc[k].name, pn, K, r0, r1, n, t0);
				}
				if (kt == &moem_cpu_kern_amx && p != MOEM_PREC_BF16) {
					/*
					 * The B tiles laid out beforehand (QT, as the FFN
					 * does), the call's tokens in call order: 64
					 * tokens, 37 from the 6th (a last group of 5) and
					 * 34 from the 10th (2 past the last group).
					 */
					static const uint32_t cs[][2] = {{0, 64}, {5, 37}, {9, 34}};
					uint8_t *qt = aligned_alloc(64, (size_t)B * K);

					ASSERT_NE(NULL, qt);
					a.v[CPU_ACT_QT] = qt;
					for (unsigned int ci = 0; ci < 3; ci++) {
						const uint32_t t0 = cs[ci][0], n = cs[ci][1];

						for (uint32_t c = 0; c < n; c += 16)
							moem_cpu_amxq_pack(
								(enum moem_prec)p, a.v[kt->fmt[p]],
								tok + t0 + c, moem_min(16, n - c),
								K, qt, c);
						kt->rows[p](&l, q, 0, R, &a, tok + t0, n, part, R,
							    scratch);
						ASSERT_EQ(0, memcmp(part, full + t0 * R,
								    4 * (size_t)n * R))
						TH_LOG("amx QT %s K %u: 73 x %u from %u", pn, K, n,
						       t0);
					}
					a.v[CPU_ACT_QT] = NULL;
					free(qt);
				}
				moem_cpu_free_act(&a);
				if (kt != &moem_cpu_kern_amx || p != MOEM_PREC_BF16)
					continue;
				/*
				 * AMX with the B tiles laid out beforehand (VNNI, as the
				 * FFN does): loaded in place for a group's rows, gathered
				 * from it otherwise; the bits of the bf16 rows' calls.
				 */
				ASSERT_EQ(0,
					  moem_cpu_prepare_act(xf, B, K, 1u << CPU_ACT_VNNI, &a));
				kt->rows[p](&l, q, 0, R, &a, tok, B, part, R, scratch);
				ASSERT_EQ(0, memcmp(part, full, 4 * (size_t)B * R))
				TH_LOG("amx VNNI K %u: 73 x 64 out of order", K);
				for (uint32_t n = 1; n <= B; n += 1 + n / 2) {
					/* a group's first row (in place) or any */
					uint32_t t0 =
						n % 2 ? 16 * (uint32_t)moem_rng_below(
								     &rng, (B - n) / 16 + 1)
						      : (uint32_t)moem_rng_below(&rng, B - n + 1);
					uint32_t r0 = (uint32_t)moem_rng_below(&rng, R - 1), id[64];

					for (uint32_t t = 0; t < n; t++)
						id[t] = t0 + t;
					kt->rows[p](&l, q, r0, R, &a, id, n, part, R - r0, scratch);
					for (uint32_t t = 0; t < n; t++) {
						uint32_t at =
							0; /* where token t0 + t sits in full */

						while (tok[at] != t0 + t)
							at++;
						ASSERT_EQ(0,
							  memcmp(part + t * (R - r0),
								 full + at * R + r0, 4 * (R - r0)))
						TH_LOG("amx VNNI K %u: rows %u.. x %u tokens from "
						       "%u, in place",
						       K, r0, n, t0);
					}
				}
				moem_cpu_free_act(&a);
			}
			if (q != (uint8_t *)w)
				free(q);
			free(w);
			free(xf);
			free(full);
			free(part);
		}
}

/*
 * Matrices of fewer than 16 rows (a row tile of its own on AMX; the amx
 * quantized kernels' panels repeat the last row) and 1..20 tokens (on
 * amx: the VNNI form below 4 tokens, the AMX form from 4, a group of 16
 * and the VNNI form for the rest past 16): within tolerance of the
 * scalar kernels, and each token's outputs the bits of that token alone.
 */
TEST(rows_small_matrices_match_scalar)
{
	static const uint32_t Rs[] = {1, 5, 15};
	const uint32_t K = 384, B = 20;
	struct kcase kc[6];
	int nk = kcases(kc);
	static float scratch[MOEM_CPU_SCRATCH_FLOATS(384)];

	for (unsigned int ri = 0; ri < sizeof(Rs) / sizeof(Rs[0]); ri++)
		for (int p = 0; p < MOEM_PREC_NR; p++) {
			const uint32_t R = Rs[ri];
			uint16_t *w = tb_rand_bf16(70 + p, (size_t)R * K, 0.05);
			float *xf = tb_rand_f32(75 + p, (size_t)B * K, 1.0);
			float want[20 * 15], got[20 * 15], one[15];
			struct moem_qmat_layout l;
			uint32_t tok[20];
			uint8_t *q;

			for (size_t i = 0; i < (size_t)B * K; i++) /* FFN inputs are bf16 */
				xf[i] = moem_bf16_to_f32(moem_f32_to_bf16(xf[i]));
			q = kern_mat((enum moem_prec)p, w, R, K, &l);
			ASSERT_NE(NULL, q);
			for (uint32_t t = 0; t < B; t++)
				tok[t] = (t * 7 + 3) % B;
			for (int k = 0; k < nk; k++) {
				const struct moem_cpu_kern *kt = kc[k].k;
				uint32_t fmts = (1u << CPU_ACT_F32) | (1u << kt->fmt[p]) |
						(1u << moem_cpu_kern_scalar.fmt[p]);
				struct cpu_act a;
				double den = 0;

				ASSERT_EQ(0, moem_cpu_prepare_act(xf, B, K, fmts, &a));
				/* the outputs' scale: a row of few outputs may sum to about 0 */
				moem_cpu_kern_scalar.rows[p](&l, q, 0, R, &a, tok, B, want, R,
							     scratch);
				for (uint32_t i = 0; i < B * R; i++)
					den = fmax(den, fabs(want[i]));
				for (uint32_t T = 1; T <= B; T++) {
					moem_cpu_kern_scalar.rows[p](&l, q, 0, R, &a, tok, T, want,
								     R, scratch);
					kt->rows[p](&l, q, 0, R, &a, tok, T, got, R, scratch);
					for (uint32_t t = 0; t < T; t++) {
						double num = 0;

						for (uint32_t i = 0; i < R; i++)
							num = fmax(num, fabs(got[t * R + i] -
									     want[t * R + i]));
						ASSERT_LE(num, 2 * tol_for(kt, p) * den + 1e-6)
						TH_LOG("%s %s %u rows x %u tokens: token %u off by "
						       "%g of %g",
						       kc[k].name, moem_prec_name(p), R, T, t, num,
						       den);
						kt->rows[p](&l, q, 0, R, &a, &tok[t], 1, one, R,
							    scratch);
						ASSERT_EQ(0, memcmp(one, got + t * R, 4 * R))
						TH_LOG("%s %s %u rows: token %u of %u alone",
						       kc[k].name, moem_prec_name(p), R, t, T);
					}
				}
				moem_cpu_free_act(&a);
			}
			if (q != (uint8_t *)w)
				free(q);
			free(w);
			free(xf);
		}
}

/* Bits do not depend on the thread count, nor on which tokens share a call. */
TEST(same_bits_for_any_threads_and_batch)
{
	static const uint32_t threads[] = {1, 2, 5};
	struct kcase kc[6];
	int nk = kcases(kc);
	struct call c, one;

	kc[nk++] = (struct kcase){"scalar", &moem_cpu_kern_scalar};
	call_make(&c, 7, 37, 384, 256, 4);
	for (int k = 0; k < nk; k++) {
		size_t n = (size_t)c.B * c.ne * c.H;
		float *first = malloc(4 * n), *got = malloc(4 * n), *solo = malloc(4 * c.ne * c.H);

		for (unsigned int ti = 0; ti < 3; ti++) {
			struct moem_backend *be;

			ASSERT_EQ(0, open_kern(kc[k].k, threads[ti], &be));
			ASSERT_EQ(0, call_run(be, &c, ti ? got : first));
			if (ti) {
				EXPECT_EQ(0, memcmp(first, got, 4 * n))
				TH_LOG("%s: %u threads differ from 1", kc[k].name, threads[ti]);
			}
			moem_backend_close(be);
		}
		/* token 0 alone (every expert takes it) against its row in the batch */
		{
			struct moem_backend *be;

			one = c;
			one.B = 1;
			one.x = c.x;
			for (uint32_t j = 0; j < c.ne; j++) {
				one.n[j] = 1;
				one.tok[j][0] = 0;
			}
			ASSERT_EQ(0, open_kern(kc[k].k, 2, &be));
			ASSERT_EQ(0, call_run(be, &one, solo));
			moem_backend_close(be);
			for (uint32_t j = 0; j < c.ne; j++) {
				if (c.tok[j][0] != 0)
					continue;
				EXPECT_EQ(0, memcmp(solo + (size_t)j * c.H, first + (size_t)j * c.H,
						    4 * c.H))
				TH_LOG("%s: expert %u, token 0 alone differs from in a batch of %u",
				       kc[k].name, j, c.B);
			}
		}
		free(first);
		free(got);
		free(solo);
	}
	call_free(&c);
}

/* y = x w^T on be (moem_op_matmul, the decoder's dense projections); w of wbytes in prec. */
static int mm_run_p(struct moem_backend *be, const uint16_t *x, const void *w, size_t wbytes,
		    enum moem_prec p, uint32_t B, uint32_t K, uint32_t R, float *y)
{
	struct moem_matmul_args a = {B,
				     K,
				     R,
				     tb_put(be, x, 2 * (size_t)B * K),
				     tb_put(be, w, wbytes),
				     tb_zeros(be, 4 * (size_t)B * R),
				     p};
	int ret = moem_op_matmul(be, NULL, &a);

	if (!ret)
		ret = tb_get(be, y, a.y, 4 * (size_t)B * R);
	moem_be_free(be, a.x);
	moem_be_free(be, a.w);
	moem_be_free(be, a.y);
	return ret;
}

static int mm_run(struct moem_backend *be, const uint16_t *x, const uint16_t *w, uint32_t B,
		  uint32_t K, uint32_t R, float *y)
{
	return mm_run_p(be, x, w, 2 * (size_t)R * K, MOEM_PREC_BF16, B, K, R, y);
}

/*
 * The dense matmul runs on the FFN's bf16 row kernels: every ISA within
 * its bf16 tolerance of the scalar table and of a double-precision sum
 * (K up to 2048 adds sqrt(2048/640) to the fp32 reordering bound: 2e-5
 * there); the same bits for 1 and 3 threads and for a token alone; K not
 * a multiple of 32 (AVX-512's step) falls back and still agrees.
 */
TEST(matmul_every_path_matches_scalar)
{
	static const uint32_t shapes[][3] = {
		{1, 2048, 300}, {7, 512, 129}, {64, 264, 40}, {3, 8, 17}, {5, 96, 9}};
	struct kcase kc[6];
	int nk = kcases(kc);

	kc[nk++] = (struct kcase){"scalar", &moem_cpu_kern_scalar};
	for (unsigned int s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		const uint32_t B = shapes[s][0], K = shapes[s][1], R = shapes[s][2];
		uint16_t *x = tb_rand_bf16(40 + s, (size_t)B * K, 1.0);
		uint16_t *w = tb_rand_bf16(50 + s, (size_t)R * K, 0.05);
		float *want = malloc(4 * (size_t)B * R), *got = malloc(4 * (size_t)B * R);
		float *got3 = malloc(4 * (size_t)B * R), *solo = malloc(4 * (size_t)R);
		double *ref = malloc(8 * (size_t)B * R);
		struct moem_backend *be;

		for (uint32_t t = 0; t < B; t++)
			for (uint32_t r = 0; r < R; r++) {
				double acc = 0;

				for (uint32_t k = 0; k < K; k++)
					acc += (double)moem_bf16_to_f32(x[(size_t)t * K + k]) *
					       moem_bf16_to_f32(w[(size_t)r * K + k]);
				ref[(size_t)t * R + r] = acc;
			}
		ASSERT_EQ(0, open_kern(&moem_cpu_kern_scalar, 2, &be));
		ASSERT_EQ(0, mm_run(be, x, w, B, K, R, want)) TH_LOG("%s", moem_last_error());
		moem_backend_close(be);
		EXPECT_LE(tb_rel_err(want, ref, (size_t)B * R), 2e-5);
		for (int k = 0; k < nk; k++) {
			double tol = kc[k].k->fmt[MOEM_PREC_BF16] == CPU_ACT_BF16 && K % 32 == 0
					     ? tol_bf16
					     : 2e-5;

			ASSERT_EQ(0, open_kern(kc[k].k, 1, &be));
			ASSERT_EQ(0, mm_run(be, x, w, B, K, R, got));
			moem_backend_close(be);
			for (uint32_t t = 0; t < B; t++) {
				EXPECT_LE(row_err(got + (size_t)t * R, want + (size_t)t * R, R),
					  tol)
				TH_LOG("%s B %u K %u R %u token %u", kc[k].name, B, K, R, t);
			}
			ASSERT_EQ(0, open_kern(kc[k].k, 3, &be));
			ASSERT_EQ(0, mm_run(be, x, w, B, K, R, got3));
			ASSERT_EQ(0, mm_run(be, x + (size_t)(B - 1) * K, w, 1, K, R, solo));
			moem_backend_close(be);
			EXPECT_EQ(0, memcmp(got, got3, 4 * (size_t)B * R))
			TH_LOG("%s K %u: 3 threads differ from 1", kc[k].name, K);
			EXPECT_EQ(0, memcmp(solo, got + (size_t)(B - 1) * R, 4 * (size_t)R))
			TH_LOG("%s K %u: the last token alone differs from in the batch",
			       kc[k].name, K);
		}
		free(x);
		free(w);
		free(want);
		free(got);
		free(got3);
		free(solo);
		free(ref);
	}
}

/*
 * Quantized dense weights (moem_decode --dense-prec): the matrix in
 * moem_qmat_layout, x quantized per token in the row kernel's format as
 * the FFN's input is, so each ISA path stands within the FFN's
 * tolerance of the scalar oracle for that precision (tol_for(), derived
 * at the top: the error is the int8 activation quantization's, per
 * block of 64, and a row of K >= 256 averages at least as much as the
 * FFN's H = 128); the same bits for 1 and 3 threads and for a token
 * alone; and K not a whole number of groups, or no such precision, is
 * refused.
 */
TEST(matmul_quantized_every_path_matches_scalar)
{
	static const uint32_t shapes[][3] = {{1, 2048, 300}, {5, 768, 33}, {64, 256, 40}};
	struct kcase kc[6];
	int nk = kcases(kc);
	struct moem_backend *be;
	uint16_t *x0 = tb_rand_bf16(1, 8 * 200, 1.0), *w0 = tb_rand_bf16(2, 8 * 200, 0.05);
	float y0[64];

	kc[nk++] = (struct kcase){"scalar", &moem_cpu_kern_scalar};
	for (int p = MOEM_PREC_Q8; p < MOEM_PREC_NR; p++)
		for (unsigned int s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			const uint32_t B = shapes[s][0], K = shapes[s][1], R = shapes[s][2];
			uint16_t *x = tb_rand_bf16(60 + s, (size_t)B * K, 1.0);
			uint16_t *w = tb_rand_bf16(70 + s, (size_t)R * K, 0.05);
			float *want = malloc(4 * (size_t)B * R), *got = malloc(4 * (size_t)B * R);
			float *got3 = malloc(4 * (size_t)B * R), *solo = malloc(4 * (size_t)R);
			struct moem_qmat_layout l;
			void *q;

			ASSERT_EQ(0, moem_qmat_layout((enum moem_prec)p, R, K, &l));
			q = calloc(1, l.bytes);
			ASSERT_NE(NULL, q);
			ASSERT_EQ(0, moem_quantize((enum moem_prec)p, w, R, K, q, l.bytes));
			ASSERT_EQ(0, open_kern(&moem_cpu_kern_scalar, 2, &be));
			ASSERT_EQ(0, mm_run_p(be, x, q, l.bytes, (enum moem_prec)p, B, K, R, want))
			TH_LOG("%s", moem_last_error());
			moem_backend_close(be);
			for (int k = 0; k < nk; k++) {
				const char *pn = moem_prec_name((enum moem_prec)p);

				ASSERT_EQ(0, open_kern(kc[k].k, 1, &be));
				ASSERT_EQ(0, mm_run_p(be, x, q, l.bytes, (enum moem_prec)p, B, K, R,
						      got));
				moem_backend_close(be);
				for (uint32_t t = 0; t < B; t++) {
					EXPECT_LE(row_err(got + (size_t)t * R, want + (size_t)t * R,
							  R),
						  tol_for(kc[k].k, (enum moem_prec)p))
					TH_LOG("%s %s B %u K %u R %u token %u", kc[k].name, pn, B,
					       K, R, t);
				}
				ASSERT_EQ(0, open_kern(kc[k].k, 3, &be));
				ASSERT_EQ(0, mm_run_p(be, x, q, l.bytes, (enum moem_prec)p, B, K, R,
						      got3));
				ASSERT_EQ(0, mm_run_p(be, x + (size_t)(B - 1) * K, q, l.bytes,
						      (enum moem_prec)p, 1, K, R, solo));
				moem_backend_close(be);
				EXPECT_EQ(0, memcmp(got, got3, 4 * (size_t)B * R))
				TH_LOG("%s %s K %u: 3 threads differ from 1", kc[k].name, pn, K);
				EXPECT_EQ(0, memcmp(solo, got + (size_t)(B - 1) * R, 4 * (size_t)R))
				TH_LOG("%s %s K %u: the last token alone differs from in the batch",
				       kc[k].name, pn, K);
			}
			free(q);
			free(x);
			free(w);
			free(want);
			free(got);
			free(got3);
			free(solo);
		}
	/* K 200 is no whole number of q8's groups; 7 is no precision */
	ASSERT_EQ(0, open_kern(&moem_cpu_kern_scalar, 1, &be));
	EXPECT_EQ(-EINVAL, mm_run_p(be, x0, w0, 2 * 8 * 200, MOEM_PREC_Q8, 8, 200, 8, y0));
	EXPECT_EQ(-EINVAL, mm_run_p(be, x0, w0, 2 * 8 * 200, (enum moem_prec)7, 8, 200, 8, y0));
	moem_backend_close(be);
	free(x0);
	free(w0);
}

/* Page -> node for the made-up topology: expert j's blob on node j % 2. */
struct fake_nodes {
	const void *blob[8];
	int n;
};

static uint16_t fake_node_of(const void *addr, void *arg)
{
	struct fake_nodes *f = arg;

	for (int i = 0; i < f->n; i++)
		if (f->blob[i] == addr)
			return (uint16_t)(i % 2);
	return MOEM_CPU_NODE_ANY;
}

/*
 * Two nodes, four workers (the caller and a thread on node 0, two
 * threads on node 1): every FFN item runs on a worker of its expert's
 * node, both nodes work, and the result is the one-node result.
 */
/*
 * The activation quantizer (ffn.c, kern.h) against its definition written
 * out here with libm: per block of 64, sx = amax / 127, q = nearbyintf(x /
 * sx), the block sum in order, each format's element order. The library
 * runs an AVX2 clone of it on this machine (vroundss for nearbyintf);
 * every byte and float must be the same. Rows of mixed magnitudes, with
 * zero blocks and values that land on .5 after the division.
 */
TEST(quantized_activations_match_definition)
{
	const uint32_t rows = 5, K = 1152, NB = K / 64;
	const uint32_t fmts = (1u << CPU_ACT_QNAT) | (1u << CPU_ACT_QU8) | (1u << CPU_ACT_QEO) |
			      (1u << CPU_ACT_QM4) | (1u << CPU_ACT_QM4X) | (1u << CPU_ACT_QEO2);
	float *x = tb_rand_f32(41, (size_t)rows * K, 3.0);
	struct cpu_act a;

	ASSERT_NE(NULL, x);
	for (uint32_t i = 0; i < 64; i++) /* row 1, block 3: all zero */
		x[K + 3 * 64 + i] = 0.0f;
	for (uint32_t i = 0; i < 64; i++) /* row 2, block 0: k + 0.5 steps of amax 127 */
		x[2 * K + i] = i == 0 ? 127.0f : (float)(i % 9) - 4.5f;
	ASSERT_EQ(0, moem_cpu_prepare_act(x, rows, K, fmts, &a));
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t b = 0; b < NB; b++) {
			const float *xb = x + (size_t)r * K + (size_t)b * 64;
			size_t o = (size_t)r * K + (size_t)b * 64;
			float amax = 0.0f, sum = 0.0f, sx;

			for (uint32_t i = 0; i < 64; i++) {
				amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
				sum += xb[i];
			}
			sx = amax / 127.0f;
			ASSERT_EQ(0, memcmp(&sx, &a.qs[(size_t)r * NB + b], 4))
			TH_LOG("row %u block %u: scale %a, want %a", r, b, a.qs[r * NB + b], sx);
			ASSERT_EQ(0, memcmp(&sum, &a.xs[(size_t)r * NB + b], 4))
			TH_LOG("row %u block %u: sum %a, want %a", r, b, a.xs[r * NB + b], sum);
			for (uint32_t i = 0; i < 64; i++) {
				float q = sx > 0.0f ? nearbyintf(xb[i] / sx) : 0.0f;
				int8_t want = (int8_t)(q > 127.0f ? 127 : q < -127.0f ? -127 : q);
				const int8_t *nat = a.v[CPU_ACT_QNAT], *eo = a.v[CPU_ACT_QEO];
				const int8_t *m4 = a.v[CPU_ACT_QM4], *m4x = a.v[CPU_ACT_QM4X];
				const int8_t *eo2 = a.v[CPU_ACT_QEO2];
				/* QEO2: pairs of blocks (all 18), evens of both, then odds */
				size_t oe = (size_t)r * K + (size_t)(b / 2) * 128 + (i & 1) * 64 +
					    (b % 2) * 32;
				/* QM4X: groups of 4 blocks (16 blocks of 18), the last 2 as QM4 */
				size_t ox = b < 16 ? (size_t)r * K + (size_t)(b / 4) * 256 +
							     (i & 3) * 64 + (b % 4) * 16
						   : o + (i & 3) * 16;
				const uint8_t *u8 = a.v[CPU_ACT_QU8];

				ASSERT_EQ(want, nat[o + i])
				TH_LOG("row %u block %u element %u: %d, want %d", r, b, i,
				       nat[o + i], want);
				ASSERT_EQ(want, eo[o + (i & 1) * 32 + i / 2]);
				ASSERT_EQ(want, m4[o + (i & 3) * 16 + i / 4]);
				ASSERT_EQ(want, m4x[ox + i / 4]);
				ASSERT_EQ(want, eo2[oe + i / 2]);
				ASSERT_EQ((uint8_t)(want + 128), u8[o + i]);
			}
		}
	moem_cpu_free_act(&a);
	free(x);
}

/*
 * A block holding a NaN, anywhere in it, gets scale NaN and every q 0 (so
 * the outputs that read it are NaN, as the fp32 paths give); the blocks
 * around it are untouched. A NaN followed by finite values used to be
 * forgotten by the amax scan, and the NaN element converted to int8.
 */
TEST(nan_in_a_block_makes_its_scale_nan)
{
	const uint32_t K = 256, NB = K / 64;
	const uint32_t fmts = (1u << CPU_ACT_QNAT) | (1u << CPU_ACT_QU8);
	float *x = tb_rand_f32(43, K, 2.0);
	struct cpu_act a;

	ASSERT_NE(NULL, x);
	for (uint32_t at = 0; at < 64; at += 21) {
		x[64 + at] = NAN; /* block 1: first, middle, last-ish */
		ASSERT_EQ(0, moem_cpu_prepare_act(x, 1, K, fmts, &a));
		EXPECT_TRUE(isnan(a.qs[1])) TH_LOG("NaN at %u: scale %a", at, a.qs[1]);
		for (uint32_t i = 0; i < 64; i++)
			ASSERT_EQ(0, ((const int8_t *)a.v[CPU_ACT_QNAT])[64 + i]);
		for (uint32_t b = 0; b < NB; b++)
			if (b != 1)
				EXPECT_TRUE(isfinite(a.qs[b]) && a.qs[b] > 0.0f);
		moem_cpu_free_act(&a);
		x[64 + at] = 0.5f;
	}
	free(x);
}

TEST(numa_work_follows_expert_pages)
{
	struct moem_cpu_topo topo = {.n_nodes = 2, .n_cpus = 4, .node_id = {0, 1}};
	struct fake_nodes fn = {0};
	struct moem_cpu_hooks h = {.topo = &topo, .node_of = fake_node_of, .node_arg = &fn};
	struct moem_backend_opts o = {.threads = 4, .isa = MOEM_CPU_ISA_SCALAR};
	struct moem_ffn_expert fe[4];
	struct moem_ffn_assign as[4 * 8];
	struct moem_backend *be, *one;
	struct tb_expert ex[4];
	uint16_t *x = tb_rand_bf16(3, 8 * 256, 1.0);
	float *o1 = malloc(4 * 8 * 4 * 256), *o2 = malloc(4 * 8 * 4 * 256);
	struct moem_ffn_args a = {.B = 8, .H = 256, .I = 128, .n_slots = 4};
	struct moem_backend_info info;

	for (int i = 0; i < 4; i++) {
		topo.cpu[i] = i;
		topo.node[i] = (uint16_t)(i % 2);
	}
	ASSERT_EQ(0, moem_cpu_backend_open_hooks(&o, &h, &be)) TH_LOG("%s", moem_last_error());
	moem_backend_get_info(be, &info);
	EXPECT_EQ(2u, info.numa_nodes);
	EXPECT_FALSE(info.pinned); /* never to made-up CPUs */
	ASSERT_EQ(0, open_kern(&moem_cpu_kern_scalar, 4, &one));
	for (int run = 0; run < 2; run++) {
		struct moem_backend *b = run ? one : be;
		uint32_t na = 0;

		a.x = tb_put(b, x, 2 * 8 * 256);
		a.out = tb_zeros(b, 4 * 8 * 4 * 256);
		for (uint32_t j = 0; j < 4; j++) {
			if (!run)
				ASSERT_EQ(0, tb_expert_make(&ex[j], (enum moem_prec)j, 256, 128,
							    60 + j));
			fe[j] = (struct moem_ffn_expert){tb_put(b, ex[j].blob, ex[j].l.bytes),
							 ex[j].l.prec, na, 8};
			fn.blob[j] = moem_dptr_host(fe[j].blob);
			for (uint16_t t = 0; t < 8; t++)
				as[na++] = (struct moem_ffn_assign){t, (uint16_t)j};
		}
		fn.n = 4;
		a.n_experts = 4;
		a.experts = fe;
		a.n_assign = na;
		a.assign = as;
		ASSERT_EQ(0, moem_op_ffn(b, NULL, &a)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, tb_get(b, run ? o2 : o1, a.out, 4 * 8 * 4 * 256));
		for (uint32_t j = 0; j < 4; j++)
			moem_be_free(b, fe[j].blob);
		moem_be_free(b, a.x);
		moem_be_free(b, a.out);
	}
	EXPECT_EQ(0, memcmp(o1, o2, 4 * 8 * 4 * 256));
	/* 4 experts x (128/16 gate/up + 256/32 down) items, half per node */
	EXPECT_EQ(0u, moem_cpu_backend_node_items(be, 0, 1));
	EXPECT_EQ(0u, moem_cpu_backend_node_items(be, 1, 0));
	EXPECT_EQ(32u, moem_cpu_backend_node_items(be, 0, 0));
	EXPECT_EQ(32u, moem_cpu_backend_node_items(be, 1, 1));
	moem_backend_close(be);
	moem_backend_close(one);
	for (int j = 0; j < 4; j++)
		tb_expert_free(&ex[j]);
	free(x);
	free(o1);
	free(o2);
}

/*
 * moem_cpu_swiglu(): within 2 ulp of silu(g) * u computed in double over
 * g in [-88, 88] (further down e^-g is past FLT_MAX, as expf's), and the
 * special values as g / (1 + expf(-g)) * u gives them.
 */
TEST(swiglu_is_silu_times_up)
{
	enum { N = 1 << 16 };
	static const float sp[] = {NAN,	    INFINITY, -INFINITY, 0.0f,	-0.0f, -88.8f,
				   -100.0f, 1e-30f,   -1e-30f,	 87.5f, 200.0f};
	const uint32_t ns = sizeof(sp) / sizeof(sp[0]);
	float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
	float *o = malloc(sizeof(float) * N);
	int64_t worst = 0;

	ASSERT_TRUE(g && u && o);
	for (uint32_t i = 0; i < N; i++) {
		g[i] = (float)(-88.0 + 176.0 * i / (N - 1));
		u[i] = i % 3 ? 1.0f : -0.75f;
	}
	moem_cpu_swiglu(g, u, o, N);
	for (uint32_t i = 0; i < N; i++) {
		float want = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
		int64_t d = tb_f32_ulps(o[i], want);

		worst = d > worst ? d : worst;
	}
	EXPECT_LE(worst, 2);
	memcpy(g, sp, sizeof(sp));
	for (uint32_t i = 0; i < ns; i++)
		u[i] = 1.0f;
	moem_cpu_swiglu(g, u, o, ns);
	for (uint32_t i = 0; i < ns; i++) {
		float want = g[i] / (1.0f + expf(-g[i])) * u[i];

		if (isnan(want)) {
			EXPECT_TRUE(isnan(o[i]));
		} else {
			EXPECT_EQ(0, tb_f32_ulps(o[i], want));
		}
	}
	free(g);
	free(u);
	free(o);
}

/*
 * The quantizer's block statistics: the AVX2 and AVX-512 forms (where
 * the CPU has them) and the AVX-512 one on SIMDe give the plain form's
 * amax and sum for every block (NaN for NaN), over rows with NaNs,
 * infinities, -0 and every count of blocks 1..QSTAT.
 */
TEST(block_stats_forms_agree)
{
	enum { NB = 37, FORMS = 3 };
	float *x = malloc(sizeof(float) * NB * MOEM_CPU_QBLOCK);
	uint32_t bad = 0, ran[FORMS + 1] = {0};
	struct moem_rng r;

	ASSERT_NE(NULL, x);
	moem_rng_seed(&r, 7, 0);
	for (int trial = 0; trial < 400; trial++) {
		for (uint32_t i = 0; i < NB * MOEM_CPU_QBLOCK; i++) {
			uint32_t u = moem_rng_below(&r, 4000);

			x[i] = (float)(moem_rng_f64(&r) * 200.0 - 100.0);
			x[i] = u == 0	? NAN
			       : u == 1 ? INFINITY
			       : u == 2 ? -INFINITY
			       : u == 3 ? -0.0f
					: x[i];
		}
		for (uint32_t blk = 0; blk < NB; blk += MOEM_CPU_QSTAT) {
			uint32_t n = NB - blk < MOEM_CPU_QSTAT ? NB - blk : MOEM_CPU_QSTAT;
			float a0[MOEM_CPU_QSTAT], s0[MOEM_CPU_QSTAT];

			n = trial % 3 ? n : 1 + (uint32_t)trial % n;
			ASSERT_EQ(MOEM_CPU_STATS_PLAIN,
				  moem_cpu_block_stats(x, blk, n, a0, s0, MOEM_CPU_STATS_PLAIN));
			for (int f = 1; f <= FORMS; f++) {
				float a1[MOEM_CPU_QSTAT], s1[MOEM_CPU_QSTAT];

				if (f < FORMS) {
					if (moem_cpu_block_stats(x, blk, n, a1, s1,
								 (enum moem_cpu_stats_form)f) !=
					    (enum moem_cpu_stats_form)f)
						continue;
				} else {
					moem_cpu_block_stats_avx512_emu(x, blk, n, a1, s1);
				}
				ran[f]++;
				for (uint32_t j = 0; j < n; j++) {
					bad += isnan(a0[j]) != isnan(a1[j]) ||
					       (!isnan(a0[j]) &&
						memcmp(&a0[j], &a1[j], sizeof(float)));
					bad += isnan(s0[j]) != isnan(s1[j]) ||
					       (!isnan(s0[j]) &&
						memcmp(&s0[j], &s1[j], sizeof(float)));
				}
			}
		}
	}
	EXPECT_EQ(0u, bad);
	EXPECT_LT(0u, ran[FORMS]);
	TH_LOG("forms run: avx2 %u, avx512 %u, avx512 on SIMDe %u times", ran[1], ran[2], ran[3]);
	free(x);
}

/* The engine settings that size and steer the CPU backend, and their errors. */
TEST(cpu_settings)
{
	struct moem_engine_args a;
	char n[16];

	moem_engine_args_init(&a);
	snprintf(n, sizeof(n), "%u", moem_cpu_count());
	EXPECT_EQ(0, moem_engine_args_set(&a, "cpu-threads", n));
	EXPECT_EQ(moem_cpu_count(), a.o.threads);
	EXPECT_EQ(0, moem_engine_args_set(&a, "cpu-threads", "1"));
	EXPECT_EQ(1u, a.o.threads);
	EXPECT_GT(0, moem_engine_args_set(&a, "cpu-threads", "0"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "cpu-threads")) TH_LOG("%s", moem_last_error());
	snprintf(n, sizeof(n), "%u", moem_cpu_count() + 1);
	EXPECT_GT(0, moem_engine_args_set(&a, "cpu-threads", n));
	EXPECT_NE(NULL, strstr(moem_last_error(), "lets moem use")) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(1u, a.o.threads);				/* unchanged by the refusals */
	EXPECT_EQ(0, moem_engine_args_set(&a, "threads", "0")); /* older name: every CPU */
	EXPECT_EQ(0, moem_engine_args_set(&a, "cpu-isa", "scalar"));
	EXPECT_EQ(MOEM_CPU_ISA_SCALAR, a.o.cpu_isa);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-isa", "sse9"));
	EXPECT_EQ(MOEM_CPU_ISA_SCALAR, a.o.cpu_isa);
	moem_engine_args_free(&a);
}

TEST_HARNESS_MAIN
