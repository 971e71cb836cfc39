// SPDX-License-Identifier: GPL-2.0-only
/* File helpers of the store: bounded whole-file reads, full pread/pwrite. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>

#include "store_int.h"

static const char *file_kind(mode_t m)
{
	return S_ISFIFO(m)   ? "a FIFO"
	       : S_ISDIR(m)  ? "a directory"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISSOCK(m) ? "a socket"
			     : "not a regular file";
}

int moem_store_open_regular(const char *path, struct stat *st)
{
	int fd, ret;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, st)) {
		ret = moem_errf(errno, "%s: %s", path, strerror(errno));
		goto err_close;
	}
	if (!S_ISREG(st->st_mode)) {
		ret = moem_errf(EINVAL, "%s: %s, not a regular file", path, file_kind(st->st_mode));
		goto err_close;
	}
	if (fcntl(fd, F_SETFL, 0)) {
		ret = moem_errf(errno, "%s: %s", path, strerror(errno));
		goto err_close;
	}
	return fd;

err_close:
	close(fd);
	return ret;
}

int moem_store_read_file(const char *path, uint64_t max, char **buf, size_t *len)
{
	struct stat st;
	char *b = NULL;
	int fd, ret = 0;

	*buf = NULL;
	*len = 0;
	fd = moem_store_open_regular(path, &st);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max) {
		ret = moem_errf(EFBIG, "%s: %llu bytes, more than the %llu this file may hold",
				path, (unsigned long long)st.st_size, (unsigned long long)max);
		goto out_close;
	}
	b = malloc((size_t)st.st_size + 1);
	if (!b) {
		ret = -ENOMEM;
		goto out_close;
	}
	ret = moem_store_pread_all(fd, b, (size_t)st.st_size, 0, path);
	if (ret) {
		free(b);
		goto out_close;
	}
	b[st.st_size] = 0;
	*buf = b;
	*len = (size_t)st.st_size;
out_close:
	close(fd);
	return ret;
}

char *moem_store_path_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *p = malloc(dl + nl + 2);

	if (!p)
		return NULL;
	memcpy(p, dir, dl);
	p[dl] = '/';
	memcpy(p + dl + 1, name, nl + 1);
	return p;
}

int moem_store_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return moem_errf(errno, "%s: write at %llu: %s", what,
					 (unsigned long long)off, strerror(errno));
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int moem_store_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return moem_errf(errno, "%s: read at %llu: %s", what,
					 (unsigned long long)off, strerror(errno));
		}
		if (n == 0)
			return moem_errf(EIO, "%s: short read at %llu (%zu bytes missing)", what,
					 (unsigned long long)off, len);
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

uint32_t moem_store_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > 16 ? 16 : (uint32_t)n;
}
