// SPDX-License-Identifier: GPL-2.0-only
/*
 * How much memory a new pool may take (pool.h): MemAvailable from
 * /proc/meminfo, bounded by the cgroup v2 limit of this process
 * (memory.max - memory.current), less a reserve left to the rest of the
 * machine. A pool that asks for more is refused (or shrunk, with
 * opts.fit) before a byte is locked: locking more than the machine has
 * wakes the OOM killer, which may kill anything.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

uint64_t moem_pool_default_reserve(uint64_t mem_total)
{
	return moem_clamp(mem_total / 16, 256 * MOEM_MiB, 4 * MOEM_GiB);
}

static int meminfo(uint64_t *total, uint64_t *avail)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	int found = 0;

	if (!f)
		return moem_errf(errno, "/proc/meminfo: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
			*total = (uint64_t)kb << 10;
			found |= 1;
		} else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			*avail = (uint64_t)kb << 10;
			found |= 2;
		}
	}
	fclose(f);
	if (found != 3)
		return moem_errf(EIO, "/proc/meminfo: no MemTotal or MemAvailable");
	return 0;
}

static uint64_t read_u64(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned long long v;
	char buf[32] = "";

	if (!f)
		return UINT64_MAX;
	if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%llu", &v) != 1)
		v = UINT64_MAX; /* "max", or unreadable: no limit known */
	fclose(f);
	return v;
}

/* memory.max - memory.current of this process's cgroup (v2), or UINT64_MAX. */
static uint64_t cgroup_left(void)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[512], path[640];
	uint64_t max, cur;

	if (!f)
		return UINT64_MAX;
	path[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s", line + 3);
			break;
		}
	}
	fclose(f);
	if (!path[0])
		return UINT64_MAX;
	strncat(path, "/memory.max", sizeof(path) - strlen(path) - 1);
	max = read_u64(path);
	path[strlen(path) - strlen("memory.max")] = 0;
	strncat(path, "memory.current", sizeof(path) - strlen(path) - 1);
	cur = read_u64(path);
	if (max == UINT64_MAX || cur == UINT64_MAX)
		return UINT64_MAX;
	return max > cur ? max - cur : 0;
}

int moem_pool_headroom(uint64_t reserve, struct moem_pool_mem *m)
{
	uint64_t avail;
	int ret;

	memset(m, 0, sizeof(*m));
	ret = meminfo(&m->total, &m->available);
	if (ret)
		return ret;
	m->cgroup_left = cgroup_left();
	m->reserve = reserve ? reserve : moem_pool_default_reserve(m->total);
	avail = moem_min(m->available, m->cgroup_left);
	m->headroom = avail > m->reserve ? avail - m->reserve : 0;
	return 0;
}

int moem_pool_fit(const struct moem_pool_opts *o, struct moem_pool *pool, uint64_t have,
		  uint64_t ceiling, const char *ceiling_what, uint64_t *size)
{
	struct moem_pool_mem m;
	char a[32], b[32], c[32], d[32], e[32], limit[240];
	uint64_t can, fresh;
	int ret;

	if (*size <= have)
		return 0; /* no new memory needed */
	ret = moem_pool_headroom(o->mem_reserve, &m);
	if (ret)
		return ret;
	fresh = moem_min(m.headroom, ceiling);
	can = (have + fresh) / MOEM_CHUNK_BYTES * MOEM_CHUNK_BYTES;
	if (*size <= can)
		return 0;
	if (ceiling < m.headroom)
		snprintf(limit, sizeof(limit), "%s leaves %s", ceiling_what,
			 moem_fmt_bytes(have + ceiling, a, sizeof(a)));
	else
		snprintf(limit, sizeof(limit),
			 "MemAvailable %s%s%s less the reserve of %s (mem-reserve) leaves %s",
			 moem_fmt_bytes(m.available, a, sizeof(a)),
			 m.cgroup_left < m.available ? ", cgroup headroom " : "",
			 m.cgroup_left < m.available ? moem_fmt_bytes(m.cgroup_left, b, sizeof(b))
						     : "",
			 moem_fmt_bytes(m.reserve, c, sizeof(c)),
			 moem_fmt_bytes(have + m.headroom, d, sizeof(d)));
	if (!o->fit || can < MOEM_CHUNK_BYTES)
		return moem_errf(ENOMEM, "a pool of %s is more than this machine can give: %s",
				 moem_fmt_bytes(*size, e, sizeof(e)), limit);
	snprintf(pool->limit, sizeof(pool->limit), "shrunk from %s to %s: %s",
		 moem_fmt_bytes(*size, e, sizeof(e)), moem_fmt_bytes(can, a, sizeof(a)), limit);
	*size = can;
	return 0;
}

int moem_pool_kmod_room(uint64_t *free_bytes, uint64_t *room)
{
	uint64_t total = read_u64(MOEM_SYSFS_ROOT "/pool/total_bytes"),
		 max = read_u64(MOEM_SYSFS_ROOT "/pool/max_bytes");

	*free_bytes = read_u64(MOEM_SYSFS_ROOT "/pool/free_bytes");
	if (total == UINT64_MAX || max == UINT64_MAX || *free_bytes == UINT64_MAX)
		return -ENOENT;
	*room = max > total ? max - total : 0;
	return 0;
}
