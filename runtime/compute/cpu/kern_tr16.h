/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The 16 x 16 dword transpose in AVX-512 registers that the AMX kernels
 * (B tiles, C tiles) and the AVX-512 quantized kernels (16 rows' weights
 * into the lanes) share. Included after the file's intrinsics header and
 * its INL (kern_avx512.c also in its SIMDe build).
 */
#ifndef MOEM_CPU_KERN_TR16_H
#define MOEM_CPU_KERN_TR16_H

/* r[j] = column j of the 16 x 16 dwords r[0..15]. */
INL void tr16(__m512i *r)
{
	__m512i t[16];

#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
		r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
		r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++) {
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
			t[8 * i + 4 + j] =
				_mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
		}
	}
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
		r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
	}
}

#endif /* MOEM_CPU_KERN_TR16_H */
