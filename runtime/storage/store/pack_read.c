// SPDX-License-Identifier: GPL-2.0-only
/* Reading an opened pack's data (pack.h): blobs and tensors, checksums checked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/half.h>
#include <moem/pack.h>

#include "pack_int.h"
#include "store_int.h"

int moem_pack_pread(const struct moem_pack *p, void *buf, size_t len, uint64_t off)
{
	int ret;

	if (p->fd >= 0)
		return moem_store_pread_all(p->fd, buf, len, off, p->path);
	ret = p->io.pread(p->io.arg, buf, len, off);
	if (ret)
		return moem_errf(-ret, "%s: read of %zu bytes at %llu failed", p->path, len,
				 (unsigned long long)off);
	return 0;
}

int moem_pack_verify_blob(const struct moem_pack_blob *b, const void *data)
{
	uint64_t sum = XXH3_64bits(data, (size_t)b->size);
	char desc[96];

	if (sum != b->xxh3)
		return moem_errf(EBADMSG, "blob %s: checksum %016llx, the index says %016llx",
				 moem_pack_blob_desc(b, desc, sizeof(desc)),
				 (unsigned long long)sum, (unsigned long long)b->xxh3);
	return 0;
}

int moem_pack_read_blob(const struct moem_pack *p, const struct moem_pack_blob *b, void *dst,
			uint64_t len)
{
	int ret;

	if (len < b->size)
		return moem_errf(ENOSPC, "read blob: %llu-byte buffer for %llu bytes",
				 (unsigned long long)len, (unsigned long long)b->size);
	ret = moem_pack_pread(p, dst, (size_t)b->size, b->offset);
	if (ret)
		return ret;
	return moem_pack_verify_blob(b, dst);
}

/* -EBADMSG naming the tensor when sum is not the index's checksum of it. */
static int tensor_sum_check(const struct moem_pack *p, const struct moem_pack_tensor *t,
			    uint64_t sum)
{
	if (sum != t->xxh3)
		return moem_errf(EBADMSG, "%s: tensor %s: checksum %016llx, the index says %016llx",
				 p->path, t->name, (unsigned long long)sum,
				 (unsigned long long)t->xxh3);
	return 0;
}

int moem_pack_read_tensor(const struct moem_pack *p, const struct moem_pack_tensor *t, void *dst,
			  uint64_t len)
{
	int ret;

	if (len < t->size)
		return moem_errf(ENOSPC, "read tensor %s: %llu-byte buffer for %llu bytes", t->name,
				 (unsigned long long)len, (unsigned long long)t->size);
	ret = moem_pack_pread(p, dst, (size_t)t->size, t->offset);
	if (ret)
		return ret;
	return tensor_sum_check(p, t, XXH3_64bits(dst, (size_t)t->size));
}

int moem_pack_read_tensor_f32(const struct moem_pack *p, const struct moem_pack_tensor *t,
			      float *dst, uint64_t nelem)
{
	uint16_t *h;
	int ret;

	if (nelem != t->nelem)
		return moem_errf(EINVAL, "tensor %s has %llu elements, caller expects %llu",
				 t->name, (unsigned long long)t->nelem, (unsigned long long)nelem);
	if (t->dtype == MOEM_DTYPE_F32)
		return moem_pack_read_tensor(p, t, dst, nelem * 4);
	h = malloc((size_t)t->size);
	if (!h)
		return -ENOMEM;
	ret = moem_pack_read_tensor(p, t, h, t->size);
	for (uint64_t i = 0; !ret && i < nelem; i++)
		dst[i] = t->dtype == MOEM_DTYPE_BF16 ? moem_bf16_to_f32(h[i])
						     : moem_f16_to_f32(h[i]);
	free(h);
	return ret;
}

#define CONVERT_CHUNK (64u << 10)

/* An f32 tensor to bf16 through a bounce buffer, its checksum taken as it streams. */
static int read_f32_as_bf16(const struct moem_pack *p, const struct moem_pack_tensor *t,
			    uint16_t *dst)
{
	float *f = malloc(CONVERT_CHUNK);
	XXH3_state_t *st = XXH3_createState();
	uint64_t at = 0;
	int ret = 0;

	if (!f || !st) {
		ret = -ENOMEM;
		goto out;
	}
	XXH3_64bits_reset(st);
	for (uint64_t o = 0; o < t->size; o += CONVERT_CHUNK) {
		size_t n = (size_t)moem_min((uint64_t)CONVERT_CHUNK, t->size - o);

		ret = moem_pack_pread(p, f, n, t->offset + o);
		if (ret)
			break;
		XXH3_64bits_update(st, f, n);
		for (size_t i = 0; i < n / 4; i++)
			dst[at++] = moem_f32_to_bf16(f[i]);
	}
	if (!ret)
		ret = tensor_sum_check(p, t, XXH3_64bits_digest(st));
out:
	XXH3_freeState(st);
	free(f);
	return ret;
}

int moem_pack_read_tensor_bf16(const struct moem_pack *p, const struct moem_pack_tensor *t,
			       uint16_t *dst, uint64_t nelem)
{
	int ret;

	if (nelem != t->nelem)
		return moem_errf(EINVAL, "tensor %s has %llu elements, caller expects %llu",
				 t->name, (unsigned long long)t->nelem, (unsigned long long)nelem);
	if (t->dtype == MOEM_DTYPE_F32)
		return read_f32_as_bf16(p, t, dst);
	ret = moem_pack_read_tensor(p, t, dst, nelem * 2);
	if (!ret && t->dtype == MOEM_DTYPE_F16)
		for (uint64_t i = 0; i < nelem; i++)
			dst[i] = moem_f32_to_bf16(moem_f16_to_f32(dst[i]));
	return ret;
}

#define VERIFY_CHUNK (8u << 20)

static int verify_range(const struct moem_pack *p, XXH3_state_t *st, uint8_t *buf, uint64_t off,
			uint64_t size, uint64_t want, const char *what, struct moem_progress *prog)
{
	uint64_t sum;
	int ret;

	XXH3_64bits_reset(st);
	for (uint64_t o = 0; o < size; o += VERIFY_CHUNK) {
		size_t n = (size_t)moem_min((uint64_t)VERIFY_CHUNK, size - o);

		ret = moem_pack_pread(p, buf, n, off + o);
		if (ret)
			return ret;
		XXH3_64bits_update(st, buf, n);
		if (prog)
			moem_progress_add(prog, n);
	}
	sum = XXH3_64bits_digest(st);
	if (sum != want)
		return moem_errf(EBADMSG, "%s: %s: checksum %016llx, the index says %016llx",
				 p->path, what, (unsigned long long)sum, (unsigned long long)want);
	return 0;
}

int moem_pack_verify(const struct moem_pack *p, struct moem_progress *prog)
{
	uint8_t *buf = malloc(VERIFY_CHUNK);
	XXH3_state_t *st = XXH3_createState();
	uint64_t total = 0;
	char desc[112];
	int ret = 0;

	if (!buf || !st) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < p->n_tens; i++)
		total += p->tens[i].size;
	for (uint32_t i = 0; i < p->n_blobs; i++)
		total += p->blobs[i].size;
	if (prog)
		moem_progress_start(prog, "verify", total, true);
	for (uint32_t i = 0; i < p->n_tens && !ret; i++) {
		snprintf(desc, sizeof(desc), "tensor %s", p->tens[i].name);
		ret = verify_range(p, st, buf, p->tens[i].offset, p->tens[i].size, p->tens[i].xxh3,
				   desc, prog);
	}
	for (uint32_t i = 0; i < p->n_blobs && !ret; i++) {
		char bd[96];

		snprintf(desc, sizeof(desc), "blob %s",
			 moem_pack_blob_desc(&p->blobs[i], bd, sizeof(bd)));
		ret = verify_range(p, st, buf, p->blobs[i].offset, p->blobs[i].size,
				   p->blobs[i].xxh3, desc, prog);
	}
	if (prog)
		moem_progress_finish(prog);
out:
	free(buf);
	XXH3_freeState(st);
	return ret;
}
