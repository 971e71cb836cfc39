// SPDX-License-Identifier: GPL-2.0-only
/*
 * Graphs of device-planned decode steps (engine_int.h, "graph.c"): a
 * small cache of instantiated graphs, least recently used first out,
 * keyed by the step's shape. A shape is captured the second time it is
 * seen: the first, plain, step has grown whatever backend buffer the
 * shape needs (a capture may not allocate), so the capture records the
 * same launches. The backend's graph epoch (its scratch moved) and
 * flush() (the decoder's KV pool moved) drop every graph. A capture
 * that fails turns graphs off for the process: the step runs plainly,
 * and a warning says why, once.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>

#include "engine_int.h"

#define ENG_GRAPHS 16

struct graph_slot {
	bool used;
	struct moem_eng_graph_key k;
	struct moem_graph *g; /* NULL: seen once, not captured yet */
	uint64_t last;
};

struct moem_eng_graphs {
	int cur; /* the slot being captured, or -1 */
	uint64_t tick, epoch;
	struct graph_slot s[ENG_GRAPHS];
};

static atomic_bool graphs_failed;

static bool wanted(const struct moem_engine *e)
{
	const char *v = getenv("MOEM_CUDA_GRAPHS");

	if (e->o.no_graphs || (v && !strcmp(v, "0")) || atomic_load(&graphs_failed))
		return false;
	return moem_be_has_graphs(e->be);
}

void moem_eng_graph_flush(struct moem_engine *e)
{
	struct moem_eng_graphs *gr = e->gr;

	if (!gr)
		return;
	for (int i = 0; i < ENG_GRAPHS; i++) {
		moem_be_graph_destroy(e->be, gr->s[i].g);
		memset(&gr->s[i], 0, sizeof(gr->s[i]));
	}
	gr->cur = -1;
}

void moem_eng_graph_free(struct moem_engine *e)
{
	moem_eng_graph_flush(e);
	free(e->gr);
	e->gr = NULL;
}

/* Graphs off for the process; the first failure says why. */
static void fail(struct moem_engine *e, const char *what)
{
	bool was = false;

	if (atomic_compare_exchange_strong(&graphs_failed, &was, true))
		moem_warn("CUDA graphs off for this process (%s: %s); steps run as plain launches",
			  what, moem_last_error());
	moem_eng_graph_flush(e);
}

int moem_eng_graph_begin(struct moem_engine *e, struct moem_eng_graph_key *k,
			 enum moem_eng_graph_mode *mode)
{
	struct moem_eng_graphs *gr = e->gr;
	struct graph_slot *s = NULL;
	uint64_t ep;
	int ret;

	*mode = ENG_GRAPH_OFF;
	if (!wanted(e))
		return 0;
	if (!gr) {
		gr = calloc(1, sizeof(*gr));
		if (!gr)
			return -ENOMEM;
		gr->cur = -1;
		gr->epoch = moem_be_graph_epoch(e->be);
		e->gr = gr;
	}
	ep = moem_be_graph_epoch(e->be);
	if (ep != gr->epoch) { /* the backend's scratch moved: every graph is stale */
		moem_eng_graph_flush(e);
		gr->epoch = ep;
	}
	k->rp_kind = (uint32_t)e->rp.kind;
	k->rp_k0 = e->rp.k0;
	k->rp_beta = e->rp.lynx.beta;
	k->rp_alpha = e->rp.lynx.alpha;
	for (int i = 0; i < ENG_GRAPHS && !s; i++)
		if (gr->s[i].used && !memcmp(&gr->s[i].k, k, sizeof(*k)))
			s = &gr->s[i];
	if (!s) { /* a new shape: remember it, launch plainly */
		s = &gr->s[0];
		for (int i = 1; i < ENG_GRAPHS && s->used; i++)
			if (!gr->s[i].used || gr->s[i].last < s->last)
				s = &gr->s[i];
		/* the last step's synchronisation ended every launch of it */
		moem_be_graph_destroy(e->be, s->g);
		s->g = NULL;
		s->used = true;
		s->k = *k;
		s->last = ++gr->tick;
		return 0;
	}
	s->last = ++gr->tick;
	if (s->g) {
		ret = moem_be_graph_launch(e->be, s->g, NULL);
		if (!ret)
			*mode = ENG_GRAPH_REPLAY;
		return ret;
	}
	ret = moem_be_capture_begin(e->be, NULL);
	if (ret) {
		if (moem_backend_fatal(e->be))
			return ret;
		fail(e, "cuStreamBeginCapture");
		return 0;
	}
	gr->cur = (int)(s - gr->s);
	*mode = ENG_GRAPH_CAPTURE;
	return 0;
}

int moem_eng_graph_end(struct moem_engine *e, int err, bool *rerun)
{
	struct moem_eng_graphs *gr = e->gr;
	struct moem_graph *g = NULL;
	int cur = gr->cur, ret;

	*rerun = false;
	gr->cur = -1;
	ret = moem_be_capture_end(e->be, NULL, &g);
	if (!err && !ret) {
		ret = moem_be_graph_launch(e->be, g, NULL);
		if (!ret) {
			gr->s[cur].g = g;
			return 0;
		}
		/* not queued: nothing of it is pending */
		moem_be_graph_destroy(e->be, g);
	}
	if (moem_backend_fatal(e->be))
		return err ? err : ret;
	/* Nothing ran: the step is launched again, plainly (an op's own error
	 * then comes back from there). */
	fail(e, err ? "an op inside the capture" : "capture");
	*rerun = true;
	return 0;
}
