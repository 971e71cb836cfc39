/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Expert weight precisions and their byte layout (ALGORITHMS.md,
 * "Quantization formats"). The same layout is written into .moem packs,
 * copied unchanged into HBM and read directly by the CPU and CUDA FFN
 * kernels: staging is one read and one copy, never a repack.
 *
 * A weight matrix is W[rows][cols] as Hugging Face stores nn.Linear
 * weights (rows = out_features, cols = in_features); quantization groups
 * run along cols (the input dimension). A quantized matrix is planes,
 * each starting at a MOEM_QPLANE_ALIGN boundary inside the matrix:
 *
 *   bf16: data  u16[rows][cols]
 *   q8:   data  s8 [rows][cols]          symmetric, group 128
 *         scale f16[rows][cols/128]      x = q * scale
 *   q4:   data  u8 [rows][cols/2]        asymmetric, group 128;
 *                                        element 2j in the low nibble
 *         scale f16[rows][cols/128]      x = q * scale + min
 *         min   f16[rows][cols/128]
 *   q2:   data  u8 [rows][cols/4]        asymmetric, group 64;
 *                                        element 4j+i in bits 2i..2i+1
 *         scale f16[rows][cols/64]
 *         min   f16[rows][cols/64]
 *
 * Rounding (CPU and GPU agree bit for bit; see Documentation/pack-format):
 *   q8: s = f16(amax / 127);          q = clamp(rne(x / s), -127, 127)
 *   qN: s = f16((max - min) / (2^N-1)); m = f16(min);
 *       q = clamp(rne((x - m) / s), 0, 2^N - 1)
 * where every operation is one IEEE float32 operation (x, max, min are the
 * exact float values of the bf16 inputs), rne() rounds half to even
 * (nearbyintf / __float2int_rn), f16() rounds to nearest even, and s == 0
 * gives q = 0 (q8) or q = 0 with x = m (qN).
 *
 * An expert is three matrices, gate [inter][hidden], up [inter][hidden],
 * down [hidden][inter], each starting at MOEM_QMAT_ALIGN inside the blob.
 */
#ifndef MOEM_QUANT_H
#define MOEM_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum moem_prec {
	MOEM_PREC_BF16 = 0,
	MOEM_PREC_Q8 = 1,
	MOEM_PREC_Q4 = 2,
	MOEM_PREC_Q2 = 3,
	MOEM_PREC_NR
};

#define MOEM_QPLANE_ALIGN 256u
#define MOEM_QMAT_ALIGN	  4096u

struct moem_qmat_layout {
	enum moem_prec prec;
	uint32_t rows, cols;
	uint32_t group; /* elements per scale group (0 for bf16) */
	uint32_t groups_per_row;
	uint32_t row_bytes;		       /* bytes of one data row */
	uint64_t data_off, scale_off, min_off; /* scale/min 0 when absent */
	uint64_t bytes;			       /* whole matrix, multiple of MOEM_QPLANE_ALIGN */
};

enum moem_expert_mat { MOEM_MAT_GATE = 0, MOEM_MAT_UP = 1, MOEM_MAT_DOWN = 2, MOEM_MAT_NR };

struct moem_expert_layout {
	enum moem_prec prec;
	uint32_t hidden, inter;
	struct moem_qmat_layout mat[MOEM_MAT_NR];
	uint64_t mat_off[MOEM_MAT_NR]; /* offset of each matrix in the blob */
	uint64_t bytes;		       /* whole blob, multiple of MOEM_QMAT_ALIGN */
};

/* "bf16", "q8", "q4", "q2". */
const char *moem_prec_name(enum moem_prec p);
/* Parse a name; -EINVAL with a message for anything else. */
int moem_prec_parse(const char *s, enum moem_prec *out);
/* Parse a comma list ("bf16,q4") into a bit mask of 1 << prec. */
int moem_prec_parse_list(const char *s, uint32_t *mask);
/* Bits per weight including scales/mins, for reports. */
double moem_prec_bits_per_weight(enum moem_prec p);

/*
 * Compute the layout of a rows x cols matrix. -EINVAL (with a message) if
 * a dimension is zero, cols is not a multiple of the group size, or the
 * size overflows.
 */
int moem_qmat_layout(enum moem_prec p, uint32_t rows, uint32_t cols, struct moem_qmat_layout *out);
int moem_expert_layout(enum moem_prec p, uint32_t hidden, uint32_t inter,
		       struct moem_expert_layout *out);

/*
 * Quantize a bf16 matrix (rows x cols, row-major) into dst laid out as
 * moem_qmat_layout() says; dst_len must be at least layout.bytes. Padding
 * bytes between planes are zeroed. -ERANGE if a scale overflows fp16.
 */
int moem_quantize(enum moem_prec p, const uint16_t *src, uint32_t rows, uint32_t cols, void *dst,
		  uint64_t dst_len);

/* Dequantize row r of a matrix in the layout above into out[cols]. */
void moem_dequantize_row(const struct moem_qmat_layout *l, const void *mat, uint32_t r, float *out);

/*
 * Worst-case |x - dequant(quant(x))| for one group of a matrix, from the
 * stored scale and min and the group's true min/max (the documented
 * bound the round-trip tests check).
 */
double moem_quant_group_bound(const struct moem_qmat_layout *l, const void *mat, uint32_t r,
			      uint32_t g, float gmin, float gmax);

/*
 * Reference expert FFN, SwiGLU, in double precision:
 *   y = down( silu(gate x) * (up x) )
 * x[hidden] in float; the blob in layout l (any precision); y[hidden].
 * Slow and simple on purpose: the oracle for kernels and error reports.
 */
int moem_ffn_ref(const struct moem_expert_layout *l, const void *blob, const float *x, double *y);

#endif /* MOEM_QUANT_H */
