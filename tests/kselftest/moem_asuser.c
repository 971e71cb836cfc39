// SPDX-License-Identifier: GPL-2.0-only
/*
 * Helper for the guest (scripts/guest/init), not a test:
 *   moem_asuser UID GID PROG [ARG...]
 * runs PROG as UID:GID with no supplementary groups and no capabilities
 * (busybox has no setpriv --reuid): the unprivileged phase of the suite.
 */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char *end;
	unsigned long uid, gid;

	if (argc < 4) {
		fprintf(stderr, "usage: moem_asuser UID GID PROG [ARG...]\n");
		return 2;
	}
	uid = strtoul(argv[1], &end, 10);
	if (*end || !uid) {
		fprintf(stderr, "moem_asuser: bad uid '%s'\n", argv[1]);
		return 2;
	}
	gid = strtoul(argv[2], &end, 10);
	if (*end) {
		fprintf(stderr, "moem_asuser: bad gid '%s'\n", argv[2]);
		return 2;
	}
	if (setgroups(0, NULL) || setgid((gid_t)gid) || setuid((uid_t)uid)) {
		perror("moem_asuser");
		return 2;
	}
	execv(argv[3], argv + 3);
	perror(argv[3]);
	return 127;
}
