// SPDX-License-Identifier: GPL-2.0-only
/* Lookups in an opened pack (pack.h): config, blobs, tensors by name and role. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/pack.h>

#include "pack_int.h"

const char *moem_pack_path(const struct moem_pack *p)
{
	return p->path;
}

int moem_pack_fd(const struct moem_pack *p)
{
	return p->fd;
}

uint64_t moem_pack_file_size(const struct moem_pack *p)
{
	return p->size;
}

uint64_t moem_pack_data_offset(const struct moem_pack *p)
{
	return p->data_offset;
}

void moem_pack_version(const struct moem_pack *p, uint32_t *major, uint32_t *minor)
{
	*major = p->major;
	*minor = p->minor;
}

void moem_pack_get_id(const struct moem_pack *p, struct moem_pack_id *id)
{
	*id = p->id;
}

char *moem_pack_id_str(const struct moem_pack_id *id, char *buf)
{
	for (int i = 0; i < 16; i++)
		sprintf(buf + 2 * i, "%02x", id->b[i]);
	return buf;
}

const struct moem_model_config *moem_pack_config(const struct moem_pack *p)
{
	return &p->cfg;
}

uint32_t moem_pack_precisions(const struct moem_pack *p)
{
	return p->prec_mask;
}

int moem_pack_synth(const struct moem_pack *p, struct moem_synth_params *out)
{
	if (!p->has_synth)
		return -ENOENT;
	*out = p->synth;
	return 0;
}

const char *moem_pack_config_json(const struct moem_pack *p, size_t *len)
{
	*len = p->config_json_len;
	return p->config_json;
}

const struct moem_pack_blob *moem_pack_expert(const struct moem_pack *p, uint32_t layer,
					      uint32_t expert, enum moem_prec prec)
{
	int32_t i;

	if (layer >= p->cfg.n_layers || p->moe_idx[layer] < 0 || expert >= p->cfg.n_experts ||
	    (unsigned int)prec >= MOEM_PREC_NR)
		return NULL;
	i = p->routed[moem_pack_routed_slot(p, layer, expert, prec)];
	return i < 0 ? NULL : &p->blobs[i];
}

static const struct moem_pack_blob *layer_blob(const struct moem_pack *p, uint32_t layer,
					       enum moem_prec prec, enum moem_blob_kind k)
{
	int32_t i;

	if (layer >= p->cfg.n_layers || (unsigned int)prec >= MOEM_PREC_NR)
		return NULL;
	i = p->layer_blob[(size_t)layer * MOEM_PREC_NR + prec];
	return i < 0 || p->blobs[i].kind != k ? NULL : &p->blobs[i];
}

const struct moem_pack_blob *moem_pack_shared(const struct moem_pack *p, uint32_t layer,
					      enum moem_prec prec)
{
	return layer_blob(p, layer, prec, MOEM_BLOB_SHARED);
}

const struct moem_pack_blob *moem_pack_dense(const struct moem_pack *p, uint32_t layer,
					     enum moem_prec prec)
{
	return layer_blob(p, layer, prec, MOEM_BLOB_DENSE);
}

uint32_t moem_pack_n_blobs(const struct moem_pack *p)
{
	return p->n_blobs;
}

const struct moem_pack_blob *moem_pack_blob_at(const struct moem_pack *p, uint32_t i)
{
	return i < p->n_blobs ? &p->blobs[i] : NULL;
}

char *moem_pack_blob_desc(const struct moem_pack_blob *b, char *buf, size_t len)
{
	const char *prec = moem_prec_name(b->prec);

	if (b->kind == MOEM_BLOB_ROUTED)
		snprintf(buf, len, "layer %u expert %u %s", b->layer, b->expert, prec);
	else
		snprintf(buf, len, "layer %u %s %s", b->layer,
			 b->kind == MOEM_BLOB_SHARED ? "shared" : "dense", prec);
	return buf;
}

static int cmp_tensor_name(const void *key, const void *elem)
{
	return strcmp(key, ((const struct moem_pack_tensor *)elem)->name);
}

const struct moem_pack_tensor *moem_pack_tensor(const struct moem_pack *p, const char *name)
{
	return bsearch(name, p->tens, p->n_tens, sizeof(*p->tens), cmp_tensor_name);
}

uint32_t moem_pack_n_tensors(const struct moem_pack *p)
{
	return p->n_tens;
}

const struct moem_pack_tensor *moem_pack_tensor_at(const struct moem_pack *p, uint32_t i)
{
	return i < p->n_tens ? &p->tens[i] : NULL;
}

const struct moem_pack_tensor *moem_pack_tensor_role(const struct moem_pack *p,
						     enum moem_tensor_role r, uint32_t layer)
{
	char name[MOEM_TENSOR_NAME_MAX];

	if (moem_tensor_name(&p->cfg, r, layer, 0, MOEM_MAT_GATE, name, sizeof(name)))
		return NULL;
	return moem_pack_tensor(p, name);
}
