/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for moemd's tests inside the QEMU guest (moem.ko loaded): the
 * packs on the guest's disk, moem.ko's regions and pool counters, the
 * staging directory a daemon leaves in its region (runtime/engine/warm.c
 * documents the layout), and timed daemon starts.
 */
#ifndef MOEM_GUEST_UTIL_H
#define MOEM_GUEST_UTIL_H

#include <sys/mman.h>

#include <moem/dev.h>
#include <moem/pack.h>

#include "daemon_util.h"

static inline const char *g_pack(void)
{
	return getenv("MOEM_TEST_PACK") ? getenv("MOEM_TEST_PACK") : "/mnt/daemon.moem";
}

static inline const char *g_other_pack(void)
{
	return getenv("MOEM_TEST_OTHER_PACK") ? getenv("MOEM_TEST_OTHER_PACK") : "/mnt/other.moem";
}

/* moemd's default region name for a pack: "moemd-" + 16 hex of its id. */
static inline int g_region_of(const char *pack, char name[64])
{
	struct moem_pack *p;
	struct moem_pack_id id;
	char hex[33];
	int ret = moem_pack_open(pack, &p);

	if (ret)
		return ret;
	moem_pack_get_id(p, &id);
	moem_pack_close(p);
	snprintf(name, 64, "moemd-%.16s", moem_pack_id_str(&id, hex));
	return 0;
}

struct g_pool {
	uint64_t total, free;
	uint32_t regions;
	char names[512]; /* region names, space-separated, sorted by the kernel */
};

static inline int g_pool_read(struct g_pool *p)
{
	struct moem_pool_stats st;
	char **names;
	uint32_t n;
	int fd, ret = moem_dev_open(NULL, &fd);

	if (ret)
		return ret;
	ret = moem_dev_pool_stats(fd, &st);
	if (!ret)
		ret = moem_dev_region_list(fd, &names, &n);
	close(fd);
	if (ret)
		return ret;
	p->total = st.total_bytes;
	p->free = st.free_bytes;
	p->regions = n;
	p->names[0] = 0;
	for (uint32_t i = 0; i < n; i++)
		snprintf(p->names + strlen(p->names), sizeof(p->names) - strlen(p->names), "%s%s",
			 i ? " " : "", names[i]);
	moem_dev_names_free(names, n);
	return 0;
}

static inline int g_region_destroy(const char *name)
{
	int fd, ret = moem_dev_open(NULL, &fd);

	if (ret)
		return ret;
	ret = moem_dev_region_destroy(fd, name);
	close(fd);
	return ret == -ENOENT ? 0 : ret;
}

/* The staging directory at the start of a daemon's region. */
struct g_dir_hdr {
	char magic[8];
	uint32_t version, n_versions;
	uint8_t pack_id[16];
	uint64_t blob_bytes[2];
	uint32_t prec[2];
	uint64_t dir_bytes, data_bytes;
};

struct g_dir_ent {
	uint32_t state, pad;
	uint64_t doff;
};

/*
 * Check, from outside the daemon, every expert version the region's
 * directory says is staged against the pack's checksums with
 * moem_pack_verify_blob(). *staged and *bad counted; -errno if the
 * region cannot be read. With corrupt, first flip one byte of the first
 * staged version (to show the check can fail).
 */
static inline int g_verify_region(const char *region, const char *pack_path, uint64_t *staged,
				  uint64_t *bad, bool corrupt)
{
	struct moem_region_info ri;
	const struct moem_model_config *cfg;
	struct moem_pack *pack;
	struct g_dir_hdr *h;
	struct g_dir_ent *ent;
	uint8_t *base;
	int dev, fd, ret;

	*staged = *bad = 0;
	ret = moem_pack_open(pack_path, &pack);
	if (ret)
		return ret;
	ret = moem_dev_open(NULL, &dev);
	if (!ret) {
		ret = moem_dev_region_open(dev, region, 0, &fd);
		close(dev);
	}
	if (!ret)
		ret = moem_dev_region_fd_info(fd, &ri, NULL);
	if (ret) {
		moem_pack_close(pack);
		return ret;
	}
	base = mmap(NULL, ri.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED) {
		moem_pack_close(pack);
		return -errno;
	}
	cfg = moem_pack_config(pack);
	h = (struct g_dir_hdr *)base;
	ent = (struct g_dir_ent *)(base + 4096);
	if (memcmp(h->magic, "MOEMDIR1", 8) ||
	    h->n_versions != cfg->n_layers * cfg->n_experts * 2 ||
	    h->dir_bytes + h->data_bytes > ri.size) {
		ret = -EBADMSG;
		goto out;
	}
	for (uint32_t v = 0; v < h->n_versions; v++) {
		uint32_t pi = v & 1, x = (v >> 1) % cfg->n_experts, m = (v >> 1) / cfg->n_experts;
		const struct moem_pack_blob *b;
		uint8_t *data;

		if (ent[v].state != 1)
			continue;
		(*staged)++;
		/* Every layer of the test packs is a MoE layer: m is the layer. */
		b = moem_pack_expert(pack, m, x, (enum moem_prec)h->prec[pi]);
		data = base + h->dir_bytes + ent[v].doff;
		if (!b || ent[v].doff + b->size > h->data_bytes) {
			(*bad)++;
			continue;
		}
		if (corrupt) {
			data[b->size / 2] ^= 0x5a;
			corrupt = false;
		}
		if (moem_pack_verify_blob(b, data))
			(*bad)++;
	}
out:
	munmap(base, ri.size);
	moem_pack_close(pack);
	return ret;
}

/*
 * Start moemd and time it to its first step: exec, then a one-step run
 * as soon as it serves (asked again while it answers "not ready").
 * *ms = exec to the first step's result.
 */
static inline int g_start_to_first_step(struct dmn *d, const char *dir, const char *const *args,
					double *ms)
{
	uint64_t t0 = moem_now_ns();
	struct json_object *r = NULL;
	struct moem_ctl *c;
	int ret = dmn_start_argv(d, dir, args);

	if (!ret)
		ret = dmn_connect(d, 300000, &c);
	if (ret)
		return ret;
	for (;;) {
		ret = moem_ctl_call(c, "run", dmn_run_args("steps", "1", "batch", "1", NULL), 60000,
				    &r);
		json_object_put(r);
		if (ret != -EAGAIN || dmn_exited(d) || moem_now_ns() - t0 > 300000000000ULL)
			break;
		dmn_sleep_ms(1);
	}
	*ms = (double)(moem_now_ns() - t0) / 1e6;
	moem_ctl_close(c);
	return ret;
}

#endif /* MOEM_GUEST_UTIL_H */
