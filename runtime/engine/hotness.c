// SPDX-License-Identifier: GPL-2.0-only
/*
 * The engine's own route counts (moem_engine_expert_counts()) and the
 * hotness option: with "bpf", DynaExq's per-interval counts come from
 * moem_hot, kept by a route tracer (bpf.h) this engine attaches to its own
 * process, instead of the backend's router histogram. Both count the same
 * (token, slot) pairs, so the policy sees the same numbers either way; the
 * tracer's map is what operators read with bpftool while the engine runs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/usdt.h>

#include "engine_int.h"

static void note(struct moem_engine *e, const char *s)
{
	snprintf(e->hotness, sizeof(e->hotness), "%s", s);
}

int moem_eng_hotness_open(struct moem_engine *e)
{
	const char *h = e->o.hotness && *e->o.hotness ? e->o.hotness : "engine";
	const size_t cells = (size_t)e->n_moe * e->cfg->n_experts;
	struct moem_bpf_route_opts o = {.pid = getpid()};
	int ret;

	if (strcmp(h, "engine") && strcmp(h, "bpf"))
		return moem_errf(EINVAL, "hotness '%s': engine or bpf", h);
	e->route_counts = calloc(cells, sizeof(uint64_t));
	if (!e->route_counts)
		return -ENOMEM;
	note(e, "engine");
	if (!strcmp(h, "engine"))
		return 0;
	if (e->n_moe > MOEM_BPF_HOT_LAYERS || e->cfg->n_experts > MOEM_BPF_HOT_EXPERTS) {
		moem_warn("hotness bpf: moem_hot counts %u layers x %u experts, the model has "
			  "%u x %u: using the engine's counters",
			  MOEM_BPF_HOT_LAYERS, MOEM_BPF_HOT_EXPERTS, e->n_moe, e->cfg->n_experts);
		note(e, "engine (bpf: model larger than moem_hot)");
		return 0;
	}
	e->hot_prev = calloc(cells, sizeof(uint64_t));
	e->hot_cur = calloc(cells, sizeof(uint64_t));
	e->hot_delta = calloc(e->cfg->n_experts, sizeof(uint32_t));
	if (!e->hot_prev || !e->hot_cur || !e->hot_delta)
		return -ENOMEM;
	/* The probes are in whichever file holds libmoem: the executable, or a
	 * shared object that libmoem was linked into. */
	{
		Dl_info dl;

		if (dladdr(&moem_route_semaphore, &dl) && dl.dli_fname &&
		    strstr(dl.dli_fname, ".so"))
			o.binary = dl.dli_fname;
	}
	ret = moem_bpf_route_open(&o, &e->hot_bpf);
	if (ret) {
		moem_warn("hotness bpf: %s; using the engine's counters", moem_strerror(ret));
		snprintf(e->hotness, sizeof(e->hotness), "engine (bpf refused: %.60s)",
			 moem_strerror(ret));
		e->hot_bpf = NULL;
		return 0;
	}
	moem_info("hotness: moem_hot (bpftool map dump name moem_hot)");
	note(e, "bpf");
	return 0;
}

void moem_eng_hotness_close(struct moem_engine *e)
{
	moem_bpf_route_close(e->hot_bpf);
	e->hot_bpf = NULL;
	free(e->route_counts);
	free(e->hot_prev);
	free(e->hot_cur);
	free(e->hot_delta);
	e->route_counts = e->hot_prev = e->hot_cur = NULL;
	e->hot_delta = NULL;
}

/* The same pairs the histogram op and moem_hot count: ids in [0, N). */
void moem_eng_count_routes(struct moem_engine *e, uint32_t m, uint32_t B)
{
	const uint32_t K = e->cfg->top_k, N = e->cfg->n_experts;
	uint64_t *row = e->route_counts + (size_t)m * N;

	for (uint32_t i = 0; i < B * K; i++) {
		int32_t x = e->ids_host[i];

		if (x >= 0 && (uint32_t)x < N)
			row[x]++;
	}
}

bool moem_eng_hotness_interval(struct moem_engine *e)
{
	const uint32_t N = e->cfg->n_experts;
	int ret;

	if (!e->hot_bpf)
		return false;
	ret = moem_bpf_hot_read_dense(e->hot_bpf, e->n_moe, N, e->hot_cur);
	if (ret) {
		moem_warn("hotness bpf: %s; back to the engine's counters", moem_strerror(ret));
		moem_bpf_route_close(e->hot_bpf);
		e->hot_bpf = NULL;
		note(e, "engine (bpf failed)");
		return false;
	}
	for (uint32_t m = 0; m < e->n_moe; m++) {
		const size_t row = (size_t)m * N;

		for (uint32_t x = 0; x < N; x++) {
			uint64_t d = e->hot_cur[row + x] - e->hot_prev[row + x];

			e->hot_delta[x] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		}
		moem_driver_counts(e->drv, m, e->hot_delta);
	}
	memcpy(e->hot_prev, e->hot_cur, sizeof(uint64_t) * e->n_moe * N);
	/* The histogram is not read meanwhile: keep it from growing forever. */
	moem_be_memset(e->be, e->counts, 0, (uint64_t)e->n_moe * N * 4, NULL);
	return true;
}

void moem_engine_moe_shape(const struct moem_engine *e, uint32_t *n_moe, uint32_t *n_experts)
{
	*n_moe = e->n_moe;
	*n_experts = e->cfg->n_experts;
}

void moem_engine_expert_counts(const struct moem_engine *e, uint64_t *out)
{
	memcpy(out, e->route_counts, sizeof(uint64_t) * e->n_moe * e->cfg->n_experts);
}
