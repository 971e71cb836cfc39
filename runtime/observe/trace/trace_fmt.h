/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * On-disk layout of a routing trace (Documentation/trace-format.md), shared
 * by the writer and the reader. Every integer is little-endian; floats are
 * IEEE binary32 stored as their little-endian bit patterns.
 *
 *   file   = header record* end
 *   header = 128 bytes in 1.0, 144 since 1.1 (header_bytes may grow in a
 *            later minor version: readers skip what they do not know),
 *            xxh64 at offset 120 computed with those 8 bytes zero
 *   1.1 adds, after byte 128: expert shape (hidden, moe_inter) and the
 *            pre-gate depth D; with D > 0 every route record is followed
 *            by a pre-gate record of the same (step, layer), which 1.0
 *            readers skip as a record of unknown type
 *   record = 16-byte record header, body, zero padding to 8 bytes,
 *            xxh64 (8 bytes) of everything before it
 */
#ifndef MOEM_TRACE_FMT_H
#define MOEM_TRACE_FMT_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#define TRC_MAGIC	 "MOEMTRCE"
#define TRC_HDR_BYTES	 128u
#define TRC_HDR_BYTES_1	 144u
#define TRC_HDR_MAX	 4096u
#define TRC_HDR_CSUM_OFF 120u

#define TRC_REC_MAGIC	   0x4345524du /* "MREC" */
#define TRC_REC_HDR	   16u
#define TRC_REC_ROUTE	   1u
#define TRC_REC_END	   2u
#define TRC_REC_PREGATE	   3u
#define TRC_ROUTE_FIXED	   40u /* header + step, layer, tokens, k, reserved */
#define TRC_END_BYTES	   40u /* header + n_records + reserved + checksum */
#define TRC_ROUTE_F_LOGITS (1u << 0)
/* Records of unknown type larger than this are taken as corruption. */
#define TRC_UNKNOWN_MAX	   (64u << 20)
#define TRC_ID_NONE	   0xffffu

/* Header field offsets. */
enum {
	TRC_H_MAGIC = 0,
	TRC_H_MAJOR = 8,
	TRC_H_MINOR = 10,
	TRC_H_BYTES = 12,
	TRC_H_FLAGS = 16,
	TRC_H_SOURCE = 20,
	TRC_H_LAYERS = 24,
	TRC_H_EXPERTS = 28,
	TRC_H_TOPK = 32,
	TRC_H_MAXTOK = 36,
	TRC_H_SEED = 40,
	TRC_H_DESC = 48,
	TRC_H_RESERVED = 112,
	TRC_H_HIDDEN = 128, /* 1.1 */
	TRC_H_INTER = 132,
	TRC_H_PREGATE = 136,
	TRC_H_NGROUP = 140, /* 1.2: u16 n_group, u16 topk_group */
	TRC_H_TOPKGROUP = 142,
};

static inline void trc_put16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static inline void trc_put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void trc_put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static inline void trc_putf(uint8_t *p, float f)
{
	uint32_t v;

	memcpy(&v, &f, 4);
	trc_put32(p, v);
}

static inline uint16_t trc_get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static inline uint32_t trc_get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t trc_get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline float trc_getf(const uint8_t *p)
{
	uint32_t v = trc_get32(p);
	float f;

	memcpy(&f, &v, 4);
	return f;
}

/*
 * Bytes of a route record with these dimensions (header, body, padding,
 * checksum); 0 if they exceed the format's bounds. Dimensions are bounded
 * first, so the arithmetic cannot overflow.
 */
static inline uint64_t trc_route_bytes(uint32_t tokens, uint32_t k, uint32_t n_experts, int logits)
{
	uint64_t ids, n;

	if (tokens > 65536 || k > 64 || n_experts > 1024)
		return 0;
	ids = ((uint64_t)tokens * k * 2 + 3) & ~3ull;
	n = TRC_ROUTE_FIXED + ids + (uint64_t)tokens * k * 4;
	if (logits)
		n += (uint64_t)tokens * n_experts * 4;
	return ((n + 7) & ~7ull) + 8;
}

/* Bytes of a pre-gate record (same header and fixed part as a route record). */
static inline uint64_t trc_pregate_bytes(uint32_t tokens, uint32_t k, uint32_t depth)
{
	uint64_t n;

	if (tokens > 65536 || k > 64 || depth > 16)
		return 0;
	n = TRC_ROUTE_FIXED + (uint64_t)depth * tokens * k * 2;
	return ((n + 7) & ~7ull) + 8;
}

/* Shape checks shared by writer and reader; message via moem_errf. */
int moem_trc_check_info(const char *what, uint32_t flags, uint32_t source, uint32_t n_layers,
			uint32_t n_experts, uint32_t top_k, uint32_t max_tokens);
/* The 1.1 fields: expert shape (both 0 or both set), pre-gate depth. */
int moem_trc_check_ext(const char *what, uint32_t hidden, uint32_t inter, uint32_t depth);
/* The expert groups of a header against its N and k (route.h). */
int moem_trc_check_groups(const struct moem_trace_info *in);

#endif /* MOEM_TRACE_FMT_H */
