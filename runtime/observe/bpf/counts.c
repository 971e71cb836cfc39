// SPDX-License-Identifier: GPL-2.0-only
/*
 * The expert-count text format (bpf.h): the engine's own counters and
 * moem_hot written the same way, so a test or a person compares them with
 * cmp(1). Needs no BPF.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>

#define COUNTS_HEADER "# moem expert counts: layer expert count (MoE-layer index, non-zero only)\n"

struct out {
	const char *path;
	char *tmp;
	FILE *f;
};

static int out_open(struct out *o, const char *path)
{
	int fd;

	o->path = path;
	o->f = NULL;
	if (asprintf(&o->tmp, "%s.XXXXXX", path) < 0) {
		o->tmp = NULL;
		return -ENOMEM;
	}
	fd = mkstemp(o->tmp);
	if (fd < 0 || fchmod(fd, 0644) < 0 || !(o->f = fdopen(fd, "w"))) {
		int ret = moem_errf(errno, "%s: cannot create a file next to it: %s", path,
				    strerror(errno));

		if (fd >= 0) {
			close(fd);
			unlink(o->tmp);
		}
		free(o->tmp);
		return ret;
	}
	fputs(COUNTS_HEADER, o->f);
	return 0;
}

static int out_close(struct out *o)
{
	int ret = 0;

	if (ferror(o->f) || fflush(o->f) || fsync(fileno(o->f)))
		ret = moem_errf(errno ? errno : EIO, "%s: write: %s", o->path,
				strerror(errno ? errno : EIO));
	if (fclose(o->f) && !ret)
		ret = moem_errf(errno, "%s: close: %s", o->path, strerror(errno));
	if (!ret && rename(o->tmp, o->path) < 0)
		ret = moem_errf(errno, "%s: rename: %s", o->path, strerror(errno));
	if (ret)
		unlink(o->tmp);
	free(o->tmp);
	return ret;
}

int moem_expert_counts_write(const char *path, const uint64_t *counts, uint32_t n_layers,
			     uint32_t n_experts)
{
	struct out o;
	int ret = out_open(&o, path);

	if (ret)
		return ret;
	for (uint32_t l = 0; l < n_layers; l++)
		for (uint32_t x = 0; x < n_experts; x++)
			if (counts[(size_t)l * n_experts + x])
				fprintf(o.f, "%u %u %llu\n", l, x,
					(unsigned long long)counts[(size_t)l * n_experts + x]);
	return out_close(&o);
}

int moem_hot_entries_write(const char *path, const struct moem_hot_entry *e, size_t n)
{
	struct out o;
	int ret = out_open(&o, path);

	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++)
		if (e[i].count)
			fprintf(o.f, "%u %u %llu\n", e[i].layer, e[i].expert,
				(unsigned long long)e[i].count);
	return out_close(&o);
}
