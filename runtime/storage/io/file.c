// SPDX-License-Identifier: GPL-2.0-only
/*
 * Opening a file for the loader: O_DIRECT when the file system takes it,
 * with the alignment it needs, else buffered with the reason recorded.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "loader_int.h"

/* Used when the kernel does not say (no STATX_DIOALIGN, e.g. tmpfs). */
#define LD_DIO_ALIGN_DEFAULT 4096U

/*
 * The O_DIRECT alignment of fd: statx(STATX_DIOALIGN) for files (Linux
 * 6.1+; 0 there means the file cannot do direct I/O), the logical block
 * size for block devices, else 4 KiB. Returns false if direct I/O is
 * known to be unsupported.
 */
static bool dio_align(int fd, const struct stat *st, uint32_t *off_align, uint32_t *mem_align)
{
	struct statx sx;
	int lbs;

	*off_align = *mem_align = LD_DIO_ALIGN_DEFAULT;
	if (S_ISBLK(st->st_mode)) {
		if (ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs > 0)
			*off_align = *mem_align = (uint32_t)lbs;
		return true;
	}
#ifdef STATX_DIOALIGN
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
	    (sx.stx_mask & STATX_DIOALIGN)) {
		if (!sx.stx_dio_offset_align || !sx.stx_dio_mem_align)
			return false;
		*off_align = sx.stx_dio_offset_align;
		*mem_align = sx.stx_dio_mem_align;
	}
#else
	(void)sx;
#endif
	return true;
}

/*
 * Read the first block with O_DIRECT: some file systems accept the open
 * and refuse the read (EINVAL). Returns 0 or the read's -errno.
 */
static int dio_probe(int fd, uint32_t off_align, uint32_t mem_align, uint64_t size)
{
	size_t len = moem_max(off_align, 4096U);
	void *buf;
	ssize_t n;
	int ret = 0;

	if (!size)
		return 0;
	if (posix_memalign(&buf, moem_max(mem_align, 4096U), len))
		return -ENOMEM;
	n = pread(fd, buf, len, 0);
	if (n < 0)
		ret = -errno;
	free(buf);
	return ret;
}

static int file_size(int fd, const struct stat *st, uint64_t *size)
{
	uint64_t sz;

	if (S_ISREG(st->st_mode)) {
		*size = (uint64_t)st->st_size;
		return 0;
	}
	if (ioctl(fd, BLKGETSIZE64, &sz) < 0)
		return -errno;
	*size = sz;
	return 0;
}

int moem_ld_file_open(struct moem_loader *ld, const char *path, struct ld_file *f)
{
	bool want_direct = !ld->opts.no_direct && ld->opts.mode != MOEM_LOADER_BUFFERED;
	struct stat st;
	int fd, ret;

	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC | (want_direct ? O_DIRECT : 0));
	if (fd < 0 && want_direct && errno == EINVAL) {
		snprintf(f->why, sizeof(f->why), "O_DIRECT refused at open (%s)", strerror(EINVAL));
		want_direct = false;
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		ret = moem_errf(errno, "%s: %s", path, strerror(errno));
		goto err_path;
	}
	if (fstat(fd, &st) < 0) {
		ret = moem_errf(errno, "%s: fstat: %s", path, strerror(errno));
		goto err_fd;
	}
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		ret = moem_errf(EINVAL, "%s: not a regular file or block device", path);
		goto err_fd;
	}
	ret = file_size(fd, &st, &f->size);
	if (ret) {
		ret = moem_errf(-ret, "%s: size: %s", path, strerror(-ret));
		goto err_fd;
	}
	f->off_align = f->mem_align = 1;
	if (want_direct) {
		uint32_t oa, ma;

		if (!dio_align(fd, &st, &oa, &ma)) {
			snprintf(f->why, sizeof(f->why),
				 "file system reports no direct I/O (STATX_DIOALIGN 0)");
			want_direct = false;
		} else {
			ret = dio_probe(fd, oa, ma, f->size);
			if (ret == -EINVAL) {
				snprintf(f->why, sizeof(f->why),
					 "O_DIRECT read refused at first read (%s)",
					 strerror(EINVAL));
				want_direct = false;
			} else if (ret) {
				ret = moem_errf(-ret, "%s: first read: %s", path, strerror(-ret));
				goto err_fd;
			} else {
				f->off_align = oa;
				f->mem_align = ma;
			}
		}
		if (!want_direct) {
			/* Reopen: clearing O_DIRECT with fcntl works too, but a fresh
			 * fd leaves no doubt about the mode. */
			int bfd = open(path, O_RDONLY | O_CLOEXEC);

			if (bfd < 0) {
				ret = moem_errf(errno, "%s: %s", path, strerror(errno));
				goto err_fd;
			}
			close(fd);
			fd = bfd;
		}
	} else if (!f->why[0]) {
		snprintf(f->why, sizeof(f->why), "%s",
			 ld->opts.mode == MOEM_LOADER_BUFFERED ? "buffered mode" : "no_direct set");
	}
	f->fd = fd;
	f->direct = want_direct;
	return 0;

err_fd:
	close(fd);
err_path:
	free(f->path);
	f->path = NULL;
	return ret;
}

void moem_ld_file_close(struct ld_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	f->fd = -1;
	f->path = NULL;
}
