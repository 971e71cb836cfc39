// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hidden-state files (engine.h): entry hidden states recorded once and
 * replayed, so a run does not depend on the synthetic generator (or can
 * use states recorded elsewhere).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/synth.h>

#include "hidden.h"

#define HID_MAGIC "MOEMHID1"

struct hid_hdr {
	char magic[8];
	uint32_t version, hidden, batch, reserved;
	uint64_t steps;
};

int moem_hidden_open(const char *path, uint32_t hidden, struct moem_hidden *h)
{
	struct hid_hdr hdr;
	struct stat st;
	uint64_t need;

	memset(h, 0, sizeof(*h));
	/* O_NONBLOCK: a FIFO given as the file must not wait for a writer. */
	h->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (h->fd < 0)
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	if (fstat(h->fd, &st) == 0 && !S_ISREG(st.st_mode)) {
		close(h->fd);
		return moem_errf(EINVAL, "%s: not a regular file", path);
	}
	if (fstat(h->fd, &st) < 0 || pread(h->fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		close(h->fd);
		return moem_errf(EINVAL, "%s: not a hidden-state file (too short)", path);
	}
	if (memcmp(hdr.magic, HID_MAGIC, 8) || hdr.version != 1 || hdr.reserved) {
		close(h->fd);
		return moem_errf(EINVAL, "%s: not a version-1 hidden-state file", path);
	}
	if (hdr.hidden != hidden || !hdr.batch || hdr.batch > 64 || !hdr.steps) {
		close(h->fd);
		return moem_errf(
			EINVAL, "%s: hidden %u, batch %u, %llu steps (the model has hidden %u)",
			path, hdr.hidden, hdr.batch, (unsigned long long)hdr.steps, hidden);
	}
	if (__builtin_mul_overflow(hdr.steps, (uint64_t)hdr.batch * hidden * 4, &need) ||
	    need + sizeof(hdr) != (uint64_t)st.st_size) {
		close(h->fd);
		return moem_errf(EINVAL, "%s: %lld bytes, the header says %llu steps of %u x %u",
				 path, (long long)st.st_size, (unsigned long long)hdr.steps,
				 hdr.batch, hidden);
	}
	h->hidden = hidden;
	h->batch = hdr.batch;
	h->steps = hdr.steps;
	return 0;
}

int moem_hidden_read(struct moem_hidden *h, uint64_t step, float *out)
{
	uint64_t len = (uint64_t)h->batch * h->hidden * 4;
	ssize_t n = pread(h->fd, out, len, (off_t)(sizeof(struct hid_hdr) + step * len));

	if (n != (ssize_t)len)
		return moem_errf(EIO, "hidden-state file: short read at step %llu",
				 (unsigned long long)step);
	for (uint64_t i = 0; i < len / 4; i++)
		if (!__builtin_isfinite(out[i]))
			return moem_errf(EINVAL, "hidden-state file: non-finite value at step %llu",
					 (unsigned long long)step);
	return 0;
}

void moem_hidden_close(struct moem_hidden *h)
{
	if (h->fd > 0)
		close(h->fd);
	h->fd = -1;
}

int moem_hidden_write_synth(const char *pack_path, const char *mix, uint64_t seed, uint32_t batch,
			    uint64_t steps, const char *out_path)
{
	struct moem_synth_params sp;
	double m[MOEM_SYNTH_MAX_WORKLOADS];
	struct moem_synth *g = NULL;
	struct moem_pack *pack;
	struct hid_hdr hdr;
	float *basis = NULL, *row = NULL;
	char tmp[4096];
	FILE *f = NULL;
	uint32_t H;
	int ret;

	if (!batch || batch > 64 || !steps)
		return moem_errf(EINVAL, "batch 1..64 and at least one step");
	ret = moem_pack_open(pack_path, &pack);
	if (ret)
		return ret;
	H = moem_pack_config(pack)->hidden;
	ret = moem_pack_synth(pack, &sp);
	if (ret)
		goto out;
	if (seed)
		sp.seed = seed;
	ret = moem_synth_parse_mix(&sp, mix, m);
	if (!ret)
		ret = moem_synth_create(&sp, m, batch, &g);
	if (ret)
		goto out;
	basis = malloc(sizeof(float) * sp.n_layers * sp.n_experts * H);
	row = malloc(sizeof(float) * H);
	if (!basis || !row) {
		ret = -ENOMEM;
		goto out;
	}
	ret = moem_pack_synth_basis(pack, basis);
	if (ret)
		goto out;
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", out_path, (int)getpid());
	f = fopen(tmp, "wb");
	if (!f) {
		ret = moem_errf(errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	memset(&hdr, 0, sizeof(hdr));
	memcpy(hdr.magic, HID_MAGIC, 8);
	hdr.version = 1;
	hdr.hidden = H;
	hdr.batch = batch;
	hdr.steps = steps;
	if (fwrite(&hdr, sizeof(hdr), 1, f) != 1)
		ret = -EIO;
	for (uint64_t s = 0; s < steps && !ret; s++) {
		moem_synth_step(g);
		for (uint32_t b = 0; b < batch && !ret; b++) {
			moem_synth_hidden(g, b, basis, H, row);
			if (fwrite(row, sizeof(float), H, f) != H)
				ret = -EIO;
		}
	}
	if (fclose(f) && !ret)
		ret = -EIO;
	f = NULL;
	if (ret) {
		unlink(tmp);
		ret = moem_errf(-ret, "%s: write failed", out_path);
	} else if (rename(tmp, out_path) < 0) {
		ret = moem_errf(errno, "%s: %s", out_path, strerror(errno));
		unlink(tmp);
	}
out:
	moem_synth_destroy(g);
	free(basis);
	free(row);
	moem_pack_close(pack);
	return ret;
}
