// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU quantizers for the formats of quant.h. The rounding rules here are
 * the reference: the CUDA quantize kernel must produce the same bytes.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <moem/error.h>
#include <moem/half.h>
#include <moem/quant.h>

struct prec_desc {
	const char *name;
	uint32_t bits;	/* per weight in the data plane */
	uint32_t group; /* 0 for bf16 */
	int has_min;
};

static const struct prec_desc precs[MOEM_PREC_NR] = {
	[MOEM_PREC_BF16] = {"bf16", 16, 0, 0},
	[MOEM_PREC_Q8] = {"q8", 8, 128, 0},
	[MOEM_PREC_Q4] = {"q4", 4, 128, 1},
	[MOEM_PREC_Q2] = {"q2", 2, 64, 1},
};

const char *moem_prec_name(enum moem_prec p)
{
	return (unsigned int)p < MOEM_PREC_NR ? precs[p].name : "?";
}

int moem_prec_parse(const char *s, enum moem_prec *out)
{
	for (int i = 0; i < MOEM_PREC_NR; i++) {
		if (!strcmp(s, precs[i].name)) {
			*out = (enum moem_prec)i;
			return 0;
		}
	}
	return moem_errf(EINVAL, "unknown precision '%s' (bf16, q8, q4, q2)", s);
}

int moem_prec_parse_list(const char *s, uint32_t *mask)
{
	char buf[128], *save = NULL, *tok;
	enum moem_prec p;
	int ret;

	if (!s || strlen(s) >= sizeof(buf))
		return moem_errf(EINVAL, "bad precision list");
	strcpy(buf, s);
	*mask = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		ret = moem_prec_parse(tok, &p);
		if (ret)
			return ret;
		if (*mask & (1u << p))
			return moem_errf(EINVAL, "precision '%s' listed twice", tok);
		*mask |= 1u << p;
	}
	if (!*mask)
		return moem_errf(EINVAL, "empty precision list");
	return 0;
}

double moem_prec_bits_per_weight(enum moem_prec p)
{
	const struct prec_desc *d = &precs[p];

	if (!d->group)
		return d->bits;
	return d->bits + (16.0 * (1 + d->has_min)) / d->group;
}

int moem_qmat_layout(enum moem_prec p, uint32_t rows, uint32_t cols, struct moem_qmat_layout *l)
{
	const struct prec_desc *d;
	uint64_t data, plane, off;

	if ((unsigned int)p >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "bad precision %d", (int)p);
	d = &precs[p];
	if (!rows || !cols)
		return moem_errf(EINVAL, "empty %ux%u matrix", rows, cols);
	if (d->group && cols % d->group)
		return moem_errf(EINVAL, "%s needs the input dimension (%u) to be a multiple of %u",
				 d->name, cols, d->group);
	memset(l, 0, sizeof(*l));
	l->prec = p;
	l->rows = rows;
	l->cols = cols;
	l->group = d->group;
	l->groups_per_row = d->group ? cols / d->group : 0;
	l->row_bytes = (uint32_t)((uint64_t)cols * d->bits / 8);
	/* rows, cols < 2^32: every product below fits in 64 bits. */
	data = (uint64_t)rows * l->row_bytes;
	off = moem_align_up(data, MOEM_QPLANE_ALIGN);
	if (d->group) {
		plane = moem_align_up((uint64_t)rows * l->groups_per_row * 2, MOEM_QPLANE_ALIGN);
		l->scale_off = off;
		off += plane;
		if (d->has_min) {
			l->min_off = off;
			off += plane;
		}
	}
	l->bytes = off;
	return 0;
}

int moem_expert_layout(enum moem_prec p, uint32_t hidden, uint32_t inter,
		       struct moem_expert_layout *l)
{
	uint64_t off = 0;
	int ret;

	memset(l, 0, sizeof(*l));
	l->prec = p;
	l->hidden = hidden;
	l->inter = inter;
	ret = moem_qmat_layout(p, inter, hidden, &l->mat[MOEM_MAT_GATE]);
	if (!ret)
		ret = moem_qmat_layout(p, inter, hidden, &l->mat[MOEM_MAT_UP]);
	if (!ret)
		ret = moem_qmat_layout(p, hidden, inter, &l->mat[MOEM_MAT_DOWN]);
	if (ret)
		return ret;
	for (int m = 0; m < MOEM_MAT_NR; m++) {
		l->mat_off[m] = off;
		off = moem_align_up(off + l->mat[m].bytes, MOEM_QMAT_ALIGN);
	}
	l->bytes = off;
	return 0;
}

static void group_minmax(const uint16_t *x, uint32_t n, float *mn, float *mx)
{
	float lo = moem_bf16_to_f32(x[0]), hi = lo;

	for (uint32_t i = 1; i < n; i++) {
		float v = moem_bf16_to_f32(x[i]);

		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	*mn = lo;
	*mx = hi;
}

static int quant_q8_row(const uint16_t *src, const struct moem_qmat_layout *l, int8_t *q,
			uint16_t *scales)
{
	for (uint32_t g = 0; g < l->groups_per_row; g++) {
		const uint16_t *x = src + (size_t)g * l->group;
		float mn, mx, amax, s;
		uint16_t s16;

		group_minmax(x, l->group, &mn, &mx);
		amax = fmaxf(fabsf(mn), fabsf(mx));
		if (!isfinite(amax))
			return moem_errf(ERANGE, "non-finite weight");
		s16 = moem_f32_to_f16(amax / 127.0f);
		if ((s16 & 0x7c00u) == 0x7c00u)
			return moem_errf(ERANGE, "q8 scale %g overflows fp16", amax / 127.0);
		scales[g] = s16;
		s = moem_f16_to_f32(s16);
		for (uint32_t i = 0; i < l->group; i++) {
			float v = s != 0.0f ? nearbyintf(moem_bf16_to_f32(x[i]) / s) : 0.0f;

			v = fminf(fmaxf(v, -127.0f), 127.0f);
			q[(size_t)g * l->group + i] = (int8_t)v;
		}
	}
	return 0;
}

static int quant_asym_row(const uint16_t *src, const struct moem_qmat_layout *l, uint32_t bits,
			  uint8_t *q, uint16_t *scales, uint16_t *mins)
{
	const float qmax = (float)((1u << bits) - 1);
	const uint32_t per_byte = 8 / bits;

	memset(q, 0, l->row_bytes);
	for (uint32_t g = 0; g < l->groups_per_row; g++) {
		const uint16_t *x = src + (size_t)g * l->group;
		float mn, mx, s, m;
		uint16_t s16, m16;

		group_minmax(x, l->group, &mn, &mx);
		if (!isfinite(mn) || !isfinite(mx))
			return moem_errf(ERANGE, "non-finite weight");
		s16 = moem_f32_to_f16((mx - mn) / qmax);
		m16 = moem_f32_to_f16(mn);
		if ((s16 & 0x7c00u) == 0x7c00u || (m16 & 0x7c00u) == 0x7c00u)
			return moem_errf(ERANGE, "%u-bit scale or min overflows fp16", bits);
		scales[g] = s16;
		mins[g] = m16;
		s = moem_f16_to_f32(s16);
		m = moem_f16_to_f32(m16);
		for (uint32_t i = 0; i < l->group; i++) {
			uint32_t e = g * l->group + i;
			float v = s != 0.0f ? nearbyintf((moem_bf16_to_f32(x[i]) - m) / s) : 0.0f;
			uint32_t qi = (uint32_t)fminf(fmaxf(v, 0.0f), qmax);

			q[e / per_byte] |= (uint8_t)(qi << ((e % per_byte) * bits));
		}
	}
	return 0;
}

int moem_quantize(enum moem_prec p, const uint16_t *src, uint32_t rows, uint32_t cols, void *dst,
		  uint64_t dst_len)
{
	struct moem_qmat_layout l;
	uint8_t *out = dst;
	int ret;

	ret = moem_qmat_layout(p, rows, cols, &l);
	if (ret)
		return ret;
	if (dst_len < l.bytes)
		return moem_errf(ENOSPC, "quantize: %llu-byte buffer for a %llu-byte matrix",
				 (unsigned long long)dst_len, (unsigned long long)l.bytes);
	memset(out, 0, l.bytes);
	if (p == MOEM_PREC_BF16) {
		memcpy(out, src, (size_t)rows * cols * 2);
		return 0;
	}
	for (uint32_t r = 0; r < rows; r++) {
		const uint16_t *x = src + (size_t)r * cols;
		uint8_t *q = out + l.data_off + (size_t)r * l.row_bytes;
		uint16_t *sc = (uint16_t *)(out + l.scale_off) + (size_t)r * l.groups_per_row;
		uint16_t *mn = (uint16_t *)(out + l.min_off) + (size_t)r * l.groups_per_row;

		if (p == MOEM_PREC_Q8)
			ret = quant_q8_row(x, &l, (int8_t *)q, sc);
		else
			ret = quant_asym_row(x, &l, p == MOEM_PREC_Q4 ? 4 : 2, q, sc, mn);
		if (ret)
			return moem_err_prefix(-ret, "row %u", r);
	}
	return 0;
}

void moem_dequantize_row(const struct moem_qmat_layout *l, const void *mat, uint32_t r, float *out)
{
	const uint8_t *base = mat;
	const uint8_t *q = base + l->data_off + (size_t)r * l->row_bytes;
	const uint16_t *sc =
		(const uint16_t *)(base + l->scale_off) + (size_t)r * l->groups_per_row;
	const uint16_t *mn = (const uint16_t *)(base + l->min_off) + (size_t)r * l->groups_per_row;
	uint32_t bits = l->prec == MOEM_PREC_Q4 ? 4 : 2, per_byte = 8 / bits;

	switch (l->prec) {
	case MOEM_PREC_BF16:
		for (uint32_t i = 0; i < l->cols; i++) {
			uint16_t h;

			memcpy(&h, q + 2 * (size_t)i, 2);
			out[i] = moem_bf16_to_f32(h);
		}
		break;
	case MOEM_PREC_Q8:
		for (uint32_t i = 0; i < l->cols; i++)
			out[i] = (float)(int8_t)q[i] * moem_f16_to_f32(sc[i / l->group]);
		break;
	default:
		for (uint32_t i = 0; i < l->cols; i++) {
			uint32_t g = i / l->group;
			uint32_t qi =
				(q[i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1);

			out[i] = (float)qi * moem_f16_to_f32(sc[g]) + moem_f16_to_f32(mn[g]);
		}
		break;
	}
}

double moem_quant_group_bound(const struct moem_qmat_layout *l, const void *mat, uint32_t r,
			      uint32_t g, float gmin, float gmax)
{
	const uint8_t *base = mat;
	const uint16_t *sc, *mn;
	double s, m, qmax, exact;

	if (l->prec == MOEM_PREC_BF16)
		return 0.0;
	sc = (const uint16_t *)(base + l->scale_off) + (size_t)r * l->groups_per_row;
	s = moem_f16_to_f32(sc[g]);
	if (l->prec == MOEM_PREC_Q8) {
		/* half a step, plus the clamp at 127 when f16(s) < amax/127 */
		exact = fmax(fabs(gmin), fabs(gmax)) / 127.0;
		return 0.5 * s + 127.0 * fabs(s - exact) + 1e-12;
	}
	mn = (const uint16_t *)(base + l->min_off) + (size_t)r * l->groups_per_row;
	m = moem_f16_to_f32(mn[g]);
	qmax = l->prec == MOEM_PREC_Q4 ? 15.0 : 3.0;
	exact = ((double)gmax - gmin) / qmax;
	/* half a step, the rounding of min, and the drift of the top level */
	return 0.5 * s + fabs(m - gmin) + qmax * fabs(s - exact) + 1e-12;
}
