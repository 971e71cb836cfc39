// SPDX-License-Identifier: GPL-2.0-only
/*
 * Helper for the guest's unload checks (scripts/guest/init), not a test:
 *   moem_hold map NAME      create NAME, map it, close the fd, print
 *                           "ready" and sleep until killed: the mapping
 *                           alone must keep rmmod from unloading moem.ko;
 *   moem_hold persist NAME  create a persistent NAME, write to it and
 *                           exit: rmmod must then succeed and free it;
 *   moem_hold remap NAME    create and map NAME, close the fd, then call
 *                           remap_file_pages() on the mapping and check
 *                           the page it put there: the sequence that
 *                           oopsed Linux 6.1 and 6.12 when the module's
 *                           old iouring_compat=1 mapped regions without a
 *                           file (the guest runs it as an unprivileged
 *                           user);
 *   moem_hold pin NAME      create and map NAME, pin its first chunk for
 *                           the long term (an AF_XDP umem: FOLL_LONGTERM,
 *                           as GPU and RDMA registration; an io_uring
 *                           fixed buffer where the kernel has no AF_XDP
 *                           but takes region memory), unmap and close
 *                           it, print "ready" and sleep until killed:
 *                           the region is dead but its chunk pinned, and
 *                           rmmod must be safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <liburing.h>

#include <linux/moem.h>

#include "moem_pin.h"

int main(int argc, char **argv)
{
	struct moem_region_create c = {.size = 2 * MOEM_CHUNK_SIZE, .mode = 0600};
	int dev, persist;
	uint8_t *p;

	if (argc != 3 || (strcmp(argv[1], "map") && strcmp(argv[1], "persist") &&
			  strcmp(argv[1], "remap") && strcmp(argv[1], "pin"))) {
		fprintf(stderr, "usage: moem_hold map|persist|remap|pin NAME\n");
		return 2;
	}
	persist = !strcmp(argv[1], "persist");
	dev = open("/dev/moem", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		perror("/dev/moem");
		return 1;
	}
	c.name_ptr = (uintptr_t)argv[2];
	c.flags = persist ? MOEM_REGION_PERSISTENT : 0;
	if (ioctl(dev, MOEM_IOC_REGION_CREATE, &c)) {
		fprintf(stderr, "create %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	p = mmap(NULL, c.size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)c.fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(p, 0x5c, c.size);
	if (!strcmp(argv[1], "remap")) {
		long ret;

		/* Only the mapping holds the region now. */
		close((int)c.fd);
		p[4096] = 0x7e;
		printf("uid %u: remap_file_pages(%p, 4096, 0, 1, 0)\n", (unsigned int)geteuid(),
		       (void *)p);
		fflush(stdout);
		ret = syscall(SYS_remap_file_pages, p, 4096, 0, 1, 0);
		printf("remap_file_pages: %ld (%s)\n", ret, ret ? strerror(errno) : "ok");
		if (ret || p[0] != 0x7e) {
			printf("remap_file_pages: page 0 reads 0x%x, not page 1's 0x7e\n", p[0]);
			return 1;
		}
		return 0;
	}
	if (!strcmp(argv[1], "pin")) {
		struct io_uring ring;
		int xsk = umem_pin(p, c.size / 2);

		/* A kernel without AF_XDP (the debug build): an io_uring fixed buffer. */
		if (xsk == -EAFNOSUPPORT && iouring_takes_file_buffers()) {
			struct iovec iov = {p, c.size / 2};

			xsk = io_uring_queue_init(2, &ring, 0);
			if (!xsk)
				xsk = io_uring_register_buffers(&ring, &iov, 1);
		}
		if (xsk < 0) {
			fprintf(stderr, "long-term pin of the region: %s\n", strerror(-xsk));
			return 1;
		}
		munmap(p, c.size);
		close((int)c.fd);
		close(dev);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	close((int)c.fd);
	close(dev);
	if (persist)
		return 0;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
