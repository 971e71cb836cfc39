// SPDX-License-Identifier: GPL-2.0-only
/* moem backend: open a compute backend and say which one served and why. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/util.h>

#include "cmd.h"

static void backend_usage(FILE *f)
{
	fprintf(f, "usage: moem backend [--backend auto|cpu|cuda] [--threads N] [--device N] "
		   "[--json]\n"
		   "Open a compute backend (default auto) and report which one served and why.\n");
}

/* s as the inside of a JSON string. */
static void json_str(const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
}

static int cmd_backend(int argc, char **argv)
{
	static const struct option opts[] = {
		{"backend", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"device", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct moem_backend_opts o = {0};
	struct moem_backend_info info;
	const char *name = "auto";
	struct moem_backend *be;
	int c, ret, json = 0;
	char b1[32];

	while ((c = getopt_long(argc, argv, "b:t:d:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			name = optarg;
			break;
		case 't':
		case 'd': {
			/* whole decimal numbers in range, not strtoul()'s best guess */
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 0 ||
			    v > (c == 't' ? 4096 : 1024)) {
				fprintf(stderr, "moem backend: --%s '%s': want a number in 0..%d\n",
					c == 't' ? "threads" : "device", optarg,
					c == 't' ? 4096 : 1024);
				return 2;
			}
			if (c == 't')
				o.threads = (uint32_t)v;
			else
				o.device = (int32_t)v;
			break;
		}
		case 'j':
			json = 1;
			break;
		case 'h':
			backend_usage(stdout);
			return 0;
		default:
			backend_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		backend_usage(stderr);
		return 2;
	}
	ret = moem_backend_open(name, &o, &be);
	if (ret)
		return moem_tool_fail("backend", ret, NULL);
	moem_backend_get_info(be, &info);
	if (json) {
		printf("{\"backend\":\"%s\",\"device\":\"", moem_backend_name(be));
		json_str(info.device);
		printf("\",\"note\":\"");
		json_str(moem_backend_note(be));
		printf("\",\"threads\":%u,\"memory\":%llu,\"cc\":\"%d.%d\",\"driver\":%d,"
		       "\"kernels\":%s}\n",
		       info.threads, (unsigned long long)info.mem_total, info.cc_major,
		       info.cc_minor, info.driver_version, info.kernels ? "true" : "false");
	} else {
		printf("backend: %s\n", moem_backend_name(be));
		printf("  device: %s\n", info.device);
		printf("  memory: %s\n", moem_fmt_bytes(info.mem_total, b1, sizeof(b1)));
		if (info.kind == MOEM_BACKEND_CUDA)
			printf("  driver: %d.%d\n", info.driver_version / 1000,
			       info.driver_version % 1000 / 10);
		if (moem_backend_note(be)[0])
			printf("  why:    %s\n", moem_backend_note(be));
	}
	moem_backend_close(be);
	return 0;
}

MOEM_CMD(backend_cmd, "backend", "open a compute backend and report which one served", cmd_backend);
