// SPDX-License-Identifier: GPL-2.0-only
/*
 * GET /metrics: the Prometheus text exposition format (version 0.0.4).
 * Names start with moem_ and carry their unit (_seconds, _bytes,
 * _tokens, _total for counters). Documentation/admin-guide.md lists
 * them. Histograms have fixed buckets chosen for token latencies.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

static const double buckets[MOEMD_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
};

void moemd_hist_add(struct moemd_hist *h, double v)
{
	int i = 0;

	while (i < MOEMD_HIST_BUCKETS && v > buckets[i])
		i++;
	h->count[i]++;
	h->n++;
	h->sum += v;
}

struct out {
	char *buf;
	size_t len, cap;
	bool oom;
};

static void put(struct out *o, const char *fmt, ...) MOEM_PRINTF(2, 3);

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->oom = true;
			return;
		}
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		{
			size_t cap = o->cap * 2 + (size_t)n;
			char *b = realloc(o->buf, cap);

			if (!b) {
				o->oom = true;
				return;
			}
			o->buf = b;
			o->cap = cap;
		}
	}
}

static void help(struct out *o, const char *name, const char *type, const char *text)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void one(struct out *o, const char *name, const char *type, const char *text, double v)
{
	help(o, name, type, text);
	put(o, "%s %.9g\n", name, v);
}

static void hist(struct out *o, const char *name, const char *text, const struct moemd_hist *h)
{
	uint64_t cum = 0;

	help(o, name, "histogram", text);
	for (int i = 0; i < MOEMD_HIST_BUCKETS; i++) {
		cum += h->count[i];
		put(o, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[i], (unsigned long long)cum);
	}
	cum += h->count[MOEMD_HIST_BUCKETS];
	put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	put(o, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

/* A label value: backslash, quote and newline escaped. */
static const char *label(const char *v, char *buf, size_t len)
{
	size_t k = 0;

	for (; *v && k + 3 < len; v++) {
		if (*v == '\\' || *v == '"') {
			buf[k++] = '\\';
			buf[k++] = *v;
		} else if (*v == '\n') {
			buf[k++] = '\\';
			buf[k++] = 'n';
		} else {
			buf[k++] = *v;
		}
	}
	buf[k] = 0;
	return buf;
}

static void serving(struct out *o, struct moemd_srv *s)
{
	static const char *const ep_name[EP_NR] = {
		"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
		"/tokenize",	   "/detokenize",	   "other",
	};
	static const char *const code[MOEMD_STATUS_NR] = {
		"200", "400", "401", "404", "405", "413", "429", "500", "503", "other",
	};
	struct moem_sched_stats st = {0};
	uint64_t hit = 0, cached = 0;
	struct moemd_srv c;

	if (s->sched)
		moem_sched_get_stats(s->sched, &st);
	if (s->model)
		moemd_model_prefix(s->model, &hit, &cached);
	pthread_mutex_lock(&s->lock);
	c = *s;
	pthread_mutex_unlock(&s->lock);

	help(o, "moem_http_requests_total", "counter",
	     "HTTP requests answered, by endpoint and status");
	for (int e = 0; e < EP_NR; e++)
		for (int k = 0; k < MOEMD_STATUS_NR; k++)
			if (c.http_status[e][k])
				put(o,
				    "moem_http_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n",
				    ep_name[e], code[k], (unsigned long long)c.http_status[e][k]);
	one(o, "moem_serving_ready", "gauge", "1 once the model serves (GET /health says 200)",
	    c.ready && !c.closing);
	one(o, "moem_queue_requests", "gauge", "requests waiting to start", st.waiting);
	one(o, "moem_running_sequences", "gauge", "sequences in the running batch", st.running);
	one(o, "moem_prefilling_sequences", "gauge",
	    "running sequences still prefilling their prompt", st.prefilling);
	one(o, "moem_live_requests", "gauge", "requests between arrival and their last byte",
	    c.n_live);
	one(o, "moem_requests_refused_total", "counter", "requests refused with 429: queue full",
	    (double)st.refused);
	one(o, "moem_requests_finished_total", "counter", "requests that ended by stop or length",
	    (double)st.finished);
	one(o, "moem_requests_cancelled_total", "counter",
	    "requests cancelled (client gone, stream not read, shutdown)", (double)st.cancelled);
	one(o, "moem_requests_failed_total", "counter", "requests the model failed",
	    (double)st.failed);
	one(o, "moem_client_disconnects_total", "counter",
	    "clients that left before their answer ended", (double)c.disconnects);
	one(o, "moem_stop_strings_total", "counter", "generations ended by a stop string",
	    (double)c.stop_strings);
	one(o, "moem_prompt_tokens_total", "counter", "prompt tokens of accepted requests",
	    (double)c.prompt_tokens);
	one(o, "moem_generation_tokens_total", "counter", "tokens generated",
	    (double)c.generated_tokens);
	one(o, "moem_prefill_tokens_total", "counter", "prompt tokens run through the model",
	    (double)st.prefill_tokens);
	one(o, "moem_prefix_cache_hit_tokens_total", "counter",
	    "prompt tokens whose KV came from the prefix cache (not run through the model)",
	    (double)hit);
	one(o, "moem_prefix_cache_bytes", "gauge",
	    "KV cache bytes kept only for later prompts with the same beginning", (double)cached);
	one(o, "moem_scheduler_steps_total", "counter", "scheduler steps (model forward passes)",
	    (double)st.steps);
	one(o, "moem_kv_waits_total", "counter",
	    "times the next request had to wait for KV cache blocks", (double)st.kv_waits);
	one(o, "moem_last_step_sequences", "gauge", "sequences in the last step's batch",
	    (double)c.last_step_batch);
	hist(o, "moem_time_to_first_token_seconds", "arrival to first generated token", &c.ttft);
	hist(o, "moem_inter_token_latency_seconds", "time between two tokens of one request",
	     &c.itl);
	hist(o, "moem_request_duration_seconds", "arrival to last token, completed requests",
	     &c.e2e);
	hist(o, "moem_step_duration_seconds", "one scheduler step (prefill chunks and decodes)",
	     &c.step);
	one(o, "moem_sched_max_batch_sequences", "gauge", "setting: sequences in a batch at most",
	    c.sched_opts.max_running);
	one(o, "moem_sched_step_token_budget_tokens", "gauge", "setting: tokens in a step at most",
	    c.sched_opts.step_tokens);
	one(o, "moem_sched_prefill_chunk_tokens", "gauge",
	    "setting: prompt tokens of one sequence in a step", c.sched_opts.prefill_chunk);
	one(o, "moem_sched_queue_max_requests", "gauge", "setting: waiting requests at most",
	    c.sched_opts.max_waiting);
}

static void engine(struct out *o, struct moemd *d)
{
	struct moem_engine_status st;
	uint64_t kv_used = 0, kv_budget = 0, kv_seqs = 0;
	bool kv = d->srv && d->srv->model &&
		  moemd_model_kv(d->srv->model, &kv_used, &kv_budget, &kv_seqs);
	char a[96], b[96], c[96], e[96], f[96];

	if (moemd_state_get(d) != MOEMD_READY || !d->e)
		return;
	moem_engine_get_status(d->e, &st);
	help(o, "moem_expert_hits_total", "counter",
	     "hbm: expert uses served without waiting; dram: HBM misses already staged in DRAM");
	put(o, "moem_expert_hits_total{tier=\"hbm\"} %llu\n", (unsigned long long)st.hits);
	put(o, "moem_expert_hits_total{tier=\"dram\"} %llu\n", (unsigned long long)st.dram_hits);
	help(o, "moem_expert_misses_total", "counter",
	     "hbm: expert uses that waited for a copy; dram: HBM misses read from NVMe too");
	put(o, "moem_expert_misses_total{tier=\"hbm\"} %llu\n", (unsigned long long)st.misses);
	put(o, "moem_expert_misses_total{tier=\"dram\"} %llu\n",
	    (unsigned long long)st.dram_misses);
	/* A fallback is decided where the expert is used: HBM only. */
	help(o, "moem_expert_fallbacks_total", "counter",
	     "expert uses served by the low-precision version instead of waiting");
	put(o, "moem_expert_fallbacks_total{tier=\"hbm\"} %llu\n",
	    (unsigned long long)st.fallbacks);
	one(o, "moem_stall_seconds_total", "counter", "time the model waited for experts",
	    (double)st.stall_ns / 1e9);
	help(o, "moem_engine_phase_seconds_total", "counter",
	     "the engine thread's time in each phase of the MoE layers (engine.h moem_phase)");
	for (int p = 0; p < MOEM_PHASE_NR; p++)
		put(o, "moem_engine_phase_seconds_total{phase=\"%s\"} %.9f\n", moem_phase_name(p),
		    (double)st.phase_ns[p] / 1e9);
	help(o, "moem_moved_bytes_total", "counter", "bytes moved between tiers");
	put(o, "moem_moved_bytes_total{from=\"nvme\",to=\"dram\"} %llu\n",
	    (unsigned long long)st.bytes_nvme);
	put(o, "moem_moved_bytes_total{from=\"dram\",to=\"hbm\"} %llu\n",
	    (unsigned long long)st.bytes_h2d);
	help(o, "moem_budget_bytes", "gauge", "budget of each tier");
	put(o, "moem_budget_bytes{tier=\"hbm\"} %llu\n", (unsigned long long)st.hbm_budget);
	put(o, "moem_budget_bytes{tier=\"dram\"} %llu\n", (unsigned long long)st.dram_budget);
	if (kv)
		put(o, "moem_budget_bytes{tier=\"kv\"} %llu\n", (unsigned long long)kv_budget);
	help(o, "moem_used_bytes", "gauge", "bytes in use in each tier");
	put(o, "moem_used_bytes{tier=\"hbm\"} %llu\n", (unsigned long long)st.hbm_used);
	put(o, "moem_used_bytes{tier=\"dram\"} %llu\n", (unsigned long long)st.dram_used);
	help(o, "moem_dram_node_bytes", "gauge",
	     "the DRAM tier per NUMA node: bytes used and free of its share of the budget");
	for (uint32_t k = 0; k < st.dram_n_nodes; k++) {
		uint64_t nb = st.dram_node[k].budget, nu = st.dram_node[k].used;

		put(o, "moem_dram_node_bytes{node=\"%d\",state=\"used\"} %llu\n",
		    st.dram_node[k].node, (unsigned long long)nu);
		put(o, "moem_dram_node_bytes{node=\"%d\",state=\"free\"} %llu\n",
		    st.dram_node[k].node, (unsigned long long)(nb > nu ? nb - nu : 0));
	}
	one(o, "moem_dram_node_fallback_total", "counter",
	    "expert versions placed off their NUMA node because it was full",
	    (double)st.dram_node_fallback);
	if (kv) {
		put(o, "moem_used_bytes{tier=\"kv\"} %llu\n", (unsigned long long)kv_used);
		one(o, "moem_kv_sequences", "gauge", "sequences holding KV cache blocks",
		    (double)kv_seqs);
	}
	help(o, "moem_resident_experts", "gauge", "expert versions resident in a tier");
	put(o, "moem_resident_experts{tier=\"hbm\",precision=\"hi\"} %llu\n",
	    (unsigned long long)st.hbm_resident_hi);
	put(o, "moem_resident_experts{tier=\"hbm\",precision=\"lo\"} %llu\n",
	    (unsigned long long)st.hbm_resident_lo);
	put(o, "moem_resident_experts{tier=\"dram\",precision=\"any\"} %llu\n",
	    (unsigned long long)st.dram_ready);
	one(o, "moem_prefetch_horizon_layers", "gauge", "the prefetch policy's current horizon",
	    st.prefetch_horizon);
	help(o, "moem_policy_info", "gauge", "the policies in force (labels), always 1");
	put(o,
	    "moem_policy_info{route=\"%s\",evict=\"%s\",prefetch=\"%s\",precision=\"%s\","
	    "paging=\"%s\"} 1\n",
	    label(st.route, a, sizeof(a)), label(st.evict, b, sizeof(b)),
	    label(st.prefetch, c, sizeof(c)), label(st.precision, e, sizeof(e)),
	    label(st.paging, f, sizeof(f)));
	help(o, "moem_knob", "gauge",
	     "budget knobs in force (reroute, exec: the index of the value in the order "
	     "moemctl --help lists them)");
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		put(o, "moem_knob{name=\"%s\"} %llu\n", moem_budget_name((enum moem_budget_knob)k),
		    (unsigned long long)st.knob[k]);
}

char *moemd_metrics_text(struct moemd *d, size_t *len)
{
	struct out o = {.cap = 16384};

	o.buf = malloc(o.cap);
	if (!o.buf)
		return NULL;
	o.buf[0] = 0;
	one(&o, "moem_up", "gauge", "1: moemd answers", 1);
	one(&o, "moem_uptime_seconds", "gauge", "since moemd started",
	    (double)(moem_now_ns() - d->start_ns) / 1e9);
	if (d->srv)
		serving(&o, d->srv);
	engine(&o, d);
	if (o.oom) {
		free(o.buf);
		return NULL;
	}
	*len = o.len;
	return o.buf;
}

static double hist_mean(const struct moemd_hist *h)
{
	return h->n ? h->sum / (double)h->n : 0.0;
}

struct json_object *moemd_serving_json(struct moemd_srv *s)
{
	struct json_object *o = json_object_new_object();
	struct moem_sched_stats st = {0};
	uint64_t kv_used = 0, kv_budget = 0, kv_seqs = 0, answered = 0, hit = 0, cached = 0;
	struct moemd_srv c;

	if (!o)
		return NULL;
	if (s->sched)
		moem_sched_get_stats(s->sched, &st);
	pthread_mutex_lock(&s->lock);
	c = *s;
	pthread_mutex_unlock(&s->lock);
	for (int e = 0; e < EP_NR; e++)
		for (int k = 0; k < MOEMD_STATUS_NR; k++)
			answered += c.http_status[e][k];
	json_object_object_add(o, "listen", json_object_new_string(s->mhd ? s->listen_addr : ""));
	json_object_object_add(o, "model", json_object_new_string(s->cfg.model_name));
	json_object_object_add(o, "ready", json_object_new_boolean(c.ready && !c.closing));
	json_object_object_add(o, "why_not", json_object_new_string(c.model_err));
	json_object_object_add(o, "api_key", json_object_new_boolean(s->cfg.api_key != NULL));
	json_object_object_add(o, "dense_prec",
			       json_object_new_string(moem_prec_name(s->cfg.dense_prec)));
	json_object_object_add(o, "http_answers", json_object_new_uint64(answered));
	json_object_object_add(o, "queue", json_object_new_uint64(st.waiting));
	json_object_object_add(o, "running", json_object_new_uint64(st.running));
	json_object_object_add(o, "live", json_object_new_uint64(c.n_live));
	json_object_object_add(o, "finished", json_object_new_uint64(st.finished));
	json_object_object_add(o, "cancelled", json_object_new_uint64(st.cancelled));
	json_object_object_add(o, "failed", json_object_new_uint64(st.failed));
	json_object_object_add(o, "refused", json_object_new_uint64(st.refused));
	json_object_object_add(o, "prompt_tokens", json_object_new_uint64(c.prompt_tokens));
	json_object_object_add(o, "generated_tokens", json_object_new_uint64(c.generated_tokens));
	json_object_object_add(o, "ttft_mean_s", json_object_new_double(hist_mean(&c.ttft)));
	json_object_object_add(o, "itl_mean_s", json_object_new_double(hist_mean(&c.itl)));
	json_object_object_add(o, "step_mean_s", json_object_new_double(hist_mean(&c.step)));
	if (s->model && moemd_model_kv(s->model, &kv_used, &kv_budget, &kv_seqs)) {
		json_object_object_add(o, "kv_used", json_object_new_uint64(kv_used));
		json_object_object_add(o, "kv_budget", json_object_new_uint64(kv_budget));
		moemd_model_prefix(s->model, &hit, &cached);
		json_object_object_add(o, "prefix_cache_hit_tokens", json_object_new_uint64(hit));
		json_object_object_add(o, "kv_prefix_cached", json_object_new_uint64(cached));
	}
	json_object_object_add(o, "prefix_cache", json_object_new_boolean(!s->cfg.no_prefix_cache));
	json_object_object_add(o, "max_batch", json_object_new_uint64(c.sched_opts.max_running));
	json_object_object_add(o, "step_tokens", json_object_new_uint64(c.sched_opts.step_tokens));
	json_object_object_add(o, "max_queue", json_object_new_uint64(c.sched_opts.max_waiting));
	json_object_object_add(o, "prefill_chunk",
			       json_object_new_uint64(c.sched_opts.prefill_chunk));
	return o;
}
