// SPDX-License-Identifier: GPL-2.0-only
/* What /proc/self/smaps says of one mapping (pool.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <moem/pool.h>

int moem_smaps_read(const void *addr, struct moem_smaps *out)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, found = 0;

	if (!f)
		return -errno;
	memset(out, 0, sizeof(*out));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, kb;
		char key[64];

		/* A mapping header starts with its hex address range. */
		if (sscanf(line, "%llx-%llx %*s", &start, &end) == 2 &&
		    line[strspn(line, "0123456789abcdef")] == '-') {
			in = (uintptr_t)addr == start;
			found |= in;
			continue;
		}
		if (!in || sscanf(line, "%63[^:]: %llu kB", key, &kb) != 2)
			continue;
		if (!strcmp(key, "Size"))
			out->size = kb << 10;
		else if (!strcmp(key, "Rss"))
			out->rss = kb << 10;
		else if (!strcmp(key, "KernelPageSize"))
			out->kernel_page = kb << 10;
		else if (!strcmp(key, "AnonHugePages") || !strcmp(key, "Shared_Hugetlb") ||
			 !strcmp(key, "Private_Hugetlb") || !strcmp(key, "ShmemPmdMapped") ||
			 !strcmp(key, "FilePmdMapped"))
			out->huge += kb << 10;
		else if (!strcmp(key, "Locked"))
			out->locked = kb << 10;
	}
	fclose(f);
	return found ? 0 : -ENOENT;
}
