// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem sim: replay a routing trace through scheduling policies on a cost
 * model (sim.h) and report, per policy and HBM budget, hit rate (and as a
 * fraction of Belady MIN), stall, bytes moved per tier, mean T and the
 * modelled step time. --sweep runs a grid of budgets and draws a plot.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/sim.h>
#include <moem/trace.h>

#include "cmd.h"

#define MAX_POLICIES 32
#define MAX_BUDGETS  32

static void sim_usage(FILE *f)
{
	fprintf(f,
		"usage: moem sim TRACE [options]\n"
		"  --policy SPEC      NAME[:key=value,...], repeatable, or 'all' (default)\n"
		"                     presets: lru lru2 lfu pred belady prefetch-fixed\n"
		"                     expertflow moem lynx oea piggyback dynaexq fluxmoe\n"
		"                     belady:look=TICKS,gran=step,fb=lru|lfu|pred: MIN\n"
		"                     knowing less of the future (a bound, not a policy)\n"
		"  --hbm SIZE|PCT%%    HBM expert budget, bytes or %% of all expert bytes (25%%)\n"
		"  --dram SIZE|PCT%%   DRAM expert cache (default: every expert)\n"
		"  --prec P           precision experts are served in (bf16)\n"
		"  --hidden H --inter I   expert shape (the trace header's, else 2048, 768:\n"
		"                         Qwen3-30B-A3B)\n"
		"  --pcie-gbps X (25) --nvme-gbps X (7) --hbm-gbps X (3000)\n"
		"  --layer-ns N (20000) --token-ns N (20) --piece SIZE (8M) --jitter F (0)\n"
		"  --exec gpu|hybrid  hybrid: each expert not in HBM where the engine's cost\n"
		"                     model puts it, GPU or CPU (cache policies)\n"
		"  --cpu-gbps X --cpu-token-ns N --cpu-call-ns N   the CPU kernels' weight\n"
		"                     reads, per-token cost and cost per layer's call (moem\n"
		"                     run logs what it measured)\n"
		"  --link-gbps X      the link the decision assumes (default --pcie-gbps)\n"
		"  --cpu-moe-layers N the first N MoE layers' experts always on the CPU\n"
		"  --place RULE       [layers=LIST][,experts=LIST]:cpu|gpu|auto, repeatable;\n"
		"                     the first matching rule places an expert (as moem run)\n"
		"  --seed S --warmup STEPS --steps N\n"
		"  --sweep            every policy x --budgets (10,15,20,25,35,50,75%%)\n"
		"  --budgets LIST     comma list of sizes or percentages\n"
		"  --plot FILE.png    sweep plot (default moem-sim-sweep.png)\n"
		"  --json             machine-readable results\n"
		"  --md               a Markdown table\n");
}

struct row {
	char spec[96];
	double pct;
	int err;
	char msg[256];
	struct moem_sim_result r;
};

static int parse_dbl(const char *s, const char *what, double lo, double hi, double *v)
{
	char *end;

	*v = strtod(s, &end);
	if (!*s || *end || !(*v >= lo && *v <= hi)) {
		fprintf(stderr, "moem sim: %s: '%s' is not a number in [%g, %g]\n", what, s, lo,
			hi);
		return -1;
	}
	return 0;
}

static int parse_u64(const char *s, const char *what, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-') {
		fprintf(stderr, "moem sim: %s: '%s' is not a non-negative integer\n", what, s);
		return -1;
	}
	return 0;
}

/* Stall as a multiple of its floor (sim.h), "-" where compute hides even MIN's loads. */
static const char *xbound(const struct moem_sim_result *r, char *buf, size_t n)
{
	if (!r->stall_bound_ns)
		return "-";
	snprintf(buf, n, "%.2f", r->stall_x_bound);
	return buf;
}

static void print_table(FILE *f, const struct row *rows, uint32_t n, bool sweep, bool hyb)
{
	char xb[32];

	fprintf(f, "%-26s %6s %7s %7s %7s %7s %9s %6s %9s %8s %8s %8s %5s %5s%s\n", "policy",
		sweep ? "hbm%" : "T", "hit", "belady", "xMIN", "late", "stall/st", "xfloor", "step",
		"PCIe/st", "NVMe/st", "D2H/st", "S", "hi%", hyb ? "  cpu%   cpu/st" : "");
	for (uint32_t i = 0; i < n; i++) {
		const struct moem_sim_result *r = &rows[i].r;
		double st = r->steps ? (double)r->steps : 1;

		if (rows[i].err) {
			/* the budget belongs under hbm%, never under T */
			if (sweep)
				fprintf(f, "%-26s %6.1f  n/a: %s\n", rows[i].spec, rows[i].pct,
					rows[i].msg);
			else
				fprintf(f, "%-26s %6s  n/a: %s\n", rows[i].spec, "-", rows[i].msg);
			continue;
		}
		fprintf(f, "%-26s %6.1f %7.4f %7.4f %7.3f %7.4f %7.3fms %6s %7.3fms ", rows[i].spec,
			sweep ? rows[i].pct : r->mean_T, r->hit_rate, r->belady_hit_rate,
			r->frac_belady, r->accesses ? (double)r->late / r->accesses : 0,
			r->stall_ns / st / 1e6, xbound(r, xb, sizeof(xb)), r->step_ns / 1e6);
		fprintf(f, "%6.1fMB %6.1fMB %6.1fMB %5.1f %5.1f", r->bytes_pcie / st / 1e6,
			r->bytes_nvme / st / 1e6, r->bytes_d2h / st / 1e6, r->mean_S,
			100 * r->hi_frac);
		if (hyb)
			fprintf(f, " %5.1f %6.3fms", 100 * r->cpu_share, r->cpu_ns / st / 1e6);
		fputc('\n', f);
	}
}

/* The same table in Markdown, for Documentation/benchmarks (bench/sim/run.sh). */
static void print_md(FILE *f, const struct row *rows, uint32_t n, bool hyb)
{
	char xb[32];

	fprintf(f,
		"| policy | HBM %% | mean T | hit rate | Belady | x Belady | late | "
		"stall/step (ms) | stall floor (ms) | x floor | step (ms) | PCIe MB/step | NVMe "
		"MB/step | D2H MB/step | mean S | hi %% |%s\n"
		"| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: "
		"| --: | --: | --: |%s\n",
		hyb ? " CPU %% of uses | CPU ms/step |" : "", hyb ? " --: | --: |" : "");
	for (uint32_t i = 0; i < n; i++) {
		const struct moem_sim_result *r = &rows[i].r;
		double st = r->steps ? (double)r->steps : 1;

		if (rows[i].err) {
			fprintf(f, "| %s | %.1f | n/a: %s ||||||||||||||\n", rows[i].spec,
				rows[i].pct, rows[i].msg);
			continue;
		}
		fprintf(f, "| %s | %.1f | %.2f | %.4f | %.4f | %.3f | %.4f | %.3f | %.3f | %s | ",
			rows[i].spec, rows[i].pct, r->mean_T, r->hit_rate, r->belady_hit_rate,
			r->frac_belady, r->accesses ? (double)r->late / r->accesses : 0,
			r->stall_ns / st / 1e6, r->stall_bound_ns / st / 1e6,
			xbound(r, xb, sizeof(xb)));
		fprintf(f, "%.3f | %.1f | %.1f | %.1f | %.1f | %.1f |", r->step_ns / 1e6,
			r->bytes_pcie / st / 1e6, r->bytes_nvme / st / 1e6, r->bytes_d2h / st / 1e6,
			r->mean_S, 100 * r->hi_frac);
		if (hyb)
			fprintf(f, " %.1f | %.3f |", 100 * r->cpu_share, r->cpu_ns / st / 1e6);
		fputc('\n', f);
	}
}

static struct json_object *row_json(const struct row *w, bool hyb)
{
	const struct moem_sim_result *r = &w->r;
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "policy", json_object_new_string(w->spec));
	json_object_object_add(o, "hbm_pct", json_object_new_double(w->pct));
	json_object_object_add(o, "hbm_bytes", json_object_new_uint64(r->hbm_bytes));
	if (w->err) {
		json_object_object_add(o, "error", json_object_new_string(w->msg));
		return o;
	}
	json_object_object_add(o, "detail", json_object_new_string(r->detail));
	json_object_object_add(o, "hit_rate", json_object_new_double(r->hit_rate));
	json_object_object_add(o, "belady_hit_rate", json_object_new_double(r->belady_hit_rate));
	json_object_object_add(o, "frac_belady", json_object_new_double(r->frac_belady));
	json_object_object_add(o, "stall_ns", json_object_new_uint64(r->stall_ns));
	json_object_object_add(o, "min_bytes", json_object_new_uint64(r->min_bytes));
	json_object_object_add(o, "stall_bound_ns", json_object_new_uint64(r->stall_bound_ns));
	json_object_object_add(o, "stall_x_bound",
			       r->stall_bound_ns ? json_object_new_double(r->stall_x_bound) : NULL);
	json_object_object_add(o, "bytes_moved", json_object_new_uint64(r->bytes_pcie));
	json_object_object_add(o, "bytes_pcie", json_object_new_uint64(r->bytes_pcie));
	json_object_object_add(o, "bytes_nvme", json_object_new_uint64(r->bytes_nvme));
	json_object_object_add(o, "bytes_d2h", json_object_new_uint64(r->bytes_d2h));
	json_object_object_add(o, "bytes_demand", json_object_new_uint64(r->bytes_demand));
	json_object_object_add(o, "bytes_prefetch", json_object_new_uint64(r->bytes_prefetch));
	json_object_object_add(o, "bytes_other", json_object_new_uint64(r->bytes_other));
	json_object_object_add(o, "mean_T", json_object_new_double(r->mean_T));
	json_object_object_add(o, "steps", json_object_new_uint64(r->steps));
	json_object_object_add(o, "layer_steps", json_object_new_uint64(r->layer_steps));
	json_object_object_add(o, "accesses", json_object_new_uint64(r->accesses));
	json_object_object_add(o, "hits", json_object_new_uint64(r->hits));
	json_object_object_add(o, "late", json_object_new_uint64(r->late));
	json_object_object_add(o, "total_ns", json_object_new_uint64(r->total_ns));
	json_object_object_add(o, "compute_ns", json_object_new_uint64(r->compute_ns));
	json_object_object_add(o, "step_ns", json_object_new_double(r->step_ns));
	json_object_object_add(o, "mean_S", json_object_new_double(r->mean_S));
	json_object_object_add(o, "hi_frac", json_object_new_double(r->hi_frac));
	json_object_object_add(o, "pf_issued", json_object_new_uint64(r->pf_issued));
	json_object_object_add(o, "pf_used", json_object_new_uint64(r->pf_used));
	json_object_object_add(o, "pf_wasted", json_object_new_uint64(r->pf_wasted));
	json_object_object_add(o, "slots", json_object_new_uint64(r->slots));
	json_object_object_add(o, "hbm_peak", json_object_new_uint64(r->hbm_peak));
	if (hyb) {
		json_object_object_add(o, "cpu_experts", json_object_new_uint64(r->cpu_experts));
		json_object_object_add(o, "cpu_ns", json_object_new_uint64(r->cpu_ns));
		json_object_object_add(o, "cpu_share", json_object_new_double(r->cpu_share));
	}
	return o;
}

/* The sweep plot: hit rate and stall per step against the budget, one line per policy. */
/*
 * Text pasted into gnuplot's script (a title: the trace's name and
 * description, policy specs): gnuplot would read quotes, backquotes
 * (command substitution) and newlines in it as script, so they become '_'.
 */
static const char *gp_text(const char *in, char *out, size_t cap)
{
	size_t k = 0;

	for (; *in && k + 1 < cap; in++, k++)
		out[k] = strchr("'\"`\\$@", *in) || (unsigned char)*in < 0x20 ? '_' : *in;
	out[k] = 0;
	return out;
}

static int plot(const char *png, const struct row *rows, uint32_t n, const char *const *pols,
		uint32_t np, const char *raw_title)
{
	char dat[] = "/tmp/moem-sim-XXXXXX", title[160], pol[96], *tmp = NULL;
	int fd, ret = 0;
	struct stat st;
	FILE *f, *g;

	/* The picture goes to a new file beside png, renamed over it once whole:
	 * a path gnuplot cannot write fails here, not into our stdout. */
	if (strpbrk(png, "'`\n\r")) {
		fprintf(stderr,
			"moem sim: --plot %s: a path with quotes, backquotes or newlines "
			"is not taken\n",
			png);
		return 1;
	}
	if (!stat(png, &st) && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "moem sim: --plot %s: not a regular file\n", png);
		return 1;
	}
	if (asprintf(&tmp, "%s.tmpXXXXXX", png) < 0)
		return 1;
	fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "moem sim: --plot %s: %s\n", png, strerror(errno));
		free(tmp);
		return 1;
	}
	close(fd);
	gp_text(raw_title, title, sizeof(title));
	fd = mkstemp(dat);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		fprintf(stderr, "moem sim: cannot write plot data: %s\n", strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		free(tmp);
		return 1;
	}
	/* one gnuplot data block per policy, and Belady (from the first policy's rows) */
	for (uint32_t p = 0; p <= np; p++) {
		for (uint32_t i = 0; i < n; i++) {
			const struct moem_sim_result *r = &rows[i].r;

			if (rows[i].err || (p < np ? strcmp(rows[i].spec, pols[p])
						   : strcmp(rows[i].spec, pols[0])))
				continue;
			fprintf(f, "%g %g %g\n", rows[i].pct,
				p < np ? r->hit_rate : r->belady_hit_rate,
				r->steps ? r->stall_ns / (double)r->steps / 1e6 : 0);
		}
		fprintf(f, "\n\n");
	}
	if (fclose(f)) {
		fprintf(stderr, "moem sim: cannot write plot data: %s\n", strerror(errno));
		unlink(dat);
		unlink(tmp);
		free(tmp);
		return 1;
	}
	g = popen("gnuplot", "w");
	if (!g) {
		fprintf(stderr, "moem sim: cannot run gnuplot (apt-get install gnuplot-nox)\n");
		unlink(dat);
		unlink(tmp);
		free(tmp);
		return 1;
	}
	fprintf(g,
		"set terminal pngcairo size 1200,520 font ',10'\nset output '%s'\n"
		"set multiplot layout 1,2 title \"%s\"\nset key bottom right\nset grid\n"
		"set xlabel 'HBM budget (%% of expert bytes)'\nset ylabel 'HBM hit rate'\n"
		"set yrange [0:1]\nplot ",
		tmp, title);
	for (uint32_t p = 0; p <= np; p++)
		fprintf(g, "%s'%s' index %u using 1:2 with linespoints title '%s'%s", p ? ", " : "",
			dat, p, p < np ? gp_text(pols[p], pol, sizeof(pol)) : "Belady MIN (bound)",
			p < np ? "" : " dt 2 lw 2 lc rgb 'black'");
	fprintf(g, "\nset ylabel 'stall per decode step (ms)'\nset logscale y\n"
		   "set yrange [*:*]\nset key top right\nplot ");
	for (uint32_t p = 0; p < np; p++)
		fprintf(g,
			"%s'%s' index %u using 1:($3 > 0 ? $3 : 1e-4) with linespoints title '%s'",
			p ? ", " : "", dat, p, gp_text(pols[p], pol, sizeof(pol)));
	fprintf(g, "\nunset multiplot\n");
	if (pclose(g) != 0) {
		fprintf(stderr, "moem sim: gnuplot failed (is gnuplot installed?)\n");
		ret = 1;
	} else if (stat(tmp, &st) || !st.st_size) {
		fprintf(stderr, "moem sim: --plot %s: gnuplot wrote nothing (disk full?)\n", png);
		ret = 1;
	} else if (rename(tmp, png)) {
		fprintf(stderr, "moem sim: --plot %s: %s\n", png, strerror(errno));
		ret = 1;
	}
	if (ret)
		unlink(tmp);
	unlink(dat);
	free(tmp);
	return ret;
}

enum {
	O_POLICY = 256,
	O_HBM,
	O_DRAM,
	O_PREC,
	O_HIDDEN,
	O_INTER,
	O_PCIE,
	O_NVME,
	O_HBMBW,
	O_LAYER,
	O_TOKEN,
	O_PIECE,
	O_JITTER,
	O_SEED,
	O_WARMUP,
	O_STEPS,
	O_SWEEP,
	O_BUDGETS,
	O_PLOT,
	O_JSON,
	O_MD,
	O_EXEC,
	O_CPU_GBPS,
	O_CPU_TOKEN,
	O_CPU_CALL,
	O_XLINK,
	O_CPU_LAYERS,
	O_PLACE,
};

static const struct option sim_opts[] = {
	{"policy", required_argument, NULL, O_POLICY},
	{"hbm", required_argument, NULL, O_HBM},
	{"dram", required_argument, NULL, O_DRAM},
	{"prec", required_argument, NULL, O_PREC},
	{"hidden", required_argument, NULL, O_HIDDEN},
	{"inter", required_argument, NULL, O_INTER},
	{"pcie-gbps", required_argument, NULL, O_PCIE},
	{"nvme-gbps", required_argument, NULL, O_NVME},
	{"hbm-gbps", required_argument, NULL, O_HBMBW},
	{"layer-ns", required_argument, NULL, O_LAYER},
	{"token-ns", required_argument, NULL, O_TOKEN},
	{"piece", required_argument, NULL, O_PIECE},
	{"jitter", required_argument, NULL, O_JITTER},
	{"seed", required_argument, NULL, O_SEED},
	{"warmup", required_argument, NULL, O_WARMUP},
	{"steps", required_argument, NULL, O_STEPS},
	{"sweep", no_argument, NULL, O_SWEEP},
	{"budgets", required_argument, NULL, O_BUDGETS},
	{"plot", required_argument, NULL, O_PLOT},
	{"json", no_argument, NULL, O_JSON},
	{"md", no_argument, NULL, O_MD},
	{"exec", required_argument, NULL, O_EXEC},
	{"cpu-gbps", required_argument, NULL, O_CPU_GBPS},
	{"cpu-token-ns", required_argument, NULL, O_CPU_TOKEN},
	{"cpu-call-ns", required_argument, NULL, O_CPU_CALL},
	{"link-gbps", required_argument, NULL, O_XLINK},
	{"cpu-moe-layers", required_argument, NULL, O_CPU_LAYERS},
	{"place", required_argument, NULL, O_PLACE},
	{"help", no_argument, NULL, 'h'},
	{0},
};

/* Everything the command line says. */
struct sim_args {
	const char *pols[MAX_POLICIES], *hbm, *dram, *budgets, *png, *trace;
	uint32_t np;
	struct moem_sim_cost c;
	struct moem_sim_opts o;
	bool json, md, sweep;
	bool shape_given; /* --hidden or --inter: else the trace header's shape */
};

/* Hybrid execution simulated: the results gain the CPU's columns. */
static bool hybrid(const struct sim_args *a)
{
	return a->c.exec_hybrid || a->c.cpu_moe_layers || a->c.place.n;
}

/* One option; 0, or the exit status (2 usage, 1 error) with a message printed. */
static int sim_option(struct sim_args *a, int ch, const char *arg)
{
	const char *name = ch >= O_POLICY ? sim_opts[ch - O_POLICY].name : "";
	uint64_t v;
	double d;
	int ret;

	switch (ch) {
	case O_POLICY:
		if (a->np == MAX_POLICIES) {
			fprintf(stderr, "moem sim: at most %d --policy\n", MAX_POLICIES);
			return 2;
		}
		a->pols[a->np++] = arg;
		return 0;
	case O_HBM:
		a->hbm = arg;
		return 0;
	case O_DRAM:
		a->dram = arg;
		return 0;
	case O_PREC:
		ret = moem_prec_parse(arg, &a->c.prec);
		return ret ? moem_tool_fail("sim", ret, "--prec") : 0;
	case O_HIDDEN:
	case O_INTER:
		if (parse_u64(arg, name, &v) || !v || v > 65536) {
			fprintf(stderr, "moem sim: %s must be 1..65536\n", name);
			return 2;
		}
		*(ch == O_HIDDEN ? &a->c.hidden : &a->c.inter) = (uint32_t)v;
		a->shape_given = true;
		return 0;
	case O_PCIE:
	case O_NVME:
	case O_HBMBW:
		if (parse_dbl(arg, name, 1e-3, 1e5, &d))
			return 2;
		*(ch == O_PCIE	 ? &a->c.cost.link_gbps
		  : ch == O_NVME ? &a->c.cost.nvme_gbps
				 : &a->c.cost.hbm_gbps) = d;
		return 0;
	case O_LAYER:
	case O_TOKEN:
		if (parse_u64(arg, name, &v))
			return 2;
		*(ch == O_LAYER ? &a->c.cost.layer_ns : &a->c.cost.token_ns) = v;
		return 0;
	case O_PIECE:
		ret = moem_parse_size(arg, NULL, &a->c.piece_bytes);
		return ret ? moem_tool_fail("sim", ret, "--piece") : 0;
	case O_JITTER:
		return parse_dbl(arg, "--jitter", 0, 1, &a->c.jitter) ? 2 : 0;
	case O_SEED:
	case O_WARMUP:
	case O_STEPS:
		if (parse_u64(arg, name, &v))
			return 2;
		*(ch == O_SEED	   ? &a->o.seed
		  : ch == O_WARMUP ? &a->o.warmup_steps
				   : &a->o.max_steps) = v;
		return 0;
	case O_SWEEP:
		a->sweep = true;
		return 0;
	case O_BUDGETS:
		a->budgets = arg;
		return 0;
	case O_PLOT:
		a->png = arg;
		return 0;
	case O_JSON:
		a->json = true;
		return 0;
	case O_MD:
		a->md = true;
		return 0;
	case O_EXEC:
		if (strcmp(arg, "gpu") && strcmp(arg, "hybrid")) {
			fprintf(stderr, "moem sim: --exec '%s': want gpu or hybrid\n", arg);
			return 2;
		}
		a->c.exec_hybrid = !strcmp(arg, "hybrid");
		return 0;
	case O_CPU_GBPS:
	case O_XLINK:
		if (parse_dbl(arg, name, 1e-3, 9.9e4, &d))
			return 2;
		*(ch == O_CPU_GBPS ? &a->c.cost.cpu_gbps : &a->c.exec_link_gbps) = d;
		return 0;
	case O_CPU_TOKEN:
	case O_CPU_CALL:
		if (parse_u64(arg, name, &v) || v > 1000000000)
			return 2;
		*(ch == O_CPU_TOKEN ? &a->c.cost.cpu_token_ns : &a->c.cost.cpu_call_ns) = v;
		return 0;
	case O_CPU_LAYERS:
		if (parse_u64(arg, name, &v) || v > 1024) {
			fprintf(stderr, "moem sim: --cpu-moe-layers must be 0..1024\n");
			return 2;
		}
		a->c.cpu_moe_layers = (uint32_t)v;
		return 0;
	case O_PLACE:
		ret = moem_place_add(&a->c.place, arg);
		return ret ? moem_tool_fail("sim", ret, "--place") : 0;
	default:
		sim_usage(stderr);
		return 2;
	}
}

/* 'all', or nothing given: every preset the trace supports; then check each spec. */
static int expand_policies(struct sim_args *a, const struct moem_trace_info *info)
{
	if (!a->np || (a->np == 1 && !strcmp(a->pols[0], "all"))) {
		const char *const *all =
			moem_sim_policy_all(info->flags & MOEM_TRACE_F_LOGITS, &a->np);

		for (uint32_t i = 0; i < a->np; i++)
			a->pols[i] = all[i];
	}
	for (uint32_t i = 0; i < a->np; i++) {
		struct moem_sim_policy p;
		int ret;

		if (!strcmp(a->pols[i], "all")) {
			fprintf(stderr, "moem sim: 'all' cannot be mixed with other policies\n");
			return 2;
		}
		ret = moem_sim_policy_parse(a->pols[i], &p);
		if (ret)
			return moem_tool_fail("sim", ret, "--policy");
	}
	return 0;
}

/* The budgets to run: --budgets, the sweep's default list, or --hbm. */
static int split_budgets(const struct sim_args *a, char bl[][32], uint32_t *nb)
{
	const char *list = a->sweep	? (a->budgets ? a->budgets : "10%,15%,20%,25%,35%,50%,75%")
			   : a->budgets ? a->budgets
					: a->hbm;
	char buf[512], *save = NULL, *tok;

	*nb = 0;
	if (strlen(list) >= sizeof(buf)) {
		fprintf(stderr, "moem sim: the budget list is longer than %zu bytes\n",
			sizeof(buf) - 1);
		return 2;
	}
	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*nb == MAX_BUDGETS) {
			fprintf(stderr, "moem sim: at most %d budgets\n", MAX_BUDGETS);
			return 2;
		}
		if (strlen(tok) >= 32) {
			fprintf(stderr, "moem sim: budget '%.40s...' is longer than 31 bytes\n",
				tok);
			return 2;
		}
		snprintf(bl[(*nb)++], 32, "%s", tok);
	}
	/* "," or "": no budget at all, not an empty table */
	if (!*nb) {
		fprintf(stderr, "moem sim: no HBM budget given (--hbm or --budgets: a size or %%, "
				"comma-separated)\n");
		return 2;
	}
	return 0;
}

/*
 * One run per policy and budget into rows; n gets the count and *ok the
 * runs that worked. A policy that cannot run at a budget is a row with
 * its reason; a broken trace or no memory ends the command.
 */
static int run_rows(struct sim_args *a, char bl[][32], uint32_t nb, uint64_t total,
		    struct row *rows, uint32_t *n, uint32_t *ok)
{
	for (uint32_t p = 0; p < a->np; p++)
		for (uint32_t b = 0; b < nb; b++) {
			struct row *w = &rows[(*n)++];
			struct moem_sim_policy pol;
			int ret;

			snprintf(w->spec, sizeof(w->spec), "%s", a->pols[p]);
			ret = moem_parse_size(bl[b], &total, &a->c.hbm_bytes);
			if (ret)
				return moem_tool_fail("sim", ret, "--hbm");
			w->pct = 100.0 * (double)a->c.hbm_bytes / (double)total;
			moem_sim_policy_parse(a->pols[p], &pol);
			moem_clear_error();
			w->err = moem_sim_run(a->trace, &a->c, &pol, &a->o, &w->r);
			if (w->err) {
				snprintf(w->msg, sizeof(w->msg), "%s", moem_strerror(w->err));
				w->r.hbm_bytes = a->c.hbm_bytes;
				if (w->err != -ENOSPC && w->err != -EINVAL)
					return moem_tool_fail("sim", w->err, NULL);
			} else {
				(*ok)++;
			}
			if (!a->json && !a->md && isatty(STDERR_FILENO))
				fprintf(stderr, "\r  %u/%u runs", *n, a->np * nb);
		}
	if (!a->json && !a->md && isatty(STDERR_FILENO))
		fprintf(stderr, "\r%*s\r", 20, "");
	return 0;
}

static void print_json(const struct sim_args *a, const struct moem_trace_info *info,
		       const struct row *rows, uint32_t n, uint64_t total, bool plotted)
{
	struct json_object *top = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *t = json_object_new_object(), *cm = json_object_new_object();
	const struct moem_sim_cost *c = &a->c;

	json_object_object_add(t, "path", json_object_new_string(a->trace));
	json_object_object_add(t, "desc", json_object_new_string(info->desc));
	json_object_object_add(t, "synthetic",
			       json_object_new_boolean(info->flags & MOEM_TRACE_F_SYNTHETIC));
	json_object_object_add(t, "n_layers", json_object_new_int(info->n_layers));
	json_object_object_add(t, "n_experts", json_object_new_int(info->n_experts));
	json_object_object_add(t, "top_k", json_object_new_int(info->top_k));
	json_object_object_add(cm, "prec", json_object_new_string(moem_prec_name(c->prec)));
	json_object_object_add(cm, "expert_bytes",
			       json_object_new_uint64(c->expert_bytes[c->prec]));
	json_object_object_add(cm, "total_expert_bytes", json_object_new_uint64(total));
	json_object_object_add(cm, "pcie_gbps", json_object_new_double(c->cost.link_gbps));
	json_object_object_add(cm, "nvme_gbps", json_object_new_double(c->cost.nvme_gbps));
	json_object_object_add(cm, "hbm_gbps", json_object_new_double(c->cost.hbm_gbps));
	json_object_object_add(cm, "layer_ns", json_object_new_uint64(c->cost.layer_ns));
	json_object_object_add(cm, "token_ns", json_object_new_uint64(c->cost.token_ns));
	json_object_object_add(cm, "dram_bytes", json_object_new_uint64(c->dram_bytes));
	json_object_object_add(cm, "jitter", json_object_new_double(c->jitter));
	json_object_object_add(cm, "seed", json_object_new_uint64(a->o.seed));
	json_object_object_add(cm, "warmup_steps", json_object_new_uint64(a->o.warmup_steps));
	if (hybrid(a)) {
		json_object_object_add(cm, "exec",
				       json_object_new_string(c->exec_hybrid ? "hybrid" : "gpu"));
		json_object_object_add(cm, "cpu_gbps", json_object_new_double(c->cost.cpu_gbps));
		json_object_object_add(cm, "cpu_token_ns",
				       json_object_new_uint64(c->cost.cpu_token_ns));
		json_object_object_add(cm, "cpu_call_ns",
				       json_object_new_uint64(c->cost.cpu_call_ns));
		json_object_object_add(cm, "exec_link_gbps",
				       json_object_new_double(c->exec_link_gbps > 0
								      ? c->exec_link_gbps
								      : c->cost.link_gbps));
		json_object_object_add(cm, "cpu_moe_layers",
				       json_object_new_uint64(c->cpu_moe_layers));
		if (c->place.n) {
			char buf[1024];

			moem_place_format_all(&c->place, buf, sizeof(buf));
			json_object_object_add(cm, "place", json_object_new_string(buf));
		}
	}
	for (uint32_t i = 0; i < n; i++)
		json_object_array_add(arr, row_json(&rows[i], hybrid(a)));
	json_object_object_add(top, "trace", t);
	json_object_object_add(top, "cost", cm);
	json_object_object_add(top, "results", arr);
	if (plotted)
		json_object_object_add(top, "plot", json_object_new_string(a->png));
	printf("%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PRETTY |
								   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(top);
}

static void print_text(const struct sim_args *a, const struct moem_trace_info *info,
		       const struct row *rows, uint32_t n, uint32_t nb, uint64_t total,
		       bool plotted)
{
	const struct moem_sim_cost *c = &a->c;

	printf("trace %s: %u layers x %u experts, top-%u; %s%s\n", a->trace, info->n_layers,
	       info->n_experts, info->top_k, info->desc,
	       info->flags & MOEM_TRACE_F_SYNTHETIC ? " (SYNTHETIC)" : "");
	printf("cost: %s experts %.2f MiB, all experts %.1f GiB, PCIe %g GB/s, NVMe %g "
	       "GB/s, "
	       "HBM %g GB/s, layer %.1f us\n",
	       moem_prec_name(c->prec), c->expert_bytes[c->prec] / (double)MOEM_MiB,
	       total / (double)MOEM_GiB, c->cost.link_gbps, c->cost.nvme_gbps, c->cost.hbm_gbps,
	       c->cost.layer_ns / 1e3);
	if (hybrid(a))
		printf("exec: %s, CPU %g GB/s, %llu ns per token and %llu per call, decided for "
		       "a %g GB/s link%s\n",
		       c->exec_hybrid ? "hybrid" : "gpu", c->cost.cpu_gbps,
		       (unsigned long long)c->cost.cpu_token_ns,
		       (unsigned long long)c->cost.cpu_call_ns,
		       c->exec_link_gbps > 0 ? c->exec_link_gbps : c->cost.link_gbps,
		       c->cpu_moe_layers ? "; the first MoE layers on the CPU" : "");
	if (c->place.n) {
		char buf[1024];

		moem_place_format_all(&c->place, buf, sizeof(buf));
		printf("place: %s\n", buf);
	}
	if (!a->sweep)
		printf("budget: HBM %.1f%% of expert bytes (%.2f GiB)\n", rows[0].pct,
		       rows[0].r.hbm_bytes / (double)MOEM_GiB);
	print_table(stdout, rows, n, a->sweep || nb > 1, hybrid(a));
	if (plotted)
		printf("plot: %s\n", a->png);
}

/* The trace's shape and the expert bytes every budget is a share of. */
static int read_trace(struct sim_args *a, struct moem_trace_info *info, uint64_t *total)
{
	struct moem_trace_reader *tr;
	int ret;

	ret = moem_trace_open(a->trace, &tr);
	if (ret)
		return moem_tool_fail("sim", ret, NULL);
	*info = *moem_trace_reader_info(tr);
	moem_trace_close(tr);
	/* a trace that records its model's expert shape (1.1) is simulated with it */
	if (!a->shape_given && info->hidden && info->moe_inter) {
		a->c.hidden = info->hidden;
		a->c.inter = info->moe_inter;
	}
	ret = moem_sim_cost_finish(&a->c);
	if (ret)
		return moem_tool_fail("sim", ret, NULL);
	if (moem_mul_overflow((uint64_t)info->n_layers * info->n_experts,
			      a->c.expert_bytes[a->c.prec], total))
		return moem_tool_fail("sim", -EOVERFLOW, NULL);
	if (a->dram && (ret = moem_parse_size(a->dram, total, &a->c.dram_bytes)))
		return moem_tool_fail("sim", ret, "--dram");
	return 0;
}

static int cmd_sim(int argc, char **argv)
{
	struct sim_args a = {.hbm = "25%", .png = "moem-sim-sweep.png"};
	struct moem_trace_info info;
	struct row *rows = NULL;
	uint32_t nb = 0, n = 0, ok = 0;
	char bl[MAX_BUDGETS][32];
	bool plotted = false, plot_failed = false;
	uint64_t total;
	int ch, ret;

	moem_sim_cost_default(&a.c);
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", sim_opts, NULL)) != -1) {
		if (ch == 'h') {
			sim_usage(stdout);
			return 0;
		}
		ret = sim_option(&a, ch, optarg);
		if (ret)
			return ret;
	}
	if (optind + 1 != argc) {
		sim_usage(stderr);
		return 2;
	}
	a.trace = argv[optind];
	if ((ret = read_trace(&a, &info, &total)) || (ret = expand_policies(&a, &info)) ||
	    (ret = split_budgets(&a, bl, &nb)))
		return ret;
	rows = calloc((size_t)a.np * nb, sizeof(*rows));
	if (!rows)
		return moem_tool_fail("sim", -ENOMEM, NULL);
	ret = run_rows(&a, bl, nb, total, rows, &n, &ok);
	if (ret)
		goto out;
	if (a.sweep && ok) {
		char title[160];
		const char *base = strrchr(a.trace, '/') ? strrchr(a.trace, '/') + 1 : a.trace;

		snprintf(title, sizeof(title), "%s%s: %s, %s experts", base,
			 info.flags & MOEM_TRACE_F_SYNTHETIC ? " (SYNTHETIC)" : "", info.desc,
			 moem_prec_name(a.c.prec));
		plotted = plot(a.png, rows, n, a.pols, a.np, title) == 0;
	}
	/* a picture asked for and not made is a failure, whatever the table says */
	plot_failed = a.sweep && ok && !plotted;
	if (a.json)
		print_json(&a, &info, rows, n, total, plotted);
	else if (a.md)
		print_md(stdout, rows, n, hybrid(&a));
	else
		print_text(&a, &info, rows, n, nb, total, plotted);
	ret = ok && !plot_failed ? 0 : 1;
out:
	free(rows);
	return ret;
}

MOEM_CMD(sim_cmd, "sim", "simulate scheduling policies over a routing trace", cmd_sim);
