// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: a pack's header and index (moem_pack_open_io). The
 * input is the start of a pack; the file continues with zeros up to the
 * size its header claims (capped), so inputs stay small while offsets can
 * point anywhere. Checksums are skipped in this build
 * (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) so the checks behind them are
 * reached. An accepted pack must answer every lookup inside the file.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/pack.h>

#define VIRTUAL_EXTRA (64u << 20)

struct vfile {
	const uint8_t *data;
	size_t len;
};

static int vread(void *arg, void *buf, size_t len, uint64_t off)
{
	const struct vfile *v = arg;

	memset(buf, 0, len);
	if (off < v->len)
		memcpy(buf, v->data + off, len < v->len - off ? len : v->len - off);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vfile v = {data, size};
	struct moem_pack_io io = {.pread = vread, .arg = &v};
	const struct moem_model_config *c;
	struct moem_synth_params sp;
	struct moem_pack *p;
	uint64_t claimed = 0;
	char desc[96];

	/* the header's file_size (bytes 16..23) within a bounded extension */
	if (size >= 24)
		memcpy(&claimed, data + 16, 8);
	io.size = claimed >= size && claimed - size <= VIRTUAL_EXTRA ? claimed : size;
	if (moem_pack_open_io(&io, "fuzz.moem", &p))
		return 0;
	c = moem_pack_config(p);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		for (uint32_t e = 0; e < c->n_experts; e++)
			for (int q = 0; q < MOEM_PREC_NR; q++) {
				const struct moem_pack_blob *b = moem_pack_expert(p, l, e, q);

				if (b &&
				    (b->offset + b->size > io.size || b->size != b->layout.bytes))
					abort();
			}
		(void)moem_pack_shared(p, l, MOEM_PREC_BF16);
		(void)moem_pack_dense(p, l, MOEM_PREC_BF16);
		(void)moem_pack_tensor_role(p, MOEM_TR_ROUTER, l);
	}
	for (uint32_t i = 0; i < moem_pack_n_blobs(p); i++)
		moem_pack_blob_desc(moem_pack_blob_at(p, i), desc, sizeof(desc));
	for (uint32_t i = 0; i < moem_pack_n_tensors(p); i++) {
		const struct moem_pack_tensor *t = moem_pack_tensor_at(p, i);

		if (moem_pack_tensor(p, t->name) != t || t->offset + t->size > io.size)
			abort();
	}
	(void)moem_pack_synth(p, &sp);
	moem_pack_close(p);
	return 0;
}
