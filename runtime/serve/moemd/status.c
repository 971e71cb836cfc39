// SPDX-License-Identifier: GPL-2.0-only
/* The "status" response and run results as JSON (Documentation/protocol.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/util.h>

#include "moemd.h"

const char *moemd_state_name(int state)
{
	switch (state) {
	case MOEMD_STARTING:
		return "starting";
	case MOEMD_STAGING:
		return "staging";
	case MOEMD_READY:
		return "ready";
	case MOEMD_DRAINING:
		return "draining";
	default:
		return "?";
	}
}

#define ADD(o, k, v) json_object_object_add(o, k, v)
#define U64(v)	     json_object_new_uint64(v)
#define STR(v)	     json_object_new_string(v)
#define DBL(v)	     json_object_new_double(v)
#define BOOL(v)	     json_object_new_boolean(v)

static struct json_object *knobs_json(const uint64_t *knob)
{
	struct json_object *o = json_object_new_object();

	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		if (knob[k] != MOEMD_KNOB_ABSENT)
			ADD(o, moem_budget_name((enum moem_budget_knob)k),
			    moem_knob_info((enum moem_budget_knob)k)->unit == MOEM_KNOB_UNIT_ENUM
				    ? STR(moem_knob_value_name((enum moem_budget_knob)k, knob[k]))
				    : U64(knob[k]));
	return o;
}

static int sysfs_u64(const char *rel, uint64_t *v)
{
	char path[128], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", MOEM_SYSFS_ROOT, rel);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	*v = strtoull(buf, NULL, 10);
	return 0;
}

/* What moem.ko says: its pool and its budget knobs (absent without it). */
static struct json_object *kernel_json(struct moemd *d)
{
	struct json_object *o = json_object_new_object();
	uint64_t knob[MOEM_BUDGET_NR], seq, v;
	static const char *const pool[] = {"total_bytes", "free_bytes", "max_bytes", "regions"};

	if (sysfs_u64("pool/total_bytes", &v)) {
		ADD(o, "loaded", BOOL(false));
		return o;
	}
	ADD(o, "loaded", BOOL(true));
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(pool); i++) {
		char rel[64], key[32];

		snprintf(rel, sizeof(rel), "pool/%s", pool[i]);
		snprintf(key, sizeof(key), "pool_%s", pool[i]);
		if (!sysfs_u64(rel, &v))
			ADD(o, key, U64(v));
	}
	if (moemd_sysfs_read(d, knob, &seq)) {
		ADD(o, "budgets", knobs_json(knob));
		ADD(o, "budgets_seq", U64(seq));
	}
	ADD(o, "following", BOOL(moemd_sysfs_present(d)));
	return o;
}

struct json_object *moemd_status_json(struct moemd *d)
{
	struct json_object *r = json_object_new_object(), *o;
	int state = moemd_state_get(d);
	struct moem_engine_status st;
	uint64_t now = moem_now_ns();

	if (!r)
		return NULL;
	o = json_object_new_object();
	ADD(o, "version", STR(MOEMD_VERSION));
	ADD(o, "pid", json_object_new_int(getpid()));
	ADD(o, "state", STR(moemd_state_name(state)));
	ADD(o, "uptime_ns", U64(now - d->start_ns));
	ADD(o, "ready_after_ns", U64(d->ready_ns ? d->ready_ns - d->start_ns : 0));
	ADD(o, "open_ns", U64(d->open_ns));
	ADD(o, "warmup_ns", U64(d->warmup_ns));
	ADD(o, "socket", STR(d->cfg.socket));
	ADD(o, "config", d->cfg.config ? STR(d->cfg.config) : NULL);
	ADD(o, "clients", U64(moemd_client_count(d)));
	ADD(o, "trace_dir", d->cfg.trace_dir ? STR(d->cfg.trace_dir) : NULL);
	ADD(o, "workload_dir", d->cfg.workload_dir ? STR(d->cfg.workload_dir) : NULL);
	ADD(o, "requests", U64(d->requests));
	ADD(o, "bad_requests", U64(d->bad_requests));
	ADD(o, "runs", U64(d->runs_done));
	ADD(o, "runs_failed", U64(d->runs_failed));
	ADD(o, "watchdog_usec", U64(d->watchdog_usec));
	if (state == MOEMD_STAGING) {
		ADD(o, "staged_bytes", U64(__atomic_load_n(&d->prog.done, __ATOMIC_RELAXED)));
		ADD(o, "staging_bytes", U64(d->prog.total));
	}
	ADD(r, "daemon", o);

	o = json_object_new_object();
	ADD(o, "path", STR(d->cfg.ea.o.pack_path));
	ADD(o, "id", STR(d->pack_id));
	ADD(r, "pack", o);
	ADD(r, "kernel", kernel_json(d));
	if (d->srv)
		ADD(r, "serving", moemd_serving_json(d->srv));

	if (state == MOEMD_STARTING || state == MOEMD_STAGING || !d->e)
		return r;
	moem_engine_get_status(d->e, &st);

	o = json_object_new_object();
	ADD(o, "name", STR(st.backend));
	ADD(o, "note", STR(st.backend_note));
	ADD(r, "backend", o);

	o = json_object_new_object();
	ADD(o, "provider", STR(st.pool_provider));
	ADD(o, "why", STR(st.pool_why));
	ADD(o, "bytes", U64(st.pool_bytes));
	ADD(o, "pinned", BOOL(st.pool_pinned));
	ADD(o, "pinned_bytes", U64(st.pool_pinned_bytes));
	ADD(o, "region", STR(st.pool_region));
	ADD(o, "persistent", BOOL(st.pool_persistent));
	ADD(o, "warm", BOOL(st.warm));
	ADD(o, "adopted", U64(st.adopted));
	ADD(r, "pool", o);

	o = json_object_new_object();
	ADD(o, "hbm_budget", U64(st.hbm_budget));
	ADD(o, "hbm_used", U64(st.hbm_used));
	ADD(o, "hbm_resident_hi", U64(st.hbm_resident_hi));
	ADD(o, "hbm_resident_lo", U64(st.hbm_resident_lo));
	ADD(o, "dram_budget", U64(st.dram_budget));
	ADD(o, "dram_used", U64(st.dram_used));
	ADD(o, "dram_ready", U64(st.dram_ready));
	moem_engine_dram_nodes_json(o, &st);
	ADD(o, "link_gbps", DBL(st.link_gbps));
	ADD(o, "prefetch_horizon", U64(st.prefetch_horizon));
	ADD(r, "tiers", o);

	o = json_object_new_object();
	ADD(o, "steps", U64(st.steps));
	ADD(o, "hits", U64(st.hits));
	ADD(o, "misses", U64(st.misses));
	ADD(o, "fallbacks", U64(st.fallbacks));
	{
		uint64_t acc = st.hits + st.misses + st.fallbacks;

		ADD(o, "hit_rate", DBL(acc ? (double)st.hits / (double)acc : 0.0));
	}
	ADD(o, "stall_ns", U64(st.stall_ns));
	ADD(o, "dram_hits", U64(st.dram_hits));
	ADD(o, "dram_misses", U64(st.dram_misses));
	ADD(o, "bytes_nvme", U64(st.bytes_nvme));
	ADD(o, "bytes_h2d", U64(st.bytes_h2d));
	ADD(o, "cpu_experts", U64(st.cpu_experts));
	ADD(o, "cpu_ns", U64(st.cpu_ns));
	/* per step: the last one's, and the mean since the engine opened */
	ADD(o, "cpu_experts_last_step", U64(st.last_cpu_experts));
	ADD(o, "cpu_ns_last_step", U64(st.last_cpu_ns));
	ADD(o, "cpu_experts_per_step",
	    DBL(st.steps ? (double)st.cpu_experts / (double)st.steps : 0.0));
	ADD(o, "cpu_ns_per_step", DBL(st.steps ? (double)st.cpu_ns / (double)st.steps : 0.0));
	ADD(o, "step_ns", U64(st.step_ns));
	moem_engine_phases_json(o, "phase_ns", st.phase_ns);
	ADD(r, "counters", o);

	o = json_object_new_object();
	ADD(o, "route", STR(st.route));
	ADD(o, "evict", STR(st.evict));
	ADD(o, "prefetch", STR(st.prefetch));
	ADD(o, "precision", STR(st.precision));
	ADD(o, "paging", STR(st.paging));
	ADD(o, "hotness", STR(st.hotness));
	ADD(o, "exec", STR(st.exec));
	ADD(o, "cpu_moe_layers", U64(st.cpu_moe_layers));
	ADD(o, "place", STR(st.place));
	ADD(o, "cpu_placed", U64(st.cpu_placed));
	ADD(o, "cpu_gbps", DBL(st.cpu_gbps));
	ADD(o, "cpu_token_ns", U64(st.cpu_token_ns));
	ADD(o, "cpu_call_ns", U64(st.cpu_call_ns));
	ADD(o, "cpu_from", STR(st.cpu_from));
	ADD(r, "policies", o);

	ADD(r, "budgets", knobs_json(st.knob));
	o = json_object_new_object();
	ADD(o, "applied_ns", U64(st.knobs_applied_ns));
	ADD(o, "now_ns", U64(now));
	pthread_mutex_lock(&d->kstats_lock);
	ADD(o, "sysfs_changes", U64(d->kstats.sysfs_changes));
	ADD(o, "sysfs_refused", U64(d->kstats.sysfs_refused));
	ADD(o, "sysfs_last_knob", STR(d->kstats.last_knob));
	ADD(o, "sysfs_last_wake_ns", U64(d->kstats.last_wake_ns));
	ADD(o, "sysfs_last_set_ns", U64(d->kstats.last_set_ns));
	pthread_mutex_unlock(&d->kstats_lock);
	ADD(r, "knobs", o);

	o = json_object_new_object();
	pthread_mutex_lock(&d->lock);
	ADD(o, "active", BOOL(d->cur && d->cur->kind == JOB_RUN));
	if (d->cur && d->cur->kind == JOB_RUN) {
		ADD(o, "id", U64(d->cur->run_id));
		ADD(o, "steps_done", U64(__atomic_load_n(&d->run_steps_done, __ATOMIC_RELAXED)));
		ADD(o, "steps", U64(d->cur->wl.w.steps));
	}
	pthread_mutex_unlock(&d->lock);
	ADD(r, "run", o);

	o = json_object_new_object();
	ADD(o, "on", BOOL(st.trace_path[0] != 0));
	if (st.trace_path[0])
		ADD(o, "path", STR(st.trace_path));
	ADD(r, "trace", o);
	return r;
}

struct json_object *moemd_run_json(const struct moemd_job *j)
{
	struct json_object *r = moem_ctl_ok(j->req_id);
	const struct moem_run_stats *rs = &j->rs;

	if (!r)
		return NULL;
	/* Flat, so that scripts can pick fields with simple tools. */
	ADD(r, "run_id", U64(j->run_id));
	ADD(r, "steps", U64(rs->total.step));
	ADD(r, "tokens", U64(rs->total.tokens));
	ADD(r, "batch", U64(j->wl.w.batch));
	ADD(r, "moe_layers", U64(rs->moe_layers));
	ADD(r, "mean_T", DBL(rs->mean_T));
	ADD(r, "hits", U64(rs->total.hits));
	ADD(r, "misses", U64(rs->total.misses));
	ADD(r, "fallbacks", U64(rs->total.fallbacks));
	ADD(r, "hit_rate", DBL(rs->hit_rate));
	ADD(r, "stall_ns", U64(rs->total.stall_ns));
	ADD(r, "stall_share", DBL(rs->stall_share));
	ADD(r, "bytes_nvme", U64(rs->total.bytes_nvme));
	ADD(r, "bytes_h2d", U64(rs->total.bytes_h2d));
	ADD(r, "step_ns", U64(rs->total.step_ns));
	ADD(r, "tokens_per_s", DBL(rs->tokens_per_s));
	ADD(r, "digest", STR(rs->digest_hex));
	ADD(r, "stopped", BOOL(rs->stopped));
	ADD(r, "first_step_ns", U64(j->first_step_ns ? j->first_step_ns - j->submit_ns : 0));
	ADD(r, "wall_ns", U64(j->done_ns - j->submit_ns));
	return r;
}
