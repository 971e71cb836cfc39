/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Long-term pins of region memory from user space, for the guest tests:
 * an AF_XDP umem (XDP_UMEM_REG pins its pages with FOLL_WRITE |
 * FOLL_LONGTERM, exactly like CUDA's and RDMA's registration, on every
 * kernel; needs CAP_NET_RAW) and the kernel version, since io_uring's own
 * rules for fixed buffers differ between 6.1 and 6.12.
 */
#ifndef MOEM_PIN_H
#define MOEM_PIN_H

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <linux/if_xdp.h>

#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef AF_XDP
#define AF_XDP 44
#endif

/* An AF_XDP socket whose umem pins [p, p + len); close it to unpin. -errno on failure. */
static inline int umem_pin(void *p, unsigned long long len)
{
	struct xdp_umem_reg mr = {
		.addr = (unsigned long long)(unsigned long)p, .len = len, .chunk_size = 4096};
	int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_XDP, XDP_UMEM_REG, &mr, sizeof(mr))) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* The running kernel as major * 1000 + minor (6.1 -> 6001, 6.12 -> 6012). */
static inline int kernel_version(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return 0;
	return major * 1000 + minor;
}

/*
 * io_uring accepts fixed buffers over a file-backed mapping (other than
 * shmem or hugetlbfs) from 6.5 on; 6.1's io_pin_pages() says EOPNOTSUPP.
 */
static inline int iouring_takes_file_buffers(void)
{
	return kernel_version() >= 6005;
}

#endif /* MOEM_PIN_H */
