// SPDX-License-Identifier: GPL-2.0-only
/* NVMe -> DRAM staging of pack blobs through the loader: the tiers' stager (engine_int.h). */
#include <errno.h>
#include <stdlib.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/pack.h>
#include <moem/tiers.h>

#include "engine_int.h"

struct pack_stager {
	struct moem_stager s;
	struct moem_pack *pack;
	struct moem_loader *ld;
	uint32_t file;
	enum moem_prec prec[2];
	bool verify;
	uint32_t n_moe;
	uint32_t *layer_of; /* MoE index -> model layer */
};

struct stage_op {
	const struct moem_pack_blob *b;
	void *dst;
	bool verify;
	void (*done)(void *arg, int status);
	void *arg;
};

static void stage_done(void *arg, int err)
{
	struct stage_op *op = arg;

	if (!err && op->verify)
		err = moem_pack_verify_blob(op->b, op->dst);
	op->done(op->arg, err);
	free(op);
}

static int stage_read(struct moem_stager *s, uint32_t layer, uint32_t expert, uint32_t pi,
		      void *dst, uint64_t bytes, void (*done)(void *arg, int status), void *arg)
{
	struct pack_stager *ps = (struct pack_stager *)s;
	const struct moem_pack_blob *b;
	struct stage_op *op;
	int ret;

	if (layer >= ps->n_moe || pi > 1)
		return moem_errf(EINVAL, "stage: MoE layer %u / precision %u out of range", layer,
				 pi);
	b = moem_pack_expert(ps->pack, ps->layer_of[layer], expert, ps->prec[pi]);
	if (!b)
		return moem_errf(ENOENT, "stage: pack has no blob for layer %u expert %u %s",
				 ps->layer_of[layer], expert, moem_prec_name(ps->prec[pi]));
	if (b->size != bytes)
		return moem_errf(EINVAL, "stage: blob of %llu bytes, slot of %llu",
				 (unsigned long long)b->size, (unsigned long long)bytes);
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct stage_op){b, dst, ps->verify, done, arg};
	ret = moem_loader_read(ps->ld, ps->file, b->offset, b->size, dst, stage_done, op);
	if (ret)
		free(op);
	return ret;
}

int moem_eng_stager_create(struct moem_pack *pack, struct moem_loader *ld, uint32_t file_idx,
			   enum moem_prec hi, enum moem_prec lo, bool verify,
			   struct moem_stager **out)
{
	const struct moem_model_config *c = moem_pack_config(pack);
	struct pack_stager *ps = calloc(1, sizeof(*ps));

	if (!ps)
		return -ENOMEM;
	ps->layer_of = calloc(c->n_layers, sizeof(uint32_t));
	if (!ps->layer_of) {
		free(ps);
		return -ENOMEM;
	}
	for (uint32_t l = 0; l < c->n_layers; l++)
		if (moem_layer_is_moe(c, l))
			ps->layer_of[ps->n_moe++] = l;
	ps->s.read = stage_read;
	ps->pack = pack;
	ps->ld = ld;
	ps->file = file_idx;
	ps->prec[0] = hi;
	ps->prec[1] = lo;
	ps->verify = verify;
	*out = &ps->s;
	return 0;
}

void moem_eng_stager_destroy(struct moem_stager *s)
{
	struct pack_stager *ps = (struct pack_stager *)s;

	if (!ps)
		return;
	free(ps->layer_of);
	free(ps);
}
