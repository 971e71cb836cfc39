// SPDX-License-Identifier: GPL-2.0-only
/*
 * The decoder's KV blocks and its prefix cache (decode_int.h, "KV
 * blocks"). A block is free, held by sequences (refs > 0), or both free
 * and cached: it keeps the keys and values of one run of block_tokens
 * prompt or generated tokens that followed a known prefix, so that a new
 * sequence whose prompt begins with the same tokens takes the block
 * instead of computing it again (vLLM's automatic prefix caching, the
 * llama.cpp server's cache_prompt). Only whole blocks are cached: a
 * sequence appends only to its last block, so a cached block never
 * changes while it is shared.
 *
 * A block's identity is its tokens and the cached block before it (its
 * parent, by index and generation: a block given new content takes a
 * new generation, so a child of its old content no longer matches).
 * The XXH3 chain hash of every token up to the block's end only finds
 * candidates in the table; tokens and parent decide, so a hash
 * collision cannot hand out another prompt's cache. Cached blocks nobody
 * holds are on a list, least recently released first, and a block is
 * taken from there only when no block holding nothing is left.
 *
 * Engine thread only, except the counters that moem_decoder_kv_usage()
 * reads, which change under d->lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include <moem/util.h>

#include "decode_int.h"

static uint32_t bucket_of(const struct moem_decoder *d, uint64_t hash)
{
	return (uint32_t)(hash ^ (hash >> 32)) & d->kv_mask;
}

/* Enter cached block b in the hash table. */
static void table_add(struct moem_decoder *d, int32_t b)
{
	int32_t *head = &d->kv_bucket[bucket_of(d, d->kvb[b].hash)];

	d->kvb[b].next = *head;
	*head = b;
}

static void lru_unlink(struct moem_decoder *d, int32_t b)
{
	struct kv_block *k = &d->kvb[b];

	if (k->lru_prev >= 0)
		d->kvb[k->lru_prev].lru_next = k->lru_next;
	else
		d->lru_head = k->lru_next;
	if (k->lru_next >= 0)
		d->kvb[k->lru_next].lru_prev = k->lru_prev;
	else
		d->lru_tail = k->lru_prev;
	k->lru_prev = k->lru_next = -1;
}

static void lru_append(struct moem_decoder *d, int32_t b)
{
	struct kv_block *k = &d->kvb[b];

	k->lru_prev = d->lru_tail;
	k->lru_next = -1;
	if (d->lru_tail >= 0)
		d->kvb[d->lru_tail].lru_next = b;
	else
		d->lru_head = b;
	d->lru_tail = b;
}

/* Forget what block b, which no sequence holds, caches. Under d->lock. */
static void uncache(struct moem_decoder *d, int32_t b)
{
	struct kv_block *k = &d->kvb[b];
	int32_t *p = &d->kv_bucket[bucket_of(d, k->hash)];

	while (*p != b)
		p = &d->kvb[*p].next;
	*p = k->next;
	k->next = -1;
	k->cached = false;
	lru_unlink(d, b);
	d->n_cached_free--;
}

int moem_kv_blocks_resize(struct moem_decoder *d, uint32_t n)
{
	uint32_t nb = 16, old = d->pool_blocks;
	struct kv_block *kvb;
	int32_t *toks, *bucket;

	while (nb < n && nb < (1u << 30))
		nb <<= 1;
	for (uint32_t b = n; b < old; b++)
		if (d->kvb[b].refs || d->kvb[b].cached)
			return -EBUSY; /* the caller drops what is above n first */
	kvb = realloc(d->kvb, (size_t)moem_max(n, 1u) * sizeof(*kvb));
	if (!kvb)
		return -ENOMEM;
	d->kvb = kvb;
	toks = realloc(d->kv_toks, (size_t)moem_max(n, 1u) * d->o.block_tokens * sizeof(*toks));
	bucket = malloc(nb * sizeof(*bucket));
	if (!toks || !bucket) {
		if (toks)
			d->kv_toks = toks;
		free(bucket);
		return -ENOMEM;
	}
	d->kv_toks = toks;
	for (uint32_t b = old; b < n; b++)
		kvb[b] =
			(struct kv_block){.parent = -1, .next = -1, .lru_prev = -1, .lru_next = -1};
	/* the table again, for the new size */
	free(d->kv_bucket);
	d->kv_bucket = bucket;
	d->kv_mask = nb - 1;
	memset(bucket, 0xff, nb * sizeof(*bucket));
	for (uint32_t b = 0; b < n; b++)
		if (kvb[b].cached)
			table_add(d, (int32_t)b);
	return 0;
}

void moem_kv_blocks_free(struct moem_decoder *d)
{
	free(d->kvb);
	free(d->kv_toks);
	free(d->kv_bucket);
	d->kvb = NULL;
	d->kv_toks = d->kv_bucket = NULL;
}

void moem_kv_drop_above(struct moem_decoder *d, uint32_t n)
{
	pthread_mutex_lock(&d->lock);
	for (uint32_t b = n; b < d->pool_blocks; b++)
		if (d->kvb[b].cached && !d->kvb[b].refs)
			uncache(d, (int32_t)b);
	pthread_mutex_unlock(&d->lock);
}

uint32_t moem_kv_top(const struct moem_decoder *d)
{
	uint32_t top = 0;

	for (uint32_t b = 0; b < d->pool_blocks; b++)
		if (d->kvb[b].refs || d->kvb[b].cached)
			top = b + 1;
	return top;
}

/* The cached block with tokens t that follows parent, or -1. */
static int32_t find(const struct moem_decoder *d, uint64_t hash, int32_t parent,
		    uint64_t parent_gen, const int32_t *t)
{
	const size_t bt = d->o.block_tokens;

	for (int32_t b = d->kv_bucket[bucket_of(d, hash)]; b >= 0; b = d->kvb[b].next) {
		const struct kv_block *k = &d->kvb[b];

		if (k->hash == hash && k->parent == parent &&
		    (parent < 0 || k->parent_gen == parent_gen) &&
		    !memcmp(d->kv_toks + (size_t)b * bt, t, bt * sizeof(*t)))
			return b;
	}
	return -1;
}

static uint64_t chain_hash(const struct moem_decoder *d, uint64_t prev, const int32_t *t)
{
	return XXH3_64bits_withSeed(t, (size_t)d->o.block_tokens * sizeof(*t), prev);
}

uint32_t moem_kv_match(const struct moem_decoder *d, const int32_t *toks, uint32_t n_blocks,
		       int32_t *out)
{
	const uint32_t bt = d->o.block_tokens;
	int32_t parent = -1;
	uint64_t hash = 0, gen = 0;
	uint32_t i;

	if (d->o.prefix_cache_off)
		return 0;
	for (i = 0; i < n_blocks; i++) {
		hash = chain_hash(d, hash, toks + (size_t)i * bt);
		out[i] = find(d, hash, parent, gen, toks + (size_t)i * bt);
		if (out[i] < 0)
			break;
		parent = out[i];
		gen = d->kvb[parent].gen;
	}
	return i;
}

uint32_t moem_kv_fresh(const struct moem_decoder *d, const int32_t *blocks, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		k += !d->kvb[blocks[i]].refs;
	return k;
}

/* Under d->lock. */
static void ref(struct moem_decoder *d, int32_t b)
{
	struct kv_block *k = &d->kvb[b];

	if (!k->refs++) {
		d->reserved++;
		if (k->cached) {
			lru_unlink(d, b);
			d->n_cached_free--;
		}
	} else {
		d->shared_refs++;
	}
}

/* Blocks [lo, hi) that hold nothing into tab[*i..n), lowest first. Under d->lock. */
static void take_empty(struct moem_decoder *d, uint32_t lo, uint32_t hi, uint32_t n, int32_t *tab,
		       uint32_t *i)
{
	for (uint32_t b = lo; *i < n && b < hi; b++)
		if (!d->kvb[b].refs && !d->kvb[b].cached) {
			ref(d, (int32_t)b);
			tab[(*i)++] = (int32_t)b;
		}
}

void moem_kv_take(struct moem_decoder *d, const int32_t *shared, uint32_t n_shared, uint32_t n,
		  int32_t *tab)
{
	const uint32_t lim = moem_min(d->limit_blocks, d->pool_blocks);
	uint32_t i = 0;

	pthread_mutex_lock(&d->lock);
	for (; i < n_shared; i++) {
		ref(d, shared[i]);
		tab[i] = shared[i];
	}
	/*
	 * Empty blocks below the limit, lowest first (a cut frees memory as
	 * the blocks above it empty), then what was cached longest ago, then
	 * (never needed while the admission check holds) empty blocks above.
	 */
	take_empty(d, 0, lim, n, tab, &i);
	while (i < n && d->lru_head >= 0) {
		int32_t b = d->lru_head;

		uncache(d, b);
		ref(d, b);
		tab[i++] = b;
	}
	take_empty(d, lim, d->pool_blocks, n, tab, &i);
	pthread_mutex_unlock(&d->lock);
}

void moem_kv_release(struct moem_decoder *d, const int32_t *tab, uint32_t n)
{
	pthread_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct kv_block *k = &d->kvb[tab[i]];

		if (--k->refs) {
			d->shared_refs--;
			continue;
		}
		d->reserved--;
		if (k->cached) {
			lru_append(d, tab[i]);
			d->n_cached_free++;
		}
	}
	pthread_mutex_unlock(&d->lock);
}

void moem_kv_publish(struct moem_decoder *d, struct dec_seq *s)
{
	const uint32_t bt = d->o.block_tokens;
	const int32_t *tab = d->tables_host + s->tab_off;

	if (d->o.prefix_cache_off)
		return;
	for (; (s->n_reg + 1) * bt <= s->n_cached; s->n_reg++) {
		const int32_t *t = s->toks + (size_t)s->n_reg * bt;
		uint64_t hash = chain_hash(d, s->reg_hash, t);
		int32_t b = find(d, hash, s->reg_parent, s->reg_gen, t), own = tab[s->n_reg];
		struct kv_block *k = &d->kvb[own];

		if (b < 0 && !k->cached) {
			/* its own block becomes the cached one */
			b = own;
			k->hash = hash;
			k->parent = s->reg_parent;
			k->parent_gen = s->reg_gen;
			k->gen++;
			k->cached = true;
			memcpy(d->kv_toks + (size_t)own * bt, t, bt * sizeof(*t));
			table_add(d, own);
		} else if (b < 0) {
			break; /* cannot happen: a held block is cached only as a match */
		}
		/* else another sequence cached these tokens first: chain on from its block */
		s->reg_hash = hash;
		s->reg_parent = b;
		s->reg_gen = d->kvb[b].gen;
	}
}
