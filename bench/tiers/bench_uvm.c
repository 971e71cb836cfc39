// SPDX-License-Identifier: GPL-2.0-only
/*
 * UVM against moem's VMM staging at the same HBM budget (the GPU bundle's
 * bench, bench/tiers/uvm.sh): one pack, one workload, five runs on the
 * CUDA backend:
 *   resident      VMM, HBM holding every expert: the reference step time
 *   vmm           VMM at the budget, LRU on demand
 *   vmm+prefetch  VMM at the budget, adaptive prefetch
 *   uvm           managed memory, the driver pages on demand
 *   uvm+prefetch  managed memory, the prefetch policy's picks go to
 *                 cuMemPrefetchAsync
 * each after a warm-up (every expert staged; UVM: in managed memory on the
 * host). Per run: tokens/s, time over resident (the stall, whoever caused
 * it), moem's own stall share, bytes moved to the GPU, GPU page faults,
 * the digest (every run must equal the resident one: all are lossless).
 *
 * Bytes and faults of the UVM runs come from the driver: CUPTI's unified
 * memory counters (libcupti, dlopen()ed, when this was built with cupti.h
 * and the library is found), or the kernel emulator's counters; without
 * either they are reported as not measured. Results on generated models
 * are synthetic.
 *   bench_uvm --pack FILE [--hbm PCT] [--batch B] [--steps N] [--out FILE]
 * Prints a table and RESULT key=value lines. Exit 4 without a CUDA device.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MOEM_HAVE_CUPTI
#include <cupti.h>
#endif

#include <moem/backend.h>
#include <moem/engine.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/log.h>

/* ---- driver paging counters -------------------------------------------------- */

struct uvm_count {
	uint64_t faults, htod, dtoh;
};

static const char *count_src = "none";
static void (*emu_counters)(uint64_t out[5]);

#ifdef MOEM_HAVE_CUPTI
static struct {
	CUptiResult (*enable)(CUpti_ActivityKind);
	CUptiResult (*configure)(CUpti_ActivityUnifiedMemoryCounterConfig *, uint32_t);
	CUptiResult (*callbacks)(CUpti_BuffersCallbackRequestFunc,
				 CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*next)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*flush)(uint32_t);
} cupti;
static struct uvm_count cupti_sum;

static void CUPTIAPI buf_request(uint8_t **buf, size_t *size, size_t *max)
{
	*size = 1 << 20;
	*buf = aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				  size_t valid)
{
	CUpti_Activity *rec = NULL;

	while (cupti.next(buf, valid, &rec) == CUPTI_SUCCESS) {
		const CUpti_ActivityUnifiedMemoryCounter3 *u;

		if (rec->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
			continue;
		u = (const CUpti_ActivityUnifiedMemoryCounter3 *)rec;
		if (u->counterKind ==
		    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD)
			cupti_sum.htod += u->value;
		else if (u->counterKind ==
			 CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH)
			cupti_sum.dtoh += u->value;
		else if (u->counterKind ==
			 CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT)
			cupti_sum.faults += u->value;
	}
	free(buf);
}

/* Before any CUDA context exists: CUPTI's UM counters are per process. */
static void cupti_start(void)
{
	CUpti_ActivityUnifiedMemoryCounterConfig cfg[3] = {
		{CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
		 CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 0, 1},
		{CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
		 CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, 0, 1},
		{CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
		 CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 0, 1},
	};
	void *lib = dlopen("libcupti.so.13", RTLD_NOW);

	if (!lib)
		lib = dlopen("libcupti.so", RTLD_NOW);
	if (!lib)
		return;
	*(void **)&cupti.enable = dlsym(lib, "cuptiActivityEnable");
	*(void **)&cupti.configure = dlsym(lib, "cuptiActivityConfigureUnifiedMemoryCounter");
	*(void **)&cupti.callbacks = dlsym(lib, "cuptiActivityRegisterCallbacks");
	*(void **)&cupti.next = dlsym(lib, "cuptiActivityGetNextRecord");
	*(void **)&cupti.flush = dlsym(lib, "cuptiActivityFlushAll");
	if (!cupti.enable || !cupti.configure || !cupti.callbacks || !cupti.next || !cupti.flush)
		return;
	{
		/* which call refused, and its CUptiResult, say why on a GPU machine */
		const char *call = "cuptiActivityRegisterCallbacks";
		int r = cupti.callbacks(buf_request, buf_complete);

		if (r == CUPTI_SUCCESS) {
			call = "cuptiActivityConfigureUnifiedMemoryCounter";
			r = cupti.configure(cfg, 3);
		}
		if (r == CUPTI_SUCCESS) {
			call = "cuptiActivityEnable(UNIFIED_MEMORY_COUNTER)";
			r = cupti.enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
		}
		if (r != CUPTI_SUCCESS) {
			fprintf(stderr,
				"bench_uvm: CUPTI refused the unified memory counters (%s: "
				"CUptiResult %d)\n",
				call, r);
			return;
		}
	}
	count_src = "CUPTI";
}
#endif

static void counters_start(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);

	if (lib)
		*(void **)&emu_counters = dlsym(lib, "moemEmuUvmCounters");
	if (emu_counters) {
		count_src = "kernel emulator";
		return;
	}
#ifdef MOEM_HAVE_CUPTI
	cupti_start();
#endif
}

static void counters_read(struct uvm_count *c)
{
	memset(c, 0, sizeof(*c));
	if (emu_counters) {
		uint64_t v[5];

		emu_counters(v);
		*c = (struct uvm_count){v[0], v[1], v[2]};
		return;
	}
#ifdef MOEM_HAVE_CUPTI
	if (cupti.flush) {
		cupti.flush(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
		*c = cupti_sum;
	}
#endif
}

/* ---- the runs ---------------------------------------------------------------- */

struct variant {
	const char *name, *key, *mode, *prefetch;
	int resident;
};

static const struct variant variants[] = {
	{"resident", "resident", "vmm", "none", 1},
	{"vmm", "vmm", "vmm", "none", 0},
	{"vmm+prefetch", "vmm_prefetch", "vmm", "adaptive", 0},
	{"uvm", "uvm", "uvm", "none", 0},
	{"uvm+prefetch", "uvm_prefetch", "uvm", "adaptive", 0},
};

struct outcome {
	double tps, stall_share, step_ms;
	uint64_t moved, faults, evicted;
	char digest[65];
	int counted;
};

static int run_one(const char *pack, const char *hbm, uint32_t batch, uint64_t steps,
		   const struct variant *v, struct outcome *o)
{
	const char *kv[][2] = {
		{"pack", pack},	  {"backend", "cuda"},	 {"hbm", v->resident ? "100%" : hbm},
		{"dram", "100%"}, {"hbm-mode", v->mode}, {"prefetch", v->prefetch},
		{"evict", "lru"}, {"seed", "3"},	 {"pool", "auto"},
	};
	struct moem_engine_args ea;
	struct moem_engine_status st;
	struct moem_engine *e = NULL;
	struct moem_run_stats rs;
	struct uvm_count c0, c1;
	int ret = 0;

	moem_engine_args_init(&ea);
	ea.w.batch = batch;
	ea.w.steps = steps;
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && !ret; i++)
		ret = moem_engine_args_set(&ea, kv[i][0], kv[i][1]);
	if (!ret)
		ret = moem_engine_args_resolve(&ea);
	if (!ret)
		ret = moem_engine_open(&ea.o, &e);
	if (!ret)
		ret = moem_engine_warmup(e, NULL);
	counters_read(&c0);
	if (!ret)
		ret = moem_engine_run(e, &ea.w, NULL, NULL, &rs);
	counters_read(&c1);
	if (!ret) {
		moem_engine_get_status(e, &st);
		o->tps = rs.tokens_per_s;
		o->stall_share = rs.stall_share;
		o->step_ms = rs.total.step ? rs.total.step_ns / 1e6 / rs.total.step : 0;
		o->counted = !strcmp(v->mode, "uvm") && strcmp(count_src, "none");
		o->moved = strcmp(v->mode, "uvm") ? rs.total.bytes_h2d : c1.htod - c0.htod;
		o->faults = c1.faults - c0.faults;
		o->evicted = c1.dtoh - c0.dtoh;
		snprintf(o->digest, sizeof(o->digest), "%s", rs.digest_hex);
	}
	moem_engine_close(e);
	moem_engine_args_free(&ea);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pack", required_argument, NULL, 'p'},
		{"hbm", required_argument, NULL, 'm'},
		{"batch", required_argument, NULL, 'b'},
		{"steps", required_argument, NULL, 's'},
		{"out", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *pack = NULL, *hbm = "25%", *out = NULL;
	struct outcome res[sizeof(variants) / sizeof(variants[0])];
	uint32_t batch = 8;
	uint64_t steps = 16;
	struct moem_backend *be;
	FILE *of = NULL;
	int c, ret, bad = 0;

	while ((c = getopt_long(argc, argv, "p:m:b:s:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			pack = optarg;
			break;
		case 'm':
			hbm = optarg;
			break;
		case 'b':
			batch = (uint32_t)atoi(optarg);
			break;
		case 's':
			steps = strtoull(optarg, NULL, 10);
			break;
		case 'o':
			out = optarg;
			break;
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: bench_uvm --pack FILE [--hbm PCT] [--batch B] [--steps N] "
				"[--out FILE]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!pack) {
		fprintf(stderr, "bench_uvm: --pack is required\n");
		return 2;
	}
	moem_log_set_level(MOEM_LOG_WARN);
	counters_start(); /* CUPTI wants to be first */
	ret = moem_backend_open("cuda", NULL, &be);
	if (ret == -ENODEV) {
		printf("SKIP %s\n", moem_last_error());
		return 4;
	}
	if (ret) {
		fprintf(stderr, "bench_uvm: %s\n", moem_strerror(ret));
		return 1;
	}
	{
		struct moem_backend_info info;

		moem_backend_get_info(be, &info);
		printf("bench_uvm: %s; %s, HBM budget %s of the experts, batch %u, %llu steps "
		       "(synthetic model); driver counters: %s\n",
		       info.device, pack, hbm, batch, (unsigned long long)steps, count_src);
		moem_backend_close(be);
	}
	if (out && !(of = fopen(out, "w"))) {
		fprintf(stderr, "bench_uvm: %s: %s\n", out, strerror(errno));
		return 1;
	}
	printf("  %-13s %10s %10s %8s %14s %10s  %s\n", "run", "tokens/s", "over res.", "stall%",
	       "to GPU", "faults", "digest");
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const struct variant *v = &variants[i];
		struct outcome *o = &res[i];
		char key[96], moved[32], faults[32];
		double over;

		memset(o, 0, sizeof(*o));
		ret = run_one(pack, hbm, batch, steps, v, o);
		if (ret) {
			fprintf(stderr, "bench_uvm: %s: %s\n", v->name, moem_strerror(ret));
			bad = 1;
			continue;
		}
		over = res[0].step_ms > 0 ? o->step_ms / res[0].step_ms - 1 : 0;
		if (strcmp(v->mode, "uvm") || o->counted) {
			snprintf(moved, sizeof(moved), "%.1f MiB", o->moved / 1048576.0);
			snprintf(faults, sizeof(faults), "%llu", (unsigned long long)o->faults);
		} else {
			snprintf(moved, sizeof(moved), "not measured");
			snprintf(faults, sizeof(faults), "-");
		}
		printf("  %-13s %10.1f %9.1f%% %7.1f%% %14s %10s  %.16s%s\n", v->name, o->tps,
		       100 * over, 100 * o->stall_share, moved, faults, o->digest,
		       strcmp(o->digest, res[0].digest) ? " DIFFERS" : "");
		if (strcmp(o->digest, res[0].digest)) {
			fprintf(stderr, "bench_uvm: %s's outputs differ from the resident run's\n",
				v->name);
			bad = 1;
		}
#define RES(fmt, val)                                                    \
	do {                                                             \
		snprintf(key, sizeof(key), "uvm_bench_%s_" fmt, v->key); \
		printf("RESULT %s=%.6g\n", key, (double)(val));          \
		if (of)                                                  \
			fprintf(of, "%s=%.6g\n", key, (double)(val));    \
	} while (0)
		RES("tokens_per_s", o->tps);
		RES("over_resident", over);
		RES("stall_share", o->stall_share);
		if (strcmp(v->mode, "uvm") || o->counted) {
			RES("bytes_to_gpu", o->moved);
			RES("gpu_faults", o->faults);
		}
#undef RES
	}
	if (!bad && res[1].tps > 0) {
		printf("RESULT uvm_vs_vmm_tokens=%.4g\n", res[3].tps / res[1].tps);
		printf("RESULT uvm_prefetch_vs_vmm_prefetch_tokens=%.4g\n",
		       res[4].tps / res[2].tps);
	}
	if (of)
		fclose(of);
	return bad;
}
