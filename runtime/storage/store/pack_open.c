// SPDX-License-Identifier: GPL-2.0-only
/*
 * Opening a pack (pack.h): validate everything the index claims before a
 * caller can see it. A pack that opens cleanly never leads a reader
 * outside the file, onto another blob's bytes, or to a missing expert.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>

#include <moem/error.h>
#include <moem/pack.h>

#include "pack_fmt.h"
#include "pack_int.h"
#include "store_int.h"

/* Fuzzers get past the checksums to reach the index checks behind them. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CHECK_SUMS 0
#else
#define CHECK_SUMS 1
#endif

static int check_header(struct moem_pack *p, const struct pack_header *h)
{
	uint64_t sum;

	if (memcmp(h->magic, PACK_MAGIC, 8))
		return moem_errf(EINVAL, "%s: not a moem pack (bad magic)", p->path);
	if (h->major != MOEM_PACK_MAJOR)
		return moem_errf(EPROTONOSUPPORT,
				 "%s: pack format %u.%u; this moem reads major version %d", p->path,
				 h->major, h->minor, MOEM_PACK_MAJOR);
	if (h->header_size != PACK_HDR_SIZE)
		return moem_errf(EINVAL, "%s: header size %u, expected %u", p->path, h->header_size,
				 PACK_HDR_SIZE);
	sum = XXH3_64bits(h, PACK_HDR_SUM_OFF);
	if (CHECK_SUMS && sum != h->header_xxh3)
		return moem_errf(
			EBADMSG, "%s: header checksum mismatch (stored %016llx, computed %016llx)",
			p->path, (unsigned long long)h->header_xxh3, (unsigned long long)sum);
	if (h->flags & ~PACK_KNOWN_FLAGS)
		return moem_errf(EPROTONOSUPPORT, "%s: unknown header flags 0x%llx", p->path,
				 (unsigned long long)(h->flags & ~PACK_KNOWN_FLAGS));
	if (h->file_size != p->size)
		return moem_errf(EINVAL, "%s: header says %llu bytes but the file has %llu (%s)",
				 p->path, (unsigned long long)h->file_size,
				 (unsigned long long)p->size,
				 p->size < h->file_size ? "truncated" : "extended");
	if (h->data_offset < PACK_HDR_SIZE || !moem_is_aligned(h->data_offset, MOEM_PACK_ALIGN) ||
	    h->data_offset > p->size || h->data_offset - PACK_HDR_SIZE > PACK_MAX_META)
		return moem_errf(EINVAL, "%s: bad data offset %llu", p->path,
				 (unsigned long long)h->data_offset);
	if (h->n_sections > PACK_MAX_SECTIONS)
		return moem_errf(EINVAL, "%s: %u sections, at most %u", p->path, h->n_sections,
				 PACK_MAX_SECTIONS);
	if (!h->prec_mask || h->prec_mask >= (1u << MOEM_PREC_NR))
		return moem_errf(EINVAL, "%s: bad precision mask 0x%x", p->path, h->prec_mask);
	p->major = h->major;
	p->minor = h->minor;
	p->data_offset = h->data_offset;
	p->prec_mask = h->prec_mask;
	memcpy(p->id.b, h->id, 16);
	return 0;
}

static int cmp_sect(const void *a, const void *b)
{
	const struct pack_section *x = *(const struct pack_section *const *)a;
	const struct pack_section *y = *(const struct pack_section *const *)b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Validate the section table; found[type] points at each known section. */
static int check_sections(struct moem_pack *p, const struct pack_header *h,
			  const struct pack_section **found)
{
	const struct pack_section *sorted[PACK_MAX_SECTIONS] = {0};
	uint32_t n = h->n_sections;

	for (uint32_t i = 0; i < n; i++) {
		const struct pack_section *s = &h->sect[i];
		uint64_t end;

		if (s->offset < PACK_HDR_SIZE || !moem_is_aligned(s->offset, 8) ||
		    moem_add_overflow(s->offset, s->size, &end) || end > p->data_offset)
			return moem_errf(EINVAL,
					 "%s: section %u (type %u) at [%llu, +%llu) is "
					 "outside the index area",
					 p->path, i, s->type, (unsigned long long)s->offset,
					 (unsigned long long)s->size);
		if (CHECK_SUMS &&
		    XXH3_64bits(p->meta + s->offset - PACK_HDR_SIZE, (size_t)s->size) != s->xxh3)
			return moem_errf(EBADMSG, "%s: section %u (type %u) checksum mismatch",
					 p->path, i, s->type);
		if (s->type >= PACK_SECT_CONFIG && s->type <= PACK_SECT_TOKENIZER) {
			if (found[s->type])
				return moem_errf(EINVAL, "%s: section type %u appears twice",
						 p->path, s->type);
			found[s->type] = s;
		} else if (!(s->flags & PACK_SECT_F_OPTIONAL)) {
			return moem_errf(EPROTONOSUPPORT,
					 "%s: unknown required section type %u (written by a "
					 "newer moem?)",
					 p->path, s->type);
		}
		sorted[i] = s;
	}
	qsort(sorted, n, sizeof(sorted[0]), cmp_sect);
	for (uint32_t i = 1; i < n; i++)
		if (sorted[i]->offset < sorted[i - 1]->offset + sorted[i - 1]->size)
			return moem_errf(EINVAL, "%s: sections of types %u and %u overlap", p->path,
					 sorted[i - 1]->type, sorted[i]->type);
	for (uint32_t t = PACK_SECT_CONFIG; t <= PACK_SECT_BLOBS; t++)
		if (!found[t])
			return moem_errf(EINVAL, "%s: required section type %u is missing", p->path,
					 t);
	return 0;
}

static const void *sect_data(const struct moem_pack *p, const struct pack_section *s)
{
	return p->meta + s->offset - PACK_HDR_SIZE;
}

static int check_range(const struct moem_pack *p, const char *what, uint64_t off, uint64_t size)
{
	uint64_t end;

	if (!moem_is_aligned(off, MOEM_PACK_ALIGN) || off < p->data_offset ||
	    moem_add_overflow(off, size, &end) || end > p->size)
		return moem_errf(EINVAL,
				 "%s: %s at [%llu, +%llu) is not a 4 KiB aligned range of "
				 "the data area [%llu, %llu)",
				 p->path, what, (unsigned long long)off, (unsigned long long)size,
				 (unsigned long long)p->data_offset, (unsigned long long)p->size);
	return 0;
}

static int parse_tensors(struct moem_pack *p, const struct pack_section *s)
{
	const struct pack_tensor *d = sect_data(p, s);

	if (s->size % sizeof(*d))
		return moem_errf(EINVAL,
				 "%s: tensor index of %llu bytes is not a whole number of "
				 "entries",
				 p->path, (unsigned long long)s->size);
	p->n_tens = (uint32_t)(s->size / sizeof(*d));
	if (s->size / sizeof(*d) > UINT32_MAX)
		return moem_errf(EINVAL, "%s: too many tensors", p->path);
	p->tens = calloc(p->n_tens ? p->n_tens : 1, sizeof(*p->tens));
	if (!p->tens)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_tens; i++) {
		struct moem_pack_tensor *t = &p->tens[i];
		uint64_t n = 1, bytes, end;
		const char *name;
		int ret;

		if (moem_add_overflow(d[i].name_off, d[i].name_len, &end) ||
		    end >= p->strings_len || !d[i].name_len ||
		    d[i].name_len >= MOEM_TENSOR_NAME_MAX)
			return moem_errf(EINVAL, "%s: tensor #%u: name outside the string table",
					 p->path, i);
		name = p->strings + d[i].name_off;
		if (name[d[i].name_len] || memchr(name, 0, d[i].name_len))
			return moem_errf(EINVAL, "%s: tensor #%u: name is not a string", p->path,
					 i);
		t->name = name;
		if (i && strcmp(p->tens[i - 1].name, name) >= 0)
			return moem_errf(EINVAL,
					 "%s: tensor %s: index not sorted or duplicate name",
					 p->path, name);
		if (d[i].dtype >= MOEM_DTYPE_NR || !d[i].ndim || d[i].ndim > 4 ||
		    d[i].role >= MOEM_TR_NR)
			return moem_errf(EINVAL, "%s: tensor %s: bad dtype, rank or role", p->path,
					 name);
		t->dtype = (enum moem_dtype)d[i].dtype;
		t->role = (enum moem_tensor_role)d[i].role;
		t->layer = d[i].layer;
		t->ndim = d[i].ndim;
		for (uint32_t k = 0; k < t->ndim; k++) {
			t->shape[k] = d[i].shape[k];
			if (moem_mul_overflow(n, t->shape[k], &n))
				return moem_errf(EINVAL, "%s: tensor %s: shape overflows", p->path,
						 name);
		}
		t->nelem = n;
		if (moem_mul_overflow(n, moem_dtype_size(t->dtype), &bytes) || bytes != d[i].size)
			return moem_errf(EINVAL,
					 "%s: tensor %s: %llu bytes but its shape needs "
					 "%llu",
					 p->path, name, (unsigned long long)d[i].size,
					 (unsigned long long)bytes);
		t->offset = d[i].offset;
		t->size = d[i].size;
		t->xxh3 = d[i].xxh3;
		ret = check_range(p, name, t->offset, t->size);
		if (ret)
			return ret;
	}
	return 0;
}

/* Check the plain tensors are exactly the architecture's non-FFN tensors. */
static int check_tensor_set(struct moem_pack *p)
{
	struct moem_tensor_spec *specs;
	size_t n;
	int ret;

	ret = moem_store_arch_tensors(&p->cfg, false, &specs, &n);
	if (ret)
		return ret;
	for (size_t i = 0; i < n && !ret; i++) {
		const struct moem_tensor_spec *s = &specs[i];
		const struct moem_pack_tensor *t = moem_pack_tensor(p, s->name);

		if (!t)
			ret = moem_errf(EINVAL, "%s: tensor %s is missing", p->path, s->name);
		else if (t->role != s->role || t->layer != s->layer || t->ndim != s->ndim ||
			 t->shape[0] != s->shape[0] || (s->ndim == 2 && t->shape[1] != s->shape[1]))
			ret = moem_errf(EINVAL,
					"%s: tensor %s: role, layer or shape differs from "
					"the config",
					p->path, s->name);
	}
	if (!ret && n != p->n_tens)
		ret = moem_errf(EINVAL, "%s: %u tensors in the index, the config has %zu", p->path,
				p->n_tens, n);
	free(specs);
	return ret;
}

static int check_blob(struct moem_pack *p, struct moem_pack_blob *b, const struct pack_blob *d,
		      uint32_t i)
{
	const struct moem_model_config *c = &p->cfg;
	bool moe = d->layer < c->n_layers && moem_layer_is_moe(c, d->layer);
	uint32_t want;
	char desc[96];
	int ret;

	if (d->kind < MOEM_BLOB_ROUTED || d->kind > MOEM_BLOB_DENSE || d->prec >= MOEM_PREC_NR ||
	    d->layer >= c->n_layers)
		return moem_errf(EINVAL, "%s: blob #%u: bad kind, precision or layer", p->path, i);
	b->kind = (enum moem_blob_kind)d->kind;
	b->prec = (enum moem_prec)d->prec;
	b->quantizer = d->quantizer;
	b->layer = d->layer;
	b->expert = d->expert;
	b->offset = d->offset;
	b->size = d->size;
	b->xxh3 = d->xxh3;
	moem_pack_blob_desc(b, desc, sizeof(desc));
	if (d->quantizer)
		return moem_errf(EPROTONOSUPPORT, "%s: blob %s: unknown quantizer %u", p->path,
				 desc, d->quantizer);
	switch (b->kind) {
	case MOEM_BLOB_ROUTED:
		if (!moe || d->expert >= c->n_experts || !(p->prec_mask & (1u << d->prec)))
			return moem_errf(EINVAL,
					 "%s: blob %s: no such expert or precision in "
					 "this pack",
					 p->path, desc);
		want = c->moe_inter;
		break;
	case MOEM_BLOB_SHARED:
		if (!moe || !c->n_shared || d->expert)
			return moem_errf(EINVAL, "%s: blob %s: layer has no shared experts",
					 p->path, desc);
		want = c->n_shared * c->shared_inter;
		break;
	default:
		if (moe || d->expert)
			return moem_errf(EINVAL, "%s: blob %s: layer is not dense", p->path, desc);
		want = c->dense_inter;
		break;
	}
	if (d->inter != want)
		return moem_errf(EINVAL, "%s: blob %s: width %u, config says %u", p->path, desc,
				 d->inter, want);
	ret = moem_expert_layout(b->prec, c->hidden, d->inter, &b->layout);
	if (ret)
		return moem_err_prefix(-ret, "%s: blob %s", p->path, desc);
	if (b->layout.bytes != d->size)
		return moem_errf(EINVAL, "%s: blob %s: %llu bytes, its layout needs %llu", p->path,
				 desc, (unsigned long long)d->size,
				 (unsigned long long)b->layout.bytes);
	return check_range(p, desc, b->offset, b->size);
}

static int parse_blobs(struct moem_pack *p, const struct pack_section *s)
{
	const struct pack_blob *d = sect_data(p, s);
	const struct moem_model_config *c = &p->cfg;
	uint32_t n_moe = moem_n_moe_layers(c);
	size_t n_routed = (size_t)n_moe * c->n_experts * MOEM_PREC_NR;
	char desc[96];

	if (s->size % sizeof(*d) || s->size / sizeof(*d) > UINT32_MAX)
		return moem_errf(EINVAL,
				 "%s: blob index of %llu bytes is not a whole number of "
				 "entries",
				 p->path, (unsigned long long)s->size);
	p->n_blobs = (uint32_t)(s->size / sizeof(*d));
	p->blobs = calloc(p->n_blobs ? p->n_blobs : 1, sizeof(*p->blobs));
	p->routed = malloc(sizeof(int32_t) * n_routed);
	p->layer_blob = malloc(sizeof(int32_t) * c->n_layers * MOEM_PREC_NR);
	if (!p->blobs || !p->routed || !p->layer_blob)
		return -ENOMEM;
	memset(p->routed, 0xff, sizeof(int32_t) * n_routed);
	for (uint32_t l = 0; l < c->n_layers; l++)
		p->moe_idx[l] = (int16_t)moem_moe_index(c, l);
	memset(p->layer_blob, 0xff, sizeof(int32_t) * c->n_layers * MOEM_PREC_NR);
	for (uint32_t i = 0; i < p->n_blobs; i++) {
		struct moem_pack_blob *b = &p->blobs[i];
		int32_t *slot;
		int ret = check_blob(p, b, &d[i], i);

		if (ret)
			return ret;
		if (b->kind == MOEM_BLOB_ROUTED)
			slot = &p->routed[moem_pack_routed_slot(p, b->layer, b->expert, b->prec)];
		else
			slot = &p->layer_blob[(size_t)b->layer * MOEM_PREC_NR + b->prec];
		if (*slot >= 0)
			return moem_errf(EINVAL, "%s: blob %s appears twice", p->path,
					 moem_pack_blob_desc(b, desc, sizeof(desc)));
		*slot = (int32_t)i;
	}
	/* Completeness: what an engine will ask for must be there. */
	for (uint32_t l = 0; l < c->n_layers; l++) {
		bool moe = moem_layer_is_moe(c, l);

		if ((!moe || c->n_shared) && p->layer_blob[(size_t)l * MOEM_PREC_NR] < 0)
			return moem_errf(EINVAL, "%s: layer %u: %s MLP (bf16) is missing", p->path,
					 l, moe ? "shared-expert" : "dense");
	}
	for (size_t i = 0; i < n_routed; i++)
		if ((p->prec_mask & (1u << (i % MOEM_PREC_NR))) && p->routed[i] < 0)
			return moem_errf(EINVAL, "%s: expert %zu of MoE layer %zu in %s is missing",
					 p->path, (i / MOEM_PREC_NR) % c->n_experts,
					 i / MOEM_PREC_NR / c->n_experts,
					 moem_prec_name((enum moem_prec)(i % MOEM_PREC_NR)));
	return 0;
}

struct range {
	uint64_t off, size;
};

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static int check_overlaps(struct moem_pack *p)
{
	size_t n = (size_t)p->n_tens + p->n_blobs, k = 0;
	struct range *r = malloc(sizeof(*r) * (n ? n : 1));
	int ret = 0;

	if (!r)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_tens; i++)
		r[k++] = (struct range){p->tens[i].offset, p->tens[i].size};
	for (uint32_t i = 0; i < p->n_blobs; i++)
		r[k++] = (struct range){p->blobs[i].offset, p->blobs[i].size};
	qsort(r, n, sizeof(*r), cmp_range);
	for (size_t i = 1; i < n && !ret; i++)
		if (r[i].off < r[i - 1].off + r[i - 1].size)
			ret = moem_errf(EINVAL, "%s: data ranges at %llu and %llu overlap", p->path,
					(unsigned long long)r[i - 1].off,
					(unsigned long long)r[i].off);
	free(r);
	return ret;
}

static int parse_json_sections(struct moem_pack *p, const struct pack_section **found)
{
	const struct pack_section *s = found[PACK_SECT_CONFIG_JSON];
	struct json_object *o;
	int ret;

	if (s) {
		p->config_json = malloc((size_t)s->size + 1);
		if (!p->config_json)
			return -ENOMEM;
		memcpy(p->config_json, sect_data(p, s), (size_t)s->size);
		p->config_json[s->size] = 0;
		p->config_json_len = (size_t)s->size;
	}
	s = found[PACK_SECT_SYNTH_JSON];
	if (!s)
		return 0;
	ret = moem_store_json_parse(sect_data(p, s), (size_t)s->size, 8, "pack moem_synth.json",
				    &o);
	if (ret)
		return ret;
	ret = moem_synth_from_json(o, &p->synth);
	json_object_put(o);
	if (ret)
		return moem_err_prefix(-ret, "%s", p->path);
	if (p->synth.n_layers != moem_n_moe_layers(&p->cfg) ||
	    p->synth.n_experts != p->cfg.n_experts || p->synth.top_k != p->cfg.top_k)
		return moem_errf(EINVAL, "%s: synthetic workload shape does not match the config",
				 p->path);
	p->has_synth = true;
	return 0;
}

static int parse(struct moem_pack *p)
{
	const struct pack_section *found[PACK_SECT_TOKENIZER + 1] = {0};
	struct pack_header h;
	struct pack_config pc;
	uint8_t id[16];
	uint64_t meta_len;
	int ret;

	if (p->size < PACK_HDR_SIZE)
		return moem_errf(EINVAL, "%s: %llu bytes, too short for a pack header", p->path,
				 (unsigned long long)p->size);
	ret = moem_pack_pread(p, &h, sizeof(h), 0);
	if (!ret)
		ret = check_header(p, &h);
	if (ret)
		return ret;
	meta_len = p->data_offset - PACK_HDR_SIZE;
	p->meta = malloc(meta_len ? (size_t)meta_len : 1);
	if (!p->meta)
		return -ENOMEM;
	ret = moem_pack_pread(p, p->meta, (size_t)meta_len, PACK_HDR_SIZE);
	if (!ret)
		ret = check_sections(p, &h, found);
	if (ret)
		return ret;
	ret = moem_pack_compute_id(&h, p->meta, meta_len, id);
	if (ret)
		return ret;
	if (CHECK_SUMS && memcmp(id, h.id, 16))
		return moem_errf(EBADMSG, "%s: pack id does not match its header and index",
				 p->path);
	if (found[PACK_SECT_CONFIG]->size != sizeof(pc))
		return moem_errf(EINVAL, "%s: config section of %llu bytes, expected %zu", p->path,
				 (unsigned long long)found[PACK_SECT_CONFIG]->size, sizeof(pc));
	memcpy(&pc, sect_data(p, found[PACK_SECT_CONFIG]), sizeof(pc));
	ret = moem_pack_config_decode(&pc, &p->cfg);
	if (ret)
		return moem_err_prefix(-ret, "%s", p->path);
	if (!(h.flags & PACK_F_ROUTE_GROUPS) != !p->cfg.n_group)
		return moem_errf(
			EBADMSG, "%s: header flag ROUTE_GROUPS %s but the config has %u groups",
			p->path, h.flags & PACK_F_ROUTE_GROUPS ? "set" : "clear", p->cfg.n_group);
	p->strings = sect_data(p, found[PACK_SECT_STRINGS]);
	p->strings_len = found[PACK_SECT_STRINGS]->size;
	ret = parse_tensors(p, found[PACK_SECT_TENSORS]);
	if (!ret)
		ret = check_tensor_set(p);
	if (!ret)
		ret = parse_blobs(p, found[PACK_SECT_BLOBS]);
	if (!ret)
		ret = check_overlaps(p);
	if (!ret)
		ret = parse_json_sections(p, found);
	if (!ret && found[PACK_SECT_TOKENIZER])
		ret = moem_pack_tok_parse(sect_data(p, found[PACK_SECT_TOKENIZER]),
					  found[PACK_SECT_TOKENIZER]->size, p->path, &p->tok);
	return ret;
}

static struct moem_pack *pack_alloc(const char *label)
{
	struct moem_pack *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->fd = -1;
	p->path = strdup(label);
	if (!p->path) {
		free(p);
		return NULL;
	}
	return p;
}

int moem_pack_open(const char *path, struct moem_pack **out)
{
	struct moem_pack *p;
	struct stat st;
	int ret;

	*out = NULL;
	p = pack_alloc(path);
	if (!p)
		return -ENOMEM;
	p->fd = moem_store_open_regular(path, &st);
	if (p->fd < 0) {
		ret = p->fd;
		goto err;
	}
	p->size = (uint64_t)st.st_size;
	ret = parse(p);
	if (ret)
		goto err;
	*out = p;
	return 0;
err:
	moem_pack_close(p);
	return ret;
}

int moem_pack_open_io(const struct moem_pack_io *io, const char *label, struct moem_pack **out)
{
	struct moem_pack *p;
	int ret;

	*out = NULL;
	p = pack_alloc(label);
	if (!p)
		return -ENOMEM;
	p->io = *io;
	p->size = io->size;
	ret = parse(p);
	if (ret) {
		moem_pack_close(p);
		return ret;
	}
	*out = p;
	return 0;
}

void moem_pack_close(struct moem_pack *p)
{
	if (!p)
		return;
	if (p->fd >= 0)
		close(p->fd);
	free(p->meta);
	free(p->tens);
	free(p->blobs);
	free(p->routed);
	free(p->layer_blob);
	free(p->config_json);
	free(p->path);
	free(p);
}
