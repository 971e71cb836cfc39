// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hostile and damaged packs: each corruption is refused at open (or at
 * read, for blob and tensor data) with a message saying what is wrong.
 * Structural damage is re-signed (checksums and id recomputed) so that the
 * check behind the checksums is the one tested.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include <moem/decode.h>
#include <moem/engine.h>
#include <moem/error.h>
#include <moem/pack.h>

#include "../../runtime/storage/store/pack_fmt.h"
#include "kselftest_harness.h"
#include "store_test_util.h"

FIXTURE(bad)
{
	char *root, *model, *good, *path;
	uint8_t *img;
	size_t len;
};

FIXTURE_SETUP(bad)
{
	struct moem_mkmodel_opts o;
	struct moem_pack_opts po = {0};

	self->root = st_tmpdir();
	ASSERT_NE(NULL, self->root);
	self->model = st_path(self->root, "model");
	self->good = st_path(self->root, "good.moem");
	self->path = st_path(self->root, "bad.moem");
	st_tiny_opts(&o, MOEM_ARCH_DEEPSEEK_V2, self->model);
	ASSERT_EQ(0, moem_mkmodel(&o));
	po.model_dir = self->model;
	po.out_path = self->good;
	po.prec_mask = (1u << MOEM_PREC_BF16) | (1u << MOEM_PREC_Q4);
	ASSERT_EQ(0, moem_pack_write(&po));
	self->img = st_read_file(self->good, &self->len);
	ASSERT_NE(NULL, self->img);
}

FIXTURE_TEARDOWN(bad)
{
	st_rm_rf(self->root);
	free(self->root);
	free(self->model);
	free(self->good);
	free(self->path);
	free(self->img);
}

static struct pack_header *hdr(uint8_t *img)
{
	return (struct pack_header *)img;
}

static struct pack_section *sect(uint8_t *img, uint32_t type)
{
	struct pack_header *h = hdr(img);

	for (uint32_t i = 0; i < h->n_sections; i++)
		if (h->sect[i].type == type)
			return &h->sect[i];
	return NULL;
}

static void *sect_data(uint8_t *img, uint32_t type)
{
	return img + sect(img, type)->offset;
}

/* Recompute every checksum and the id, as a careful forger would. */
static void resign(uint8_t *img)
{
	struct pack_header *h = hdr(img);

	for (uint32_t i = 0; i < h->n_sections; i++) {
		struct pack_section *s = &h->sect[i];

		if (s->offset + s->size <= h->data_offset)
			s->xxh3 = XXH3_64bits(img + s->offset, s->size);
	}
	moem_pack_compute_id(h, img + PACK_HDR_SIZE, h->data_offset - PACK_HDR_SIZE, h->id);
	h->header_xxh3 = XXH3_64bits(h, PACK_HDR_SUM_OFF);
}

/* Write the damaged copy and try to open it; returns the open result. */
static int try_open(FIXTURE_DATA(bad) * self, uint8_t *img, size_t len, bool sign)
{
	struct moem_pack *p;
	int ret;

	if (sign)
		resign(img);
	if (st_write_file(self->path, img, len))
		return -999;
	moem_clear_error();
	ret = moem_pack_open(self->path, &p);
	if (!ret)
		moem_pack_close(p);
	return ret;
}

static uint8_t *copy(FIXTURE_DATA(bad) * self)
{
	uint8_t *c = malloc(self->len);

	memcpy(c, self->img, self->len);
	return c;
}

TEST_F(bad, pristine_opens)
{
	uint8_t *c = copy(self);

	EXPECT_EQ(0, try_open(self, c, self->len, true)); /* resigning changes nothing */
	EXPECT_EQ(0, memcmp(c, self->img, self->len));
	free(c);
}

TEST_F(bad, size_and_header)
{
	uint8_t *c = copy(self);

	EXPECT_EQ(-EINVAL, try_open(self, c, self->len - 4096, false));
	EXPECT_MSG("truncated");
	EXPECT_EQ(-EINVAL, try_open(self, c, 100, false));
	EXPECT_MSG("too short for a pack header");
	c = realloc(c, self->len + 4096);
	memset(c + self->len, 0, 4096);
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len + 4096, false));
	EXPECT_MSG("extended");
	memcpy(c, self->img, self->len);
	c[3] ^= 1;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, false));
	EXPECT_MSG("not a moem pack");
	c[3] ^= 1;
	c[2000] ^= 1;
	EXPECT_EQ(-EBADMSG, try_open(self, c, self->len, false));
	EXPECT_MSG("header checksum mismatch");
	c[2000] ^= 1;
	hdr(c)->id[5] ^= 1;
	hdr(c)->header_xxh3 = XXH3_64bits(c, PACK_HDR_SUM_OFF);
	EXPECT_EQ(-EBADMSG, try_open(self, c, self->len, false));
	EXPECT_MSG("pack id does not match");
	free(c);
}

TEST_F(bad, versions_and_flags)
{
	uint8_t *c = copy(self);
	char want[64];

	hdr(c)->major = 2;
	EXPECT_EQ(-EPROTONOSUPPORT, try_open(self, c, self->len, true));
	snprintf(want, sizeof(want), "pack format 2.%d; this moem reads major version 1",
		 MOEM_PACK_MINOR);
	EXPECT_MSG(want);
	hdr(c)->major = 1;
	hdr(c)->minor = 7; /* a newer minor is readable */
	EXPECT_EQ(0, try_open(self, c, self->len, true));
	hdr(c)->flags = 8;
	EXPECT_EQ(-EPROTONOSUPPORT, try_open(self, c, self->len, true));
	EXPECT_MSG("unknown header flags 0x8");
	free(c);
}

/*
 * Group-limited routing (1.2): the header flag ROUTE_GROUPS and the
 * config's groups go together, so a reader that does not know the flag
 * refuses such a pack instead of routing it by plain top-k.
 */
TEST_F(bad, route_groups_flag)
{
	uint8_t *c = copy(self);
	struct pack_config *pc = sect_data(c, PACK_SECT_CONFIG);
	struct moem_mkmodel_opts o;
	struct moem_pack_opts po = {0};
	struct moem_pack *p;
	char *model = st_path(self->root, "grouped"), *out = st_path(self->root, "g.moem");
	size_t len;

	EXPECT_EQ(0u, hdr(c)->flags);
	hdr(c)->flags = PACK_F_ROUTE_GROUPS;
	EXPECT_EQ(-EBADMSG, try_open(self, c, self->len, true));
	EXPECT_MSG("header flag ROUTE_GROUPS set but the config has 0 groups");
	pc->n_group = 2;
	pc->topk_group = 1;
	EXPECT_EQ(0, try_open(self, c, self->len, true));
	hdr(c)->flags = 0;
	EXPECT_EQ(-EBADMSG, try_open(self, c, self->len, true));
	EXPECT_MSG("header flag ROUTE_GROUPS clear but the config has 2 groups");
	hdr(c)->flags = PACK_F_ROUTE_GROUPS;
	pc->topk_group = 3;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("topk_group 3, want 1..n_group (2)");
	free(c);
	/* written from a model that routes within groups: flag and fields */
	st_tiny_opts(&o, MOEM_ARCH_DEEPSEEK_V2, model);
	o.cfg.n_group = 2;
	o.cfg.topk_group = 1;
	ASSERT_EQ(0, moem_mkmodel(&o)) TH_LOG("%s", moem_last_error());
	po.model_dir = model;
	po.out_path = out;
	po.prec_mask = 1u << MOEM_PREC_BF16;
	ASSERT_EQ(0, moem_pack_write(&po)) TH_LOG("%s", moem_last_error());
	c = st_read_file(out, &len);
	ASSERT_NE(NULL, c);
	EXPECT_EQ(PACK_F_ROUTE_GROUPS, hdr(c)->flags);
	EXPECT_EQ(2u, ((struct pack_config *)sect_data(c, PACK_SECT_CONFIG))->n_group);
	ASSERT_EQ(0, moem_pack_open(out, &p)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(2u, moem_pack_config(p)->n_group);
	EXPECT_EQ(1u, moem_pack_config(p)->topk_group);
	moem_pack_close(p);
	free(c);
	free(model);
	free(out);
}

TEST_F(bad, sections)
{
	uint8_t *c = copy(self);

	((uint8_t *)sect_data(c, PACK_SECT_TENSORS))[3] ^= 1;
	EXPECT_EQ(-EBADMSG, try_open(self, c, self->len, false));
	EXPECT_MSG("(type 3) checksum mismatch");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_CONFIG_JSON)->type = 99;
	EXPECT_EQ(0, try_open(self, c, self->len, true)); /* optional: skipped */
	sect(c, 99)->flags = 0;
	EXPECT_EQ(-EPROTONOSUPPORT, try_open(self, c, self->len, true));
	EXPECT_MSG("unknown required section type 99");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_STRINGS)->offset = hdr(c)->data_offset;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("outside the index area");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_STRINGS)->offset = sect(c, PACK_SECT_CONFIG)->offset + 8;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("overlap");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_BLOBS)->type = PACK_SECT_TENSORS;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("section type 3 appears twice");
	memcpy(c, self->img, self->len);
	((struct pack_config *)sect_data(c, PACK_SECT_CONFIG))->top_k = 0;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("num_experts_per_tok 0");
	free(c);
}

TEST_F(bad, tensor_index)
{
	uint8_t *c = copy(self);
	struct pack_tensor *t = sect_data(c, PACK_SECT_TENSORS), tmp;

	tmp = t[0];
	t[0] = t[1];
	t[1] = tmp;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("index not sorted or duplicate name");
	memcpy(c, self->img, self->len);
	t[2].name_off = 1u << 30;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("tensor #2: name outside the string table");
	memcpy(c, self->img, self->len);
	t[2].shape[0]++;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("bytes but its shape needs");
	memcpy(c, self->img, self->len);
	t[2].offset = self->len;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("is not a 4 KiB aligned range");
	memcpy(c, self->img, self->len);
	t[2].offset = t[3].offset;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("overlap");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_TENSORS)->size -= sizeof(*t);
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("is missing");
	free(c);
}

TEST_F(bad, blob_index)
{
	uint8_t *c = copy(self);
	struct pack_blob *b = sect_data(c, PACK_SECT_BLOBS);
	uint32_t last = (uint32_t)(sect(c, PACK_SECT_BLOBS)->size / sizeof(*b)) - 1;

	b[last].offset = b[last - 1].offset;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("overlap");
	memcpy(c, self->img, self->len);
	b[last].offset += 8;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("4 KiB aligned");
	memcpy(c, self->img, self->len);
	b[last].offset = UINT64_MAX - 4095; /* offset + size wraps */
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("4 KiB aligned range");
	memcpy(c, self->img, self->len);
	b[last].size += 4096;
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("its layout needs");
	memcpy(c, self->img, self->len);
	b[last] = b[last - 1];
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("appears twice");
	memcpy(c, self->img, self->len);
	sect(c, PACK_SECT_BLOBS)->size -= sizeof(*b);
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("is missing");
	memcpy(c, self->img, self->len);
	b[last].prec = MOEM_PREC_Q2; /* not in this pack */
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("no such expert or precision");
	memcpy(c, self->img, self->len);
	b[last].quantizer = 3;
	EXPECT_EQ(-EPROTONOSUPPORT, try_open(self, c, self->len, true));
	EXPECT_MSG("unknown quantizer 3");
	memcpy(c, self->img, self->len);
	b[0].kind = MOEM_BLOB_ROUTED; /* the dense MLP of layer 0 claims to be an expert */
	EXPECT_EQ(-EINVAL, try_open(self, c, self->len, true));
	EXPECT_MSG("no such expert");
	free(c);
}

TEST_F(bad, data_checksums)
{
	uint8_t *c = copy(self), *buf;
	const struct moem_pack_blob *b;
	const struct moem_pack_tensor *t;
	struct moem_pack *p;

	ASSERT_EQ(0, moem_pack_open(self->good, &p));
	b = moem_pack_expert(p, 2, 3, MOEM_PREC_Q4);
	t = moem_pack_tensor_role(p, MOEM_TR_ROUTER, 1);
	ASSERT_NE(NULL, b);
	ASSERT_NE(NULL, t);
	c[b->offset + 100] ^= 0x10;
	c[t->offset + 1] ^= 0x10;
	moem_pack_close(p);
	ASSERT_EQ(0, try_open(self, c, self->len, false)); /* data is checked on read */
	ASSERT_EQ(0, moem_pack_open(self->path, &p));
	b = moem_pack_expert(p, 2, 3, MOEM_PREC_Q4);
	t = moem_pack_tensor_role(p, MOEM_TR_ROUTER, 1);
	buf = malloc(1 << 20);
	moem_clear_error();
	EXPECT_EQ(-EBADMSG, moem_pack_read_blob(p, b, buf, b->size));
	EXPECT_MSG("blob layer 2 expert 3 q4: checksum");
	EXPECT_EQ(-EBADMSG, moem_pack_verify_blob(b, buf));
	EXPECT_EQ(0,
		  moem_pack_read_blob(p, moem_pack_expert(p, 2, 3, MOEM_PREC_BF16), buf, 1 << 20));
	EXPECT_EQ(-EBADMSG, moem_pack_read_tensor(p, t, buf, t->size));
	EXPECT_MSG("tensor model.layers.1.mlp.gate.weight: checksum");
	EXPECT_EQ(-ENOSPC, moem_pack_read_blob(p, b, buf, b->size - 1));
	EXPECT_EQ(-EBADMSG, moem_pack_verify(p, NULL));
	EXPECT_MSG("checksum");
	moem_pack_close(p);
	free(buf);
	free(c);
}

/*
 * A pack of format 1.0 (no context, RoPE or eos fields) still opens for
 * MoE-stack runs, but full decode refuses it with a message saying to
 * re-pack, and opening the engine and refusing the decoder loses nothing.
 */
TEST_F(bad, format_1_0_refused_for_decode)
{
	uint8_t *c = copy(self);
	struct pack_config *cfg = sect_data(c, PACK_SECT_CONFIG);
	struct moem_engine_opts o = {.pack_path = self->path, .backend = "cpu", .threads = 1};
	struct moem_decoder_opts dopt = {0};
	struct moem_decoder *d = (struct moem_decoder *)1;
	struct moem_engine *e;

	hdr(c)->minor = 0;
	memset(&cfg->max_pos, 0, sizeof(*cfg) - offsetof(struct pack_config, max_pos));
	ASSERT_EQ(0, try_open(self, c, self->len, true)) TH_LOG("%s", moem_last_error());
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	moem_clear_error();
	EXPECT_EQ(-EPROTONOSUPPORT, moem_decoder_open(e, &dopt, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "re-pack"))
	TH_LOG("message: %s", moem_last_error());
	EXPECT_NE(NULL, strstr(moem_last_error(), "format 1.0"));
	EXPECT_EQ(NULL, d);
	moem_engine_close(e);
	free(c);
}

/*
 * An expert whose data does not match its checksum is refused when the
 * warm-up stages it, naming the expert (it was dropped without a word:
 * the engine said ready, and the first run that needed it failed).
 */
TEST_F(bad, warmup_refuses_a_damaged_expert)
{
	uint8_t *c = copy(self);
	struct moem_engine_opts o = {.pack_path = self->path, .backend = "cpu", .threads = 1};
	const struct moem_pack_blob *b;
	struct moem_pack *p;
	struct moem_engine *e;

	ASSERT_EQ(0, moem_pack_open(self->good, &p));
	b = moem_pack_expert(p, 1, 2, MOEM_PREC_BF16);
	ASSERT_NE(NULL, b);
	c[b->offset + 7] ^= 0x40;
	moem_pack_close(p);
	ASSERT_EQ(0, try_open(self, c, self->len, false));
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	moem_clear_error();
	EXPECT_EQ(-EBADMSG, moem_engine_warmup(e, NULL));
	/* the engine counts MoE layers: this model's layer 0 is dense */
	EXPECT_MSG("expert (0, 2) hi");
	EXPECT_MSG("checksum does not match");
	moem_engine_close(e);
	free(c);
}

TEST_HARNESS_MAIN
