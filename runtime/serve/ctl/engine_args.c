// SPDX-License-Identifier: GPL-2.0-only
/* Engine and workload settings by name (engine_args.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <moem/backend.h>
#include <moem/dev.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/trace.h>
#include <moem/util.h>

/* One setting per line: adding one is a one-line change. */
/* clang-format off */
const struct moem_arg_def moem_engine_arg_defs[] = {
	{"pack", false, MOEM_ARG_ENGINE},
	{"hbm", false, MOEM_ARG_ENGINE},
	{"dram", false, MOEM_ARG_ENGINE},
	{"kv", false, MOEM_ARG_ENGINE},
	{"precisions", false, MOEM_ARG_ENGINE},
	{"fallback", true, MOEM_ARG_ENGINE},
	{"route", false, MOEM_ARG_ENGINE},
	{"evict", false, MOEM_ARG_ENGINE},
	{"dram-evict", false, MOEM_ARG_ENGINE},
	{"prefetch", false, MOEM_ARG_ENGINE},
	{"precision", false, MOEM_ARG_ENGINE},
	{"paging", false, MOEM_ARG_ENGINE},
	{"backend", false, MOEM_ARG_ENGINE},
	{"threads", false, MOEM_ARG_ENGINE},
	{"cpu-threads", false, MOEM_ARG_ENGINE},
	{"cpu-isa", false, MOEM_ARG_ENGINE},
	{"pool", false, MOEM_ARG_ENGINE},
	{"region", false, MOEM_ARG_ENGINE},
	{"persistent", true, MOEM_ARG_ENGINE},
	{"link-gbps", false, MOEM_ARG_ENGINE},
	{"loader", false, MOEM_ARG_ENGINE},
	{"no-verify", true, MOEM_ARG_ENGINE},
	{"no-cuda-graphs", true, MOEM_ARG_ENGINE},
	{"trace-out", false, MOEM_ARG_ENGINE},
	{"trace-logits", true, MOEM_ARG_ENGINE},
	{"hotness", false, MOEM_ARG_ENGINE},
	{"pregate", false, MOEM_ARG_ENGINE},
	{"hbm-mode", false, MOEM_ARG_ENGINE},
	{"mem-reserve", false, MOEM_ARG_ENGINE},
	{"dram-nodes", false, MOEM_ARG_ENGINE},
	{"require-pinned", true, MOEM_ARG_ENGINE},
	{"exec", false, MOEM_ARG_ENGINE},
	{"cpu-moe-layers", false, MOEM_ARG_ENGINE},
	{"cpu-gbps", false, MOEM_ARG_ENGINE},
	{"cpu-token-ns", false, MOEM_ARG_ENGINE},
	{"cpu-call-ns", false, MOEM_ARG_ENGINE},
	{"place", false, MOEM_ARG_ENGINE},
	{"calibration", false, MOEM_ARG_ENGINE},
	{"workload", false, MOEM_ARG_WORKLOAD},
	{"batch", false, MOEM_ARG_WORKLOAD},
	{"steps", false, MOEM_ARG_WORKLOAD},
	{"mix", false, MOEM_ARG_WORKLOAD},
	{"seed", false, MOEM_ARG_WORKLOAD},
	{NULL, false, 0},
};
/* clang-format on */

const struct moem_arg_def *moem_engine_arg_find(const char *name)
{
	for (const struct moem_arg_def *d = moem_engine_arg_defs; d->name; d++)
		if (!strcmp(d->name, name))
			return d;
	return NULL;
}

void moem_engine_args_init(struct moem_engine_args *a)
{
	memset(a, 0, sizeof(*a));
	a->w.kind = MOEM_WL_SYNTH;
	a->w.batch = 8;
	a->w.steps = 32;
	a->o.hi = MOEM_PREC_BF16;
	/* A pool sized from a budget larger than the machine shrinks to what
	 * fits (and says so) rather than failing or waking the OOM killer. */
	a->o.pool.fit = true;
}

/* The const char * fields of o and w that the struct owns. */
#define N_OWNED 14
static const char **owned(struct moem_engine_args *a, int i)
{
	const char **f[N_OWNED] = {
		&a->o.pack_path,  &a->o.backend,     &a->o.route,   &a->o.evict,
		&a->o.prefetch,	  &a->o.precision,   &a->o.paging,  &a->o.trace_out,
		&a->w.mix,	  &a->w.path,	     &a->o.hotness, &a->o.hbm_mode,
		&a->o.dram_evict, &a->o.calibration,
	};

	return f[i];
}

void moem_engine_args_free(struct moem_engine_args *a)
{
	for (int i = 0; i < N_OWNED; i++)
		free((char *)*owned(a, i));
	free(a->hbm);
	free(a->dram);
	free(a->precisions);
	free(a->region);
	free(a->mem_reserve);
	free(a->dram_nodes);
	memset(a, 0, sizeof(*a));
}

static int dup_str(char **dst, const char *src)
{
	char *s = NULL;

	if (src)
		s = strdup(src);
	*dst = s; /* NULL on failure: the caller frees what was copied */
	return src && !s ? -ENOMEM : 0;
}

int moem_engine_args_copy(struct moem_engine_args *dst, const struct moem_engine_args *src)
{
	int ret = 0;

	*dst = *src;
	for (int i = 0; i < N_OWNED; i++)
		ret |= dup_str((char **)owned(dst, i), *owned(dst, i));
	ret |= dup_str(&dst->hbm, src->hbm);
	ret |= dup_str(&dst->dram, src->dram);
	ret |= dup_str(&dst->precisions, src->precisions);
	ret |= dup_str(&dst->region, src->region);
	ret |= dup_str(&dst->mem_reserve, src->mem_reserve);
	ret |= dup_str(&dst->dram_nodes, src->dram_nodes);
	dst->o.pool.name = dst->region;
	dst->o.pool.nodes = dst->dram_nodes;
	if (ret) {
		moem_engine_args_free(dst);
		return -ENOMEM;
	}
	return 0;
}

/* Replace an owned string. */
static int set_str(const char **field, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free((char *)*field);
	*field = s;
	return 0;
}

static int set_own(char **field, const char *v)
{
	return set_str((const char **)field, v);
}

int moem_arg_bool(const char *name, const char *v, bool *out)
{
	static const char *const yes[] = {"", "1", "yes", "true", "on"};
	static const char *const no[] = {"0", "no", "false", "off"};

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(yes); i++)
		if (!strcasecmp(v, yes[i])) {
			*out = true;
			return 0;
		}
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(no); i++)
		if (!strcasecmp(v, no[i])) {
			*out = false;
			return 0;
		}
	return moem_errf(EINVAL, "%s '%s': want yes or no", name, v);
}

static int parse_u64(const char *name, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long x;

	/* decimal only: base 0 read "010" as 8 and "08" as an error */
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || !isdigit((unsigned char)*v) || x < lo || x > hi)
		return moem_errf(EINVAL, "%s '%s': want a number in %llu..%llu", name, v,
				 (unsigned long long)lo, (unsigned long long)hi);
	*out = x;
	return 0;
}

static int set_workload(struct moem_engine_args *a, const char *v)
{
	if (!strcmp(v, "synth")) {
		a->w.kind = MOEM_WL_SYNTH;
		return 0;
	}
	if (!strncmp(v, "hidden:", 7) && v[7]) {
		a->w.kind = MOEM_WL_HIDDEN;
		return set_str(&a->w.path, v + 7);
	}
	if (!strncmp(v, "trace:", 6) && v[6]) {
		a->w.kind = MOEM_WL_TRACE;
		return set_str(&a->w.path, v + 6);
	}
	return moem_errf(EINVAL, "workload '%s': synth, hidden:FILE or trace:FILE", v);
}

static int set_link(struct moem_engine_args *a, const char *v)
{
	char *end;
	double x = strtod(v, &end);

	if (end == v || *end || !(x > 0 && x <= 10000))
		return moem_errf(EINVAL, "link-gbps '%s': want 0 < x <= 10000", v);
	a->o.link_gbps = x;
	return 0;
}

static int set_flag(struct moem_engine_args *a, const char *name, const char *v)
{
	bool b;
	int ret = moem_arg_bool(name, v, &b);

	if (ret)
		return ret;
	if (!strcmp(name, "fallback"))
		a->o.allow_fallback = b;
	else if (!strcmp(name, "persistent"))
		a->o.pool.persistent = b;
	else if (!strcmp(name, "no-verify"))
		a->o.no_verify = b;
	else if (!strcmp(name, "no-cuda-graphs"))
		a->o.no_graphs = b;
	else if (!strcmp(name, "require-pinned"))
		a->o.pool.require_pinned = b;
	else
		a->o.trace_logits = b;
	return 0;
}

int moem_engine_args_set(struct moem_engine_args *a, const char *name, const char *v)
{
	const struct moem_arg_def *d = moem_engine_arg_find(name);
	uint64_t x;
	int ret;

	if (!d)
		return -ENOENT;
	if (d->flag)
		return set_flag(a, name, v);
	if (!*v)
		return moem_errf(EINVAL, "%s: a value is required", name);
	if (!strcmp(name, "pack"))
		return set_str(&a->o.pack_path, v);
	if (!strcmp(name, "kv")) /* the kv_bytes knob's own rules */
		return moem_budget_parse(MOEM_BUDGET_KV_BYTES, v, &a->o.kv_budget);
	if (!strcmp(name, "hbm"))
		return set_own(&a->hbm, v);
	if (!strcmp(name, "dram"))
		return set_own(&a->dram, v);
	if (!strcmp(name, "precisions"))
		return set_own(&a->precisions, v);
	if (!strcmp(name, "route"))
		return set_str(&a->o.route, v);
	if (!strcmp(name, "evict"))
		return set_str(&a->o.evict, v);
	if (!strcmp(name, "dram-evict"))
		return set_str(&a->o.dram_evict, v);
	if (!strcmp(name, "prefetch"))
		return set_str(&a->o.prefetch, v);
	if (!strcmp(name, "precision"))
		return set_str(&a->o.precision, v);
	if (!strcmp(name, "paging"))
		return set_str(&a->o.paging, v);
	if (!strcmp(name, "backend"))
		return set_str(&a->o.backend, v);
	if (!strcmp(name, "trace-out"))
		return set_str(&a->o.trace_out, v);
	if (!strcmp(name, "hotness"))
		return set_str(&a->o.hotness, v);
	if (!strcmp(name, "pregate")) {
		ret = parse_u64(name, v, 0, MOEM_TRACE_MAX_PREGATE, &x);
		if (!ret)
			a->o.pregate = x ? (int32_t)x : -1;
		return ret;
	}
	if (!strcmp(name, "hbm-mode")) {
		if (strcmp(v, "vmm") && strcmp(v, "uvm"))
			return moem_errf(EINVAL, "hbm-mode '%s': want vmm or uvm", v);
		return set_str(&a->o.hbm_mode, v);
	}
	if (!strcmp(name, "mix"))
		return set_str(&a->w.mix, v);
	if (!strcmp(name, "mem-reserve"))
		return set_own(&a->mem_reserve, v);
	if (!strcmp(name, "dram-nodes")) {
		int32_t nodes[MOEM_POOL_MAX_NODES];
		uint32_t n;

		/* "all" (or empty): every node; a list is checked now, not at open */
		if (!strcmp(v, "all"))
			v = "";
		ret = moem_pool_nodes_parse(v, nodes, &n);
		if (!ret)
			ret = set_own(&a->dram_nodes, v);
		if (!ret)
			a->o.pool.nodes = a->dram_nodes;
		return ret;
	}
	if (!strcmp(name, "threads") || !strcmp(name, "cpu-threads")) {
		/* one worker per CPU at most: the workers are pinned, one CPU each;
		 * "threads 0" (the older name) still means every CPU */
		uint32_t ncpu = moem_cpu_count();

		ret = parse_u64(name, v, name[0] == 't' ? 0 : 1, ncpu, &x);
		if (ret)
			return moem_err_prefix(-ret, "%s: this machine lets moem use %u CPU%s",
					       name, ncpu, ncpu == 1 ? "" : "s");
		a->o.threads = (uint32_t)x;
		return 0;
	}
	if (!strcmp(name, "cpu-isa"))
		return moem_cpu_isa_parse(v, &a->o.cpu_isa);
	if (!strcmp(name, "pool"))
		return moem_pool_provider_parse(v, &a->o.pool.provider);
	if (!strcmp(name, "region")) {
		if (strlen(v) >= 64)
			return moem_errf(EINVAL, "region '%s': names are 1..63 bytes", v);
		ret = set_own(&a->region, v);
		if (!ret) {
			a->o.pool.name = a->region;
			a->o.pool.attach = true;
		}
		return ret;
	}
	if (!strcmp(name, "link-gbps"))
		return set_link(a, v);
	/* The values and range of moem.ko's exec and cpu_moe_layers knobs
	 * (<linux/moem_knobs.h>), spelled as the command line's. */
	if (!strcmp(name, "exec")) {
		ret = moem_budget_parse(MOEM_BUDGET_EXEC, v, &x);
		if (ret)
			return moem_errf(
				-ret, "exec '%s': want %s or %s", v,
				moem_knob_value_name(MOEM_BUDGET_EXEC, MOEM_EXEC_MODE_GPU),
				moem_knob_value_name(MOEM_BUDGET_EXEC, MOEM_EXEC_MODE_HYBRID));
		a->o.exec_hybrid = x == MOEM_EXEC_MODE_HYBRID;
		return 0;
	}
	if (!strcmp(name, "cpu-moe-layers")) {
		/* the model's MoE layer count is checked when the engine opens */
		ret = parse_u64(name, v, 0, MOEM_BUDGET_MOE_LAYERS_MAX, &x);
		if (!ret)
			a->o.cpu_moe_layers = (uint32_t)x;
		return ret;
	}
	if (!strcmp(name, "cpu-gbps")) {
		char *end;
		double g = strtod(v, &end);

		if (end == v || *end || !(g > 0 && g < 1e5))
			return moem_errf(EINVAL, "cpu-gbps '%s': want 0 < x < 100000", v);
		a->o.cpu_gbps = g;
		return 0;
	}
	if (!strcmp(name, "cpu-token-ns"))
		return parse_u64(name, v, 0, 1000000000, &a->o.cpu_token_ns);
	if (!strcmp(name, "cpu-call-ns"))
		return parse_u64(name, v, 0, 1000000000, &a->o.cpu_call_ns);
	if (!strcmp(name, "calibration")) {
		if (!*v)
			return moem_errf(EINVAL, "calibration: want a file or 'none'");
		return set_str(&a->o.calibration, v);
	}
	if (!strcmp(name, "place")) /* repeatable: each appends a rule (place.h) */
		return moem_place_add(&a->o.place, v);
	if (!strcmp(name, "loader"))
		return moem_loader_mode_parse(v, &a->o.loader.mode);
	if (!strcmp(name, "workload"))
		return set_workload(a, v);
	if (!strcmp(name, "batch")) {
		ret = parse_u64(name, v, 1, 64, &x);
		if (!ret)
			a->w.batch = (uint32_t)x;
		return ret;
	}
	if (!strcmp(name, "steps"))
		return parse_u64(name, v, 1, 1ULL << 40, &a->w.steps);
	if (!strcmp(name, "seed"))
		return parse_u64(name, v, 0, UINT64_MAX, &a->w.seed);
	return -ENOENT;
}

static int pick_precisions(struct moem_engine_args *a)
{
	char buf[32], *comma;
	int ret;

	a->o.hi = MOEM_PREC_BF16;
	a->o.two_prec = false;
	if (!a->precisions)
		return 0;
	if (strlen(a->precisions) >= sizeof(buf))
		return moem_errf(EINVAL, "precisions '%s': want HI[,LO]", a->precisions);
	snprintf(buf, sizeof(buf), "%s", a->precisions);
	comma = strchr(buf, ',');
	if (comma)
		*comma++ = 0;
	if (comma && strchr(comma, ','))
		return moem_errf(EINVAL, "precisions '%s': want HI[,LO], two at most",
				 a->precisions);
	ret = moem_prec_parse(buf, &a->o.hi);
	if (!ret && comma) {
		ret = moem_prec_parse(comma, &a->o.lo);
		a->o.two_prec = true;
	}
	if (ret)
		return moem_err_prefix(-ret, "precisions");
	/* the enum runs from the most bits to the fewest */
	if (a->o.two_prec && a->o.lo <= a->o.hi)
		return moem_errf(EINVAL,
				 "precisions '%s': LO (%s) must have fewer bits than HI (%s), "
				 "as in bf16,q4",
				 a->precisions, moem_prec_name(a->o.lo), moem_prec_name(a->o.hi));
	return 0;
}

static int resolve_size(const char *name, const char *s, const uint64_t *expert_bytes,
			uint64_t *out)
{
	int ret = moem_parse_size(s, expert_bytes, out);

	/* 0, as for the knobs: no limit, the whole model. */
	if (ret)
		return moem_err_prefix(-ret, "%s", name);
	return 0;
}

int moem_engine_args_resolve(struct moem_engine_args *a)
{
	uint64_t expert_bytes = 0, b;
	int ret = pick_precisions(a);

	if (ret)
		return ret;
	if ((a->hbm && strchr(a->hbm, '%')) || (a->dram && strchr(a->dram, '%'))) {
		if (!a->o.pack_path)
			return moem_errf(EINVAL, "a budget in %% needs the pack");
		for (int p = 0; p < (a->o.two_prec ? 2 : 1); p++) {
			ret = moem_engine_pack_bytes(a->o.pack_path, p ? a->o.lo : a->o.hi, &b);
			if (ret)
				return ret;
			expert_bytes += b;
		}
	}
	if (a->mem_reserve) {
		/* Bytes, or a percentage of the machine's memory. */
		struct moem_pool_mem m;

		ret = moem_pool_headroom(0, &m);
		if (!ret)
			ret = moem_parse_size(a->mem_reserve, &m.total, &a->o.pool.mem_reserve);
		if (ret)
			return moem_err_prefix(-ret, "mem-reserve");
		if (!a->o.pool.mem_reserve)
			a->o.pool.mem_reserve = 1; /* "0": leave nothing (not the default) */
	}
	a->o.hbm_budget = a->o.dram_budget = 0;
	if (a->hbm) {
		ret = resolve_size("hbm", a->hbm, &expert_bytes, &a->o.hbm_budget);
		if (ret)
			return ret;
	}
	if (a->dram) {
		ret = resolve_size("dram", a->dram, &expert_bytes, &a->o.dram_budget);
		if (ret)
			return ret;
	}
	return 0;
}
