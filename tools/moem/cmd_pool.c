// SPDX-License-Identifier: GPL-2.0-only
/* moem pool: open the staging pool with a provider and report what served. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/pool.h>
#include <moem/util.h>

#include "cmd.h"

static void pool_usage(FILE *f)
{
	fprintf(f, "usage: moem pool [--size SIZE] [--provider auto|kmod|hugetlb|thp]\n"
		   "                 [--name REGION] [--persistent] [--attach] [--json]\n"
		   "                 [--mem-reserve SIZE|PCT%%] [--require-pinned]\n"
		   "                 [--dram-nodes all|LIST]\n"
		   "Open the host staging pool, touch it, and report which provider served it.\n"
		   "A pool larger than the machine can give (MemAvailable less the reserve,\n"
		   "default 1/16 of RAM) is refused before any memory is locked.\n"
		   "--dram-nodes spreads it over NUMA nodes (default: every node this process\n"
		   "may allocate on), one range per node, bound there and checked.\n");
}

static int cmd_pool(int argc, char **argv)
{
	static const struct option opts[] = {
		{"size", required_argument, NULL, 's'},
		{"provider", required_argument, NULL, 'p'},
		{"name", required_argument, NULL, 'n'},
		{"persistent", no_argument, NULL, 'P'},
		{"attach", no_argument, NULL, 'a'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{"mem-reserve", required_argument, NULL, 'r'},
		{"require-pinned", no_argument, NULL, 'R'},
		{"dram-nodes", required_argument, NULL, 'N'},
		{0},
	};
	struct moem_pool_mem mem;
	struct moem_pool_opts o = {.size = 64 * MOEM_MiB};
	struct moem_pool_info info;
	struct moem_pool *pool;
	int c, ret, json = 0;
	char b1[32], b2[32];

	while ((c = getopt_long(argc, argv, "s:p:n:Pajh", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			ret = moem_pool_headroom(0, &mem);
			if (!ret)
				ret = moem_parse_size(optarg, &mem.total, &o.mem_reserve);
			if (ret)
				return moem_tool_fail("pool", ret, "--mem-reserve");
			if (!o.mem_reserve)
				o.mem_reserve = 1;
			break;
		case 'R':
			o.require_pinned = true;
			break;
		case 'N':
			o.nodes = strcmp(optarg, "all") ? optarg : NULL;
			break;
		case 's':
			ret = moem_parse_size(optarg, NULL, &o.size);
			if (ret)
				return moem_tool_fail("pool", ret, "--size");
			break;
		case 'p':
			ret = moem_pool_provider_parse(optarg, &o.provider);
			if (ret)
				return moem_tool_fail("pool", ret, NULL);
			break;
		case 'n':
			o.name = optarg;
			break;
		case 'P':
			o.persistent = true;
			break;
		case 'a':
			o.attach = true;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			pool_usage(stdout);
			return 0;
		default:
			pool_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		pool_usage(stderr);
		return 2;
	}
	ret = moem_pool_open(&o, &pool);
	if (ret)
		return moem_tool_fail("pool", ret, NULL);
	moem_pool_get_info(pool, &info);
	if (json) {
		printf("{\"provider\":\"%s\",\"size\":%llu,\"page_bytes\":%llu,\"huge_bytes\":%llu,"
		       "\"pinned\":%s,\"pinned_bytes\":%llu,\"attached\":%s,",
		       moem_pool_provider_name(info.provider), (unsigned long long)info.size,
		       (unsigned long long)info.page_bytes, (unsigned long long)info.huge_bytes,
		       info.pinned ? "true" : "false", (unsigned long long)info.pinned_bytes,
		       info.attached ? "true" : "false");
		printf("\"bound\":%s,\"nodes\":[", info.bound ? "true" : "false");
		for (uint32_t k = 0; k < info.n_nodes; k++)
			printf("%s{\"node\":%d,\"off\":%llu,\"bytes\":%llu}", k ? "," : "",
			       info.nodes[k].node, (unsigned long long)info.nodes[k].off,
			       (unsigned long long)info.nodes[k].bytes);
		printf("]}\n");
	} else {
		printf("pool provider: %s\n", moem_pool_provider_name(info.provider));
		printf("  why:         %s\n", info.why);
		printf("  size:        %s\n", moem_fmt_bytes(info.size, b1, sizeof(b1)));
		printf("  pages:       %s pages, %s in 2 MiB pages\n",
		       moem_fmt_bytes(info.page_bytes, b2, sizeof(b2)),
		       moem_fmt_bytes(info.huge_bytes, b1, sizeof(b1)));
		printf("  pinned:      %s (%s locked)\n", info.pinned ? "yes" : "NO",
		       moem_fmt_bytes(info.pinned_bytes, b2, sizeof(b2)));
		printf("  kernel says: %s\n", info.backing);
		for (uint32_t k = 0; k < info.n_nodes; k++)
			printf("  node %-7d %s at offset %s%s\n", info.nodes[k].node,
			       moem_fmt_bytes(info.nodes[k].bytes, b1, sizeof(b1)),
			       moem_fmt_bytes(info.nodes[k].off, b2, sizeof(b2)),
			       info.bound ? " (mbind, checked with move_pages)" : "");
	}
	moem_pool_close(pool);
	return 0;
}

MOEM_CMD(pool_cmd, "pool", "open the staging pool and report the provider", cmd_pool);
