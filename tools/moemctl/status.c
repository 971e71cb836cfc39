// SPDX-License-Identifier: GPL-2.0-only
/* `moemctl status` for people: moemd's status response, one topic a line. */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/dev.h>
#include <moem/util.h>

#include "moemctl.h"

static const char *bytes(uint64_t v, char *buf)
{
	return moem_fmt_bytes(v, buf, 32);
}

static void print_duration(const char *label, uint64_t ns)
{
	uint64_t s = ns / 1000000000ULL;

	if (s >= 3600)
		printf("%s%lluh%02llum", label, (unsigned long long)(s / 3600),
		       (unsigned long long)(s / 60 % 60));
	else if (s >= 60)
		printf("%s%llum%02llus", label, (unsigned long long)(s / 60),
		       (unsigned long long)(s % 60));
	else
		printf("%s%.1fs", label, (double)ns / 1e9);
}

/*
 * The engine thread's phases of its MoE layers (moemd status counters
 * phase_ns, engine.h moem_phase) in ms per step, the ones over 1% of the
 * steps' time; nothing from a moemd without them or before a step.
 */
static void print_phases(struct json_object *c)
{
	struct json_object *ph = jobj(c, "phase_ns");
	uint64_t steps = ju64(c, "steps"), total = ju64(c, "step_ns");

	if (!ph || !steps || !total)
		return;
	printf("layers    ms per step:");
	json_object_object_foreach(ph, name, v)
	{
		uint64_t ns = (uint64_t)json_object_get_int64(v);

		if (ns * 100 >= total)
			printf(" %s %.3f,", name, (double)ns / (double)steps / 1e6);
	}
	printf(" of a %.3f ms step\n", (double)total / (double)steps / 1e6);
}

static void print_budgets(const char *label, struct json_object *b)
{
	const char *sep = "";
	char v[32];

	if (!b)
		return;
	printf("%-10s", label);
	for (int k = 0; k < MOEM_BUDGET_NR; k++) {
		const char *name = moem_budget_name((enum moem_budget_knob)k);
		enum moem_knob_unit u = moem_knob_info((enum moem_budget_knob)k)->unit;

		if (!jobj(b, name))
			continue; /* an older moem.ko or moemd without this knob */
		if (u == MOEM_KNOB_UNIT_ENUM)
			printf("%s %s %s", sep, name, jstr(b, name));
		else if (u == MOEM_KNOB_UNIT_BYTES)
			printf("%s %s %s", sep, name,
			       ju64(b, name) ? bytes(ju64(b, name), v) : "unset");
		else
			printf("%s %s %llu", sep, name, (unsigned long long)ju64(b, name));
		sep = ",";
	}
	printf("\n");
}

/* The OpenAI API: where, whether it serves, queue, batch, tokens, latencies. */
static void print_serving(struct json_object *sv)
{
	char a[32], b[32];

	if (!sv)
		return;
	if (!*jstr(sv, "listen")) {
		printf("http      off\n");
		return;
	}
	printf("http      http://%s/v1, model '%s'%s, %s\n", jstr(sv, "listen"), jstr(sv, "model"),
	       jbool(sv, "api_key") ? ", API key" : "",
	       jbool(sv, "ready") ? "serving" : "not serving");
	if (!jbool(sv, "ready") && *jstr(sv, "why_not"))
		printf("          %s\n", jstr(sv, "why_not"));
	/* an older moemd has no dense_prec */
	if (*jstr(sv, "dense_prec"))
		printf("decoder   dense weights (attention projections, lm_head) %s\n",
		       jstr(sv, "dense_prec"));
	printf("serving   queue %llu, running %llu (batch <= %llu, %llu tokens a step); %llu done, "
	       "%llu cancelled, %llu failed, %llu refused; %llu prompt + %llu generated tokens\n",
	       (unsigned long long)ju64(sv, "queue"), (unsigned long long)ju64(sv, "running"),
	       (unsigned long long)ju64(sv, "max_batch"),
	       (unsigned long long)ju64(sv, "step_tokens"),
	       (unsigned long long)ju64(sv, "finished"), (unsigned long long)ju64(sv, "cancelled"),
	       (unsigned long long)ju64(sv, "failed"), (unsigned long long)ju64(sv, "refused"),
	       (unsigned long long)ju64(sv, "prompt_tokens"),
	       (unsigned long long)ju64(sv, "generated_tokens"));
	printf("latency   first token %.1f ms, between tokens %.1f ms, step %.1f ms (means)",
	       jdbl(sv, "ttft_mean_s") * 1e3, jdbl(sv, "itl_mean_s") * 1e3,
	       jdbl(sv, "step_mean_s") * 1e3);
	if (jobj(sv, "kv_budget"))
		printf("; KV %s of %s", bytes(ju64(sv, "kv_used"), a),
		       bytes(ju64(sv, "kv_budget"), b));
	printf("\n");
	/* an older moemd has no prefix_cache */
	if (jobj(sv, "prefix_cache"))
		printf("prefix    cache %s; %llu prompt tokens taken from it, %s of KV kept for "
		       "later prompts\n",
		       jbool(sv, "prefix_cache") ? "on" : "off",
		       (unsigned long long)ju64(sv, "prefix_cache_hit_tokens"),
		       bytes(ju64(sv, "kv_prefix_cached"), a));
}

/* The DRAM tier per NUMA node, when the pool spans several (or names its node). */
static void dram_nodes(struct json_object *t)
{
	struct json_object *nodes = jobj(t, "dram_nodes");
	char a[32], b[32], c[32];
	size_t n;

	if (!nodes || !json_object_is_type(nodes, json_type_array))
		return;
	n = json_object_array_length(nodes);
	for (size_t i = 0; i < n; i++) {
		struct json_object *nd = json_object_array_get_idx(nodes, i);
		int64_t node = json_object_get_int64(jobj(nd, "node"));

		if (n == 1 && node < 0)
			return; /* one node, not known: nothing to add */
		printf("          DRAM node %lld: %s used, %s free (of %s)\n", (long long)node,
		       bytes(ju64(nd, "used"), a), bytes(ju64(nd, "free"), b),
		       bytes(ju64(nd, "bytes"), c));
	}
	if (ju64(t, "dram_node_fallback"))
		printf("          %llu versions placed off their node (it was full)\n",
		       (unsigned long long)ju64(t, "dram_node_fallback"));
}

/* The answer's sections are objects (phase_ns too: it is iterated). */
static bool status_shaped(struct json_object *st)
{
	static const char *const sections[] = {"pack",	   "kernel",   "pool",	  "tiers",
					       "counters", "policies", "budgets", "run",
					       "trace",	   "serving",  "backend"};

	if (!janswer(st, "status", "daemon", JT(object)))
		return false;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(sections); i++)
		if (jobj(st, sections[i]) && !janswer(st, "status", sections[i], JT(object)))
			return false;
	return !jobj(jobj(st, "counters"), "phase_ns") ||
	       janswer(jobj(st, "counters"), "status", "phase_ns", JT(object));
}

void print_status(struct json_object *st)
{
	struct json_object *d = jobj(st, "daemon"), *k = jobj(st, "kernel"), *p = jobj(st, "pool"),
			   *t = jobj(st, "tiers"), *c = jobj(st, "counters"),
			   *pol = jobj(st, "policies"), *run = jobj(st, "run"),
			   *tr = jobj(st, "trace");
	char a[32], b[32];

	if (!status_shaped(st))
		return;
	printf("moemd %s (pid %llu), %s", jstr(d, "version"), (unsigned long long)ju64(d, "pid"),
	       jstr(d, "state"));
	print_duration(", up ", ju64(d, "uptime_ns"));
	if (ju64(d, "ready_after_ns"))
		print_duration(", ready after ", ju64(d, "ready_after_ns"));
	printf("\npack      %s (id %.16s)\n", jstr(jobj(st, "pack"), "path"),
	       jstr(jobj(st, "pack"), "id"));
	if (!strcmp(jstr(d, "state"), "staging"))
		printf("staging   %s of %s\n", bytes(ju64(d, "staged_bytes"), a),
		       bytes(ju64(d, "staging_bytes"), b));
	if (p) {
		printf("pool      %s, %s", jstr(p, "provider"), bytes(ju64(p, "bytes"), a));
		if (!strcmp(jstr(p, "provider"), "kmod"))
			printf(", region '%s'%s%s", jstr(p, "region"),
			       jbool(p, "persistent") ? ", persistent" : "",
			       jbool(p, "warm") ? ", warm restart" : "");
		if (jbool(p, "warm"))
			printf(" (%llu staged versions adopted)",
			       (unsigned long long)ju64(p, "adopted"));
		if (jbool(p, "pinned"))
			printf(", pinned");
		else
			printf(", NOT PINNED (%s locked)", bytes(ju64(p, "pinned_bytes"), b));
		printf("\n          %s\n", jstr(p, "why"));
	}
	if (jbool(k, "loaded"))
		printf("kernel    moem.ko pool %s total, %s free, %llu regions%s\n",
		       bytes(ju64(k, "pool_total_bytes"), a), bytes(ju64(k, "pool_free_bytes"), b),
		       (unsigned long long)ju64(k, "pool_regions"),
		       jbool(k, "following") ? "; moemd follows its budget knobs" : "");
	else
		printf("kernel    moem.ko not loaded\n");
	if (jobj(st, "backend"))
		printf("backend   %s%s%s\n", jstr(jobj(st, "backend"), "name"),
		       *jstr(jobj(st, "backend"), "note") ? ": " : "",
		       jstr(jobj(st, "backend"), "note"));
	if (t) {
		printf("tiers     HBM %s of %s (%llu hi + %llu lo versions resident)\n",
		       bytes(ju64(t, "hbm_used"), a), bytes(ju64(t, "hbm_budget"), b),
		       (unsigned long long)ju64(t, "hbm_resident_hi"),
		       (unsigned long long)ju64(t, "hbm_resident_lo"));
		printf("          DRAM %s of %s (%llu versions staged); link %.1f GB/s\n",
		       bytes(ju64(t, "dram_used"), a), bytes(ju64(t, "dram_budget"), b),
		       (unsigned long long)ju64(t, "dram_ready"), jdbl(t, "link_gbps"));
		dram_nodes(t);
	}
	if (c) {
		printf("counters  %llu steps; HBM hits %llu, misses %llu, fallbacks %llu (hit rate "
		       "%.3f); stalls %.3f s\n",
		       (unsigned long long)ju64(c, "steps"), (unsigned long long)ju64(c, "hits"),
		       (unsigned long long)ju64(c, "misses"),
		       (unsigned long long)ju64(c, "fallbacks"), jdbl(c, "hit_rate"),
		       (double)ju64(c, "stall_ns") / 1e9);
		printf("          DRAM hits %llu, misses %llu (of the HBM misses); moved "
		       "NVMe->DRAM "
		       "%s, DRAM->HBM %s\n",
		       (unsigned long long)ju64(c, "dram_hits"),
		       (unsigned long long)ju64(c, "dram_misses"), bytes(ju64(c, "bytes_nvme"), a),
		       bytes(ju64(c, "bytes_h2d"), b));
		print_phases(c);
	}
	if (pol) {
		printf("policies  route %s, evict %s, prefetch %s", jstr(pol, "route"),
		       jstr(pol, "evict"), jstr(pol, "prefetch"));
		if (t && ju64(t, "prefetch_horizon"))
			printf(" (horizon %llu)", (unsigned long long)ju64(t, "prefetch_horizon"));
		printf(", precision %s, paging %s", jstr(pol, "precision"), jstr(pol, "paging"));
		if (*jstr(pol, "hotness"))
			printf(", hotness %s", jstr(pol, "hotness"));
		printf("\n");
		/* hybrid execution: only when a CPU executor is on (an older moemd has no key) */
		if (jdbl(pol, "cpu_gbps") > 0) {
			const char *from = jstr(pol, "cpu_from");

			printf("exec      %s, cpu-moe-layers %llu, CPU %.2f GB/s%s%s%s\n",
			       jstr(pol, "exec"), (unsigned long long)ju64(pol, "cpu_moe_layers"),
			       jdbl(pol, "cpu_gbps"), *from ? " (" : "", from, *from ? ")" : "");
			printf("cpu       %llu experts on the CPU, %.3f s; last step %llu, %.2f "
			       "ms; "
			       "mean %.1f per step, %.2f ms\n",
			       (unsigned long long)(c ? ju64(c, "cpu_experts") : 0),
			       c ? (double)ju64(c, "cpu_ns") / 1e9 : 0.0,
			       (unsigned long long)(c ? ju64(c, "cpu_experts_last_step") : 0),
			       c ? (double)ju64(c, "cpu_ns_last_step") / 1e6 : 0.0,
			       c ? jdbl(c, "cpu_experts_per_step") : 0.0,
			       c ? jdbl(c, "cpu_ns_per_step") / 1e6 : 0.0);
		} else if (!strcmp(jstr(pol, "exec"), "gpu")) {
			printf("exec      gpu (no CPU executor)\n");
		}
		if (*jstr(pol, "place"))
			printf("place     %s (%llu experts always on the CPU)\n",
			       jstr(pol, "place"), (unsigned long long)ju64(pol, "cpu_placed"));
	}
	print_budgets("budgets", jobj(st, "budgets"));
	if (jbool(k, "loaded"))
		print_budgets("sysfs", jobj(k, "budgets"));
	if (run) {
		if (jbool(run, "active"))
			printf("run       #%llu in progress: %llu of %llu steps\n",
			       (unsigned long long)ju64(run, "id"),
			       (unsigned long long)ju64(run, "steps_done"),
			       (unsigned long long)ju64(run, "steps"));
		else
			printf("run       idle (%llu runs done)\n",
			       (unsigned long long)ju64(d, "runs"));
	}
	if (tr)
		printf("trace     %s%s\n", jbool(tr, "on") ? "on: " : "off",
		       jbool(tr, "on") ? jstr(tr, "path") : "");
	print_serving(jobj(st, "serving"));
}
