// SPDX-License-Identifier: GPL-2.0-only
/*
 * Helper for the guest's unload checks (scripts/guest/init), not a test:
 *   moem_hold map NAME      create NAME, map it, close the fd, print
 *                           "ready" and sleep until killed: the mapping
 *                           alone must keep rmmod from unloading moem.ko;
 *   moem_hold persist NAME  create a persistent NAME, write to it and
 *                           exit: rmmod must then succeed and free it;
 *   moem_hold remap NAME    create and map NAME, then call
 *                           remap_file_pages() on the mapping. Never run
 *                           by the suite: with iouring_compat=1 on Linux
 *                           < 6.5 it oopses the kernel (the reproducer
 *                           behind Documentation/admin-guide.md's
 *                           warning); with the default it just works.
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

#include <linux/moem.h>

int main(int argc, char **argv)
{
	struct moem_region_create c = {.size = MOEM_CHUNK_SIZE, .mode = 0600};
	int dev, persist;
	uint8_t *p;

	if (argc != 3 ||
	    (strcmp(argv[1], "map") && strcmp(argv[1], "persist") && strcmp(argv[1], "remap"))) {
		fprintf(stderr, "usage: moem_hold map|persist|remap NAME\n");
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

		printf("remap_file_pages(%p, 4096, 0, 1, 0)\n", (void *)p);
		fflush(stdout);
		ret = syscall(SYS_remap_file_pages, p, 4096, 0, 1, 0);
		printf("remap_file_pages: %ld (%s)\n", ret, ret ? strerror(errno) : "ok");
		return ret ? 1 : 0;
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
