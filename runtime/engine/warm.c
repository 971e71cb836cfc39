// SPDX-License-Identifier: GPL-2.0-only
/*
 * The staging directory at the start of the pool: which expert versions
 * are staged where, so that a daemon restarted on a persistent moem.ko
 * region finds them again instead of re-reading the pack from NVMe.
 *
 * Layout (little endian, 4 KiB header then 16-byte entries, the whole
 * rounded up to 2 MiB):
 *   "MOEMDIR1", u32 version 1, u32 n_versions, u8 pack_id[16],
 *   u64 blob_bytes[2], u32 prec[2], u64 dir_bytes, u64 data_bytes
 *   entry[vid] = { u32 state (1 = staged), u32 pad, u64 offset in data }
 * An entry turns 1 only after its blob was read completely (and checked,
 * with verify on), and 0 before its space is reused: whatever moment a
 * process dies, an entry that says 1 describes complete bytes.
 */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>

#include "engine_int.h"

#define DIR_MAGIC   "MOEMDIR1"
#define DIR_VERSION 1

struct dir_hdr {
	char magic[8];
	uint32_t version;
	uint32_t n_versions;
	uint8_t pack_id[16];
	uint64_t blob_bytes[2];
	uint32_t prec[2];
	uint64_t dir_bytes;
	uint64_t data_bytes;
};

struct dir_ent {
	uint32_t state;
	uint32_t pad;
	uint64_t doff;
};

static struct dir_ent *entries(struct moem_engine *e)
{
	return (struct dir_ent *)((uint8_t *)moem_pool_base(e->pool) + 4096);
}

static void dir_note(void *arg, uint32_t vid, int ready, uint64_t doff)
{
	struct dir_ent *ent = &entries(arg)[vid];

	if (ready)
		ent->doff = doff;
	/* the offset is visible before the state says "staged" */
	__atomic_store_n(&ent->state, (uint32_t)ready, __ATOMIC_RELEASE);
}

static void fill_hdr(struct moem_engine *e, struct dir_hdr *h)
{
	struct moem_pack_id id;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, DIR_MAGIC, 8);
	h->version = DIR_VERSION;
	h->n_versions = e->n_moe * e->cfg->n_experts * 2;
	moem_pack_get_id(e->pack, &id);
	memcpy(h->pack_id, id.b, 16);
	h->blob_bytes[0] = e->blob_bytes[0];
	h->blob_bytes[1] = e->n_prec > 1 ? e->blob_bytes[1] : 0;
	h->prec[0] = e->prec[0];
	h->prec[1] = e->n_prec > 1 ? e->prec[1] : UINT32_MAX;
	h->dir_bytes = (uint64_t)((uint8_t *)e->dram - (uint8_t *)moem_pool_base(e->pool));
	h->data_bytes = e->dram_bytes;
}

int moem_eng_warm_attach(struct moem_engine *e)
{
	struct dir_hdr want, *have = moem_pool_base(e->pool);
	struct dir_ent *ent = entries(e);
	char a[33], b[33];
	uint64_t t0 = moem_now_ns();

	fill_hdr(e, &want);
	if (e->pool_info.attached && !memcmp(have->magic, DIR_MAGIC, 8)) {
		if (memcmp(have, &want, sizeof(want))) {
			struct moem_pack_id hid;

			memcpy(hid.b, have->pack_id, 16);
			return moem_errf(EEXIST,
					 "pool region '%s' holds experts staged for pack %s (or "
					 "another precision or size), not for %s: destroy it or "
					 "use another region name",
					 e->pool_info.region, moem_pack_id_str(&hid, a),
					 moem_pack_id_str((struct moem_pack_id *)want.pack_id, b));
		}
		for (uint32_t v = 0; v < want.n_versions; v++) {
			if (__atomic_load_n(&ent[v].state, __ATOMIC_ACQUIRE) != 1)
				continue;
			if (moem_tiers_adopt(e->tiers, v, ent[v].doff) == 0)
				e->adopted++;
			else
				ent[v].state = 0; /* outside the budget now: restage */
		}
		e->warm = true;
		moem_info("warm restart: %llu staged expert versions adopted from region '%s' in "
			  "%.1f ms",
			  (unsigned long long)e->adopted, e->pool_info.region,
			  (double)(moem_now_ns() - t0) / 1e6);
	} else {
		if (e->pool_info.attached)
			moem_info("region '%s' holds no staging directory: staging from NVMe",
				  e->pool_info.region);
		memset(ent, 0, sizeof(*ent) * want.n_versions);
		memcpy(have, &want, sizeof(want));
	}
	moem_tiers_set_note(e->tiers, dir_note, e);
	return 0;
}

int moem_engine_verify_staged(struct moem_engine *e, uint64_t *checked, uint64_t *bad)
{
	const uint32_t n_versions = e->n_moe * e->cfg->n_experts * 2;
	struct dir_ent *ent = entries(e);
	char first[96] = "";
	int ret = moem_eng_claim(e);

	*checked = *bad = 0;
	if (ret)
		return ret;
	/* Nothing moves while we hold the engine once the loads in flight land. */
	moem_tiers_drain(e->tiers);
	__atomic_store_n(&e->stop, 0, __ATOMIC_RELEASE);
	for (uint32_t v = 0; v < n_versions; v++) {
		uint32_t pi = v & 1, x = (v >> 1) % e->cfg->n_experts,
			 m = (v >> 1) / e->cfg->n_experts;
		const struct moem_pack_blob *b;
		uint64_t doff = ent[v].doff;

		if (__atomic_load_n(&ent[v].state, __ATOMIC_ACQUIRE) != 1)
			continue;
		if (__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
			moem_eng_unclaim_work(e);
			return moem_errf(ECANCELED, "verification stopped after %llu versions",
					 (unsigned long long)*checked);
		}
		(*checked)++;
		b = pi < e->n_prec ? moem_pack_expert(e->pack, e->moe_layer[m], x, e->prec[pi])
				   : NULL;
		if (!b || doff > e->dram_bytes || b->size > e->dram_bytes - doff ||
		    moem_pack_verify_blob(b, e->dram + doff)) {
			if (!*bad)
				snprintf(first, sizeof(first),
					 "MoE layer %u expert %u %s at offset %llu", m, x,
					 pi < e->n_prec ? moem_prec_name(e->prec[pi]) : "?",
					 (unsigned long long)doff);
			(*bad)++;
		}
	}
	moem_eng_unclaim_work(e);
	if (*bad)
		return moem_errf(
			EBADMSG,
			"%llu of %llu staged expert versions do not match the pack (first: %s)",
			(unsigned long long)*bad, (unsigned long long)*checked, first);
	return 0;
}
