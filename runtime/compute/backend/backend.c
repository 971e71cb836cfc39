// SPDX-License-Identifier: GPL-2.0-only
/*
 * The public backend API: selection, and argument checks shared by every
 * implementation before a call goes through the ops table.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

#include "backend_int.h"

int moem_backend_open(const char *name, const struct moem_backend_opts *opts,
		      struct moem_backend **out)
{
	struct moem_backend_opts def = {0};
	char why[256];
	int ret;

	*out = NULL;
	if (!opts)
		opts = &def;
	if (opts->threads > 256)
		return moem_errf(EINVAL, "backend: %u threads, want 0 (all CPUs) .. 256",
				 opts->threads);
	if (opts->device < 0)
		return moem_errf(EINVAL, "backend: CUDA device %d is negative", opts->device);
	if (!name || !strcmp(name, "auto")) {
		moem_clear_error();
		ret = moem_cuda_backend_open(opts, out);
		if (!ret)
			return 0;
		snprintf(why, sizeof(why), "%s", moem_strerror(ret));
		ret = moem_cpu_backend_open(opts, out);
		if (ret)
			return ret;
		snprintf((*out)->note, sizeof((*out)->note), "%s: using the CPU backend", why);
		return 0;
	}
	if (!strcmp(name, "cpu"))
		return moem_cpu_backend_open(opts, out);
	if (!strcmp(name, "cuda"))
		return moem_cuda_backend_open(opts, out);
	return moem_errf(EINVAL, "unknown backend '%s' (auto, cpu, cuda)", name);
}

void moem_backend_close(struct moem_backend *be)
{
	if (be)
		be->ops->close(be);
}

const char *moem_backend_name(const struct moem_backend *be)
{
	return be->ops->name;
}

enum moem_backend_kind moem_backend_kind(const struct moem_backend *be)
{
	return be->kind;
}

const char *moem_backend_note(const struct moem_backend *be)
{
	return be->note;
}

void moem_backend_get_info(const struct moem_backend *be, struct moem_backend_info *info)
{
	*info = be->info;
}

bool moem_backend_fatal(const struct moem_backend *be)
{
	return atomic_load(&((struct moem_backend *)be)->fatal);
}

const char *moem_backend_fatal_msg(const struct moem_backend *be)
{
	return moem_backend_fatal(be) ? be->fatal_msg : "";
}

void moem_backend_set_fatal(struct moem_backend *be, const char *msg)
{
	bool was = false;

	/* The first sticky error is the one worth reporting. */
	if (atomic_compare_exchange_strong(&be->fatal, &was, true))
		snprintf(be->fatal_msg, sizeof(be->fatal_msg), "%s", msg);
}

/* Every entry point starts here: a fatal backend refuses all work. */
static int alive(struct moem_backend *be)
{
	if (moem_unlikely(atomic_load(&be->fatal)))
		return moem_errf(EIO, "%s backend: unusable after a fatal device error (%s)",
				 be->ops->name, be->fatal_msg);
	return 0;
}

static struct moem_stream *strm(struct moem_backend *be, struct moem_stream *s)
{
	return s ? s : be->dflt;
}

#define CHECK_ALIVE(be)              \
	do {                         \
		int __r = alive(be); \
		if (__r)             \
			return __r;  \
	} while (0)

static int need(moem_dptr p, const char *op, const char *what)
{
	if (!p)
		return moem_errf(EINVAL, "%s: %s is a null device pointer", op, what);
	return 0;
}

static int range(uint32_t v, uint32_t lo, uint32_t hi, const char *op, const char *what)
{
	if (v < lo || v > hi)
		return moem_errf(EINVAL, "%s: %s = %u, want %u..%u", op, what, v, lo, hi);
	return 0;
}

/* ---- memory, streams, events ------------------------------------------ */

int moem_be_alloc(struct moem_backend *be, uint64_t bytes, moem_dptr *out)
{
	CHECK_ALIVE(be);
	*out = 0;
	if (!bytes || bytes > (1ULL << 48))
		return moem_errf(EINVAL, "alloc: %llu bytes", (unsigned long long)bytes);
	return be->ops->alloc(be, bytes, out);
}

void moem_be_free(struct moem_backend *be, moem_dptr p)
{
	if (p)
		be->ops->free(be, p);
}

void *moem_be_host_ptr(const struct moem_backend *be, moem_dptr p)
{
	return be->kind == MOEM_BACKEND_CPU ? moem_dptr_host(p) : NULL;
}

int moem_be_mem_info(struct moem_backend *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
	CHECK_ALIVE(be);
	return be->ops->mem_info(be, free_bytes, total_bytes);
}

int moem_be_memset(struct moem_backend *be, moem_dptr p, int v, uint64_t bytes,
		   struct moem_stream *s)
{
	CHECK_ALIVE(be);
	if (v < 0 || v > 255)
		return moem_errf(EINVAL, "memset: byte value %d", v);
	if (!bytes)
		return 0;
	if (!p)
		return need(p, "memset", "destination");
	return be->ops->memset(be, p, v, bytes, strm(be, s));
}

int moem_be_htod(struct moem_backend *be, moem_dptr dst, const void *src, uint64_t bytes,
		 struct moem_stream *s)
{
	CHECK_ALIVE(be);
	if (!bytes)
		return 0;
	if (!dst || !src)
		return moem_errf(EINVAL, "htod: null %s", dst ? "source" : "destination");
	return be->ops->htod(be, dst, src, bytes, strm(be, s));
}

int moem_be_dtoh(struct moem_backend *be, void *dst, moem_dptr src, uint64_t bytes,
		 struct moem_stream *s)
{
	CHECK_ALIVE(be);
	if (!bytes)
		return 0;
	if (!dst || !src)
		return moem_errf(EINVAL, "dtoh: null %s", dst ? "source" : "destination");
	return be->ops->dtoh(be, dst, src, bytes, strm(be, s));
}

int moem_be_dtod(struct moem_backend *be, moem_dptr dst, moem_dptr src, uint64_t bytes,
		 struct moem_stream *s)
{
	CHECK_ALIVE(be);
	if (!bytes)
		return 0;
	if (!dst || !src)
		return moem_errf(EINVAL, "dtod: null %s", dst ? "source" : "destination");
	return be->ops->dtod(be, dst, src, bytes, strm(be, s));
}

int moem_be_host_register(struct moem_backend *be, void *p, uint64_t bytes)
{
	CHECK_ALIVE(be);
	if (!p || !bytes)
		return moem_errf(EINVAL, "host register: %s", p ? "zero bytes" : "null pointer");
	return be->ops->host_register(be, p, bytes);
}

int moem_be_host_unregister(struct moem_backend *be, void *p)
{
	CHECK_ALIVE(be);
	if (!p)
		return moem_errf(EINVAL, "host unregister: null pointer");
	return be->ops->host_unregister(be, p);
}

void moem_be_wake(struct moem_backend *be)
{
	if (!moem_backend_fatal(be) && be->ops->wake)
		be->ops->wake(be);
}

int moem_be_stream_create(struct moem_backend *be, struct moem_stream **out)
{
	*out = NULL;
	CHECK_ALIVE(be);
	return be->ops->stream_create(be, out);
}

void moem_be_stream_destroy(struct moem_backend *be, struct moem_stream *s)
{
	if (s && s != be->dflt)
		be->ops->stream_destroy(be, s);
}

int moem_be_stream_sync(struct moem_backend *be, struct moem_stream *s)
{
	CHECK_ALIVE(be);
	return be->ops->stream_sync(be, strm(be, s));
}

int moem_be_stream_wait(struct moem_backend *be, struct moem_stream *s, struct moem_event *ev)
{
	CHECK_ALIVE(be);
	if (!ev)
		return moem_errf(EINVAL, "stream wait: null event");
	return be->ops->stream_wait(be, strm(be, s), ev);
}

int moem_be_sync(struct moem_backend *be)
{
	CHECK_ALIVE(be);
	return be->ops->sync(be);
}

int moem_be_event_create(struct moem_backend *be, struct moem_event **out)
{
	*out = NULL;
	CHECK_ALIVE(be);
	return be->ops->event_create(be, out);
}

void moem_be_event_destroy(struct moem_backend *be, struct moem_event *ev)
{
	if (ev)
		be->ops->event_destroy(be, ev);
}

int moem_be_event_record(struct moem_backend *be, struct moem_event *ev, struct moem_stream *s)
{
	CHECK_ALIVE(be);
	if (!ev)
		return moem_errf(EINVAL, "event record: null event");
	return be->ops->event_record(be, ev, strm(be, s));
}

int moem_be_event_query(struct moem_backend *be, struct moem_event *ev)
{
	CHECK_ALIVE(be);
	if (!ev)
		return moem_errf(EINVAL, "event query: null event");
	return be->ops->event_query(be, ev);
}

int moem_be_event_sync(struct moem_backend *be, struct moem_event *ev)
{
	CHECK_ALIVE(be);
	if (!ev)
		return moem_errf(EINVAL, "event sync: null event");
	return be->ops->event_sync(be, ev);
}

int moem_be_event_elapsed(struct moem_backend *be, struct moem_event *a, struct moem_event *b,
			  float *ms)
{
	CHECK_ALIVE(be);
	if (!a || !b)
		return moem_errf(EINVAL, "event elapsed: null event");
	return be->ops->event_elapsed(be, a, b, ms);
}

/* ---- graphs ------------------------------------------------------------- */

bool moem_be_has_graphs(const struct moem_backend *be)
{
	return be && be->ops->capture_begin;
}

static int graphs(struct moem_backend *be)
{
	if (!be->ops->capture_begin)
		return moem_errf(EOPNOTSUPP, "%s backend: no graphs", be->ops->name);
	return alive(be);
}

int moem_be_capture_begin(struct moem_backend *be, struct moem_stream *s)
{
	int ret = graphs(be);

	return ret ? ret : be->ops->capture_begin(be, strm(be, s));
}

int moem_be_capture_end(struct moem_backend *be, struct moem_stream *s, struct moem_graph **out)
{
	*out = NULL;
	if (!be->ops->capture_end)
		return moem_errf(EOPNOTSUPP, "%s backend: no graphs", be->ops->name);
	/* Even on a fatal backend: the capture must end. */
	return be->ops->capture_end(be, strm(be, s), out);
}

int moem_be_graph_launch(struct moem_backend *be, struct moem_graph *g, struct moem_stream *s)
{
	int ret = graphs(be);

	if (!ret && !g)
		ret = moem_errf(EINVAL, "graph launch: null graph");
	return ret ? ret : be->ops->graph_launch(be, g, strm(be, s));
}

void moem_be_graph_destroy(struct moem_backend *be, struct moem_graph *g)
{
	if (g && be->ops->graph_destroy)
		be->ops->graph_destroy(be, g);
}

uint64_t moem_be_graph_epoch(struct moem_backend *be)
{
	return be->ops->graph_epoch ? be->ops->graph_epoch(be) : 0;
}

/* ---- ops ---------------------------------------------------------------- */

int moem_op_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_rmsnorm_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "rmsnorm", "B")) ||
	    (ret = range(a->H, 1, MOEM_BE_MAX_HIDDEN, "rmsnorm", "H")) ||
	    (ret = need(a->x, "rmsnorm", "x")) || (ret = need(a->weight, "rmsnorm", "weight")) ||
	    (ret = need(a->y, "rmsnorm", "y")))
		return ret;
	if (!isfinite(a->eps) || a->eps < 0)
		return moem_errf(EINVAL, "rmsnorm: eps %g, want a finite value >= 0",
				 (double)a->eps);
	return be->ops->rmsnorm(be, strm(be, s), a);
}

int moem_op_router(struct moem_backend *be, struct moem_stream *s, const struct moem_router_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "router", "B")) ||
	    (ret = range(a->H, 32, MOEM_BE_MAX_HIDDEN, "router", "H")) ||
	    (ret = range(a->N, 1, MOEM_BE_MAX_EXPERTS, "router", "N")) ||
	    (ret = need(a->x, "router", "x")) || (ret = need(a->gate, "router", "gate")) ||
	    (ret = need(a->logits, "router", "logits")))
		return ret;
	if (a->H % 32)
		return moem_errf(EINVAL, "router: H = %u is not a multiple of 32", a->H);
	if (a->gate % 16 || a->x % 16)
		return moem_errf(EINVAL, "router: x and gate must be 16-byte aligned");
	return be->ops->router(be, strm(be, s), a);
}

int moem_op_route(struct moem_backend *be, struct moem_stream *s, const struct moem_route_args *a)
{
	struct moem_route_args c = *a;
	const uint32_t N = a->cfg.n_experts, k = a->cfg.top_k;
	int ret;

	CHECK_ALIVE(be);
	if ((unsigned int)a->mode >= MOEM_ROUTE_NR)
		return moem_errf(EINVAL, "route: unknown mode %d", (int)a->mode);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "route", "B")) ||
	    (ret = range(N, 1, MOEM_BE_MAX_EXPERTS, "route", "n_experts")) ||
	    (ret = range(k, 1, N < 64 ? N : 64, "route", "top_k")) ||
	    (ret = need(a->logits, "route", "logits")) || (ret = need(a->ids, "route", "ids")) ||
	    (ret = need(a->w, "route", "w")) || (ret = need(a->cnt, "route", "cnt")))
		return ret;
	if ((unsigned int)a->cfg.rule > MOEM_WRULE_NORM_OR_SCALE)
		return moem_errf(EINVAL, "route: unknown weight rule %d", (int)a->cfg.rule);
	if (!isfinite(a->cfg.routed_scaling) || a->cfg.routed_scaling <= 0)
		return moem_errf(EINVAL, "route: routed_scaling %g", (double)a->cfg.routed_scaling);
	if (moem_route_groups_check(&a->cfg))
		return moem_err_prefix(EINVAL, "route");
	if (a->mode == MOEM_ROUTE_LYNX) {
		if (!c.lynx.alpha && !c.lynx.beta) {
			c.lynx.alpha = 2.0f;
			c.lynx.beta = 4;
		}
		if (!(c.lynx.alpha > 0 && c.lynx.alpha <= 64) || !c.lynx.beta || c.lynx.beta > 64)
			return moem_errf(
				EINVAL,
				"route: lynx alpha %g / beta %u out of range (0, 64] / 1..64",
				(double)c.lynx.alpha, c.lynx.beta);
	}
	if (a->mode == MOEM_ROUTE_OEA || a->mode == MOEM_ROUTE_PIGGYBACK) {
		if (!c.k0)
			c.k0 = moem_oea_default_k0(k);
		if ((ret = range(c.k0, 1, k, "route", "k0")))
			return ret;
	}
	if (a->mode == MOEM_ROUTE_PIGGYBACK && (ret = need(a->resident, "route", "resident")))
		return ret;
	return be->ops->route(be, strm(be, s), &c);
}

static int check_expert(const struct moem_ffn_args *a, uint32_t i, uint64_t *seen)
{
	const struct moem_ffn_expert *e = &a->experts[i];
	struct moem_expert_layout l;
	uint64_t end;
	int ret;

	if ((unsigned int)e->prec >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "ffn: expert %u: bad precision %d", i, (int)e->prec);
	ret = moem_expert_layout(e->prec, a->H, a->I, &l);
	if (ret)
		return moem_err_prefix(-ret, "ffn: expert %u", i);
	if (!e->blob || e->blob % MOEM_BE_ALIGN)
		return moem_errf(EINVAL, "ffn: expert %u: blob 0x%llx is not %u-byte aligned", i,
				 (unsigned long long)e->blob, MOEM_BE_ALIGN);
	if (!e->n || e->n > MOEM_BE_MAX_TOKENS)
		return moem_errf(EINVAL, "ffn: expert %u: %u tokens, want 1..%u", i, e->n,
				 MOEM_BE_MAX_TOKENS);
	end = (uint64_t)e->first + e->n;
	if (end > a->n_assign)
		return moem_errf(EINVAL, "ffn: expert %u: assignments [%u, %llu) beyond %u", i,
				 e->first, (unsigned long long)end, a->n_assign);
	for (uint32_t j = e->first; j < end; j++) {
		const struct moem_ffn_assign *as = &a->assign[j];
		uint32_t bit;

		if (as->token >= a->B || as->slot >= a->n_slots)
			return moem_errf(EINVAL, "ffn: expert %u: token %u slot %u outside %ux%u",
					 i, as->token, as->slot, a->B, a->n_slots);
		bit = (uint32_t)as->token * MOEM_BE_MAX_SLOTS + as->slot;
		if (seen[bit / 64] & (1ULL << (bit % 64)))
			return moem_errf(EINVAL,
					 "ffn: expert %u: token %u slot %u is written twice", i,
					 as->token, as->slot);
		seen[bit / 64] |= 1ULL << (bit % 64);
	}
	return 0;
}

int moem_op_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a)
{
	uint64_t seen[MOEM_BE_MAX_TOKENS * MOEM_BE_MAX_SLOTS / 64] = {0};
	int ret;

	CHECK_ALIVE(be);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_TOKENS, "ffn", "B")) ||
	    (ret = range(a->H, 32, MOEM_BE_MAX_HIDDEN, "ffn", "H")) ||
	    (ret = range(a->I, 32, MOEM_BE_MAX_INTER, "ffn", "I")) ||
	    (ret = range(a->n_slots, 1, MOEM_BE_MAX_SLOTS, "ffn", "n_slots")) ||
	    (ret = need(a->x, "ffn", "x")) || (ret = need(a->out, "ffn", "out")))
		return ret;
	if (a->H % 32 || a->I % 32)
		return moem_errf(EINVAL, "ffn: H = %u and I = %u must be multiples of 32", a->H,
				 a->I);
	if (a->x % 16 || a->out % 16)
		return moem_errf(EINVAL, "ffn: x and out must be 16-byte aligned");
	if (!a->n_experts)
		return 0;
	if (!a->experts || !a->assign)
		return moem_errf(EINVAL, "ffn: null expert or assignment list");
	for (uint32_t i = 0; i < a->n_experts; i++) {
		ret = check_expert(a, i, seen);
		if (ret)
			return ret;
	}
	return be->ops->ffn(be, strm(be, s), a);
}

bool moem_be_has_ffn_routed(const struct moem_backend *be)
{
	return be && be->ops->ffn_routed;
}

int moem_op_ffn_routed(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_ffn_routed_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	if (!be->ops->ffn_routed)
		return moem_errf(EOPNOTSUPP, "ffn_routed: the %s backend plans on the host only",
				 be->ops->name);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_TOKENS, "ffn_routed", "B")) ||
	    (ret = range(a->H, 32, MOEM_BE_MAX_HIDDEN, "ffn_routed", "H")) ||
	    (ret = range(a->I, 32, MOEM_BE_MAX_INTER, "ffn_routed", "I")) ||
	    (ret = range(a->k, 1, MOEM_BE_MAX_SLOTS, "ffn_routed", "k")) ||
	    (ret = range(a->N, 1, MOEM_BE_MAX_EXPERTS, "ffn_routed", "N")) ||
	    (ret = need(a->x, "ffn_routed", "x")) || (ret = need(a->out, "ffn_routed", "out")) ||
	    (ret = need(a->ids, "ffn_routed", "ids")) ||
	    (ret = need(a->cnt, "ffn_routed", "cnt")) ||
	    (ret = need(a->table, "ffn_routed", "table")) ||
	    (ret = need(a->status, "ffn_routed", "status")))
		return ret;
	if (a->H % 32 || a->I % 32)
		return moem_errf(EINVAL, "ffn_routed: H = %u and I = %u must be multiples of 32",
				 a->H, a->I);
	if (a->x % 16 || a->out % 16 || a->table % 16 || a->ids % 4 || a->cnt % 4 || a->status % 4)
		return moem_errf(EINVAL, "ffn_routed: misaligned buffer");
	if (!a->prec_mask || a->prec_mask >> MOEM_PREC_NR)
		return moem_errf(EINVAL, "ffn_routed: bad precision mask %#x", a->prec_mask);
	return be->ops->ffn_routed(be, strm(be, s), a);
}

int moem_op_combine(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_combine_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "combine", "B")) ||
	    (ret = range(a->H, 1, MOEM_BE_MAX_HIDDEN, "combine", "H")) ||
	    (ret = range(a->k, 0, 64, "combine", "k")) ||
	    (ret = range(a->n_shared, 0, MOEM_BE_MAX_SLOTS, "combine", "n_shared")) ||
	    (ret = need(a->h, "combine", "h")))
		return ret;
	if (a->k && ((ret = need(a->routed, "combine", "routed")) ||
		     (ret = need(a->w, "combine", "w")) || (ret = need(a->cnt, "combine", "cnt"))))
		return ret;
	if (a->n_shared && (ret = need(a->shared, "combine", "shared")))
		return ret;
	return be->ops->combine(be, strm(be, s), a);
}

static int check_quantize(const struct moem_quantize_args *a)
{
	struct moem_qmat_layout l;
	int ret;

	if ((unsigned int)a->prec >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "quantize: bad precision %d", (int)a->prec);
	ret = moem_qmat_layout(a->prec, a->rows, a->cols, &l);
	if (ret)
		return moem_err_prefix(-ret, "quantize");
	if (a->cols % 8)
		return moem_errf(EINVAL, "quantize: %u columns, want a multiple of 8", a->cols);
	if ((ret = need(a->src, "quantize", "src")) || (ret = need(a->dst, "quantize", "dst")) ||
	    (ret = need(a->status, "quantize", "status")))
		return ret;
	if (a->dst_len < l.bytes)
		return moem_errf(ENOSPC, "quantize: %llu-byte buffer for a %llu-byte matrix",
				 (unsigned long long)a->dst_len, (unsigned long long)l.bytes);
	if (a->src % 16 || a->dst % 16 || a->status % 8)
		return moem_errf(EINVAL, "quantize: src and dst must be 16-byte aligned, "
					 "status 8-byte aligned");
	return 0;
}

int moem_op_quantize(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_quantize_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	ret = check_quantize(a);
	if (!ret)
		ret = be->ops->memset(be, a->status, 0xff, sizeof(uint64_t), strm(be, s));
	if (!ret)
		ret = be->ops->quantize(be, strm(be, s), a);
	return ret;
}

int moem_op_quantize_expert(struct moem_backend *be, struct moem_stream *s, enum moem_prec prec,
			    uint32_t H, uint32_t I, moem_dptr src, moem_dptr dst, uint64_t dst_len,
			    moem_dptr status)
{
	struct moem_expert_layout in, ql;
	int ret;

	CHECK_ALIVE(be);
	if ((unsigned int)prec >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "quantize expert: bad precision %d", (int)prec);
	ret = moem_expert_layout(MOEM_PREC_BF16, H, I, &in);
	if (!ret)
		ret = moem_expert_layout(prec, H, I, &ql);
	if (ret)
		return moem_err_prefix(-ret, "quantize expert");
	if (dst_len < ql.bytes)
		return moem_errf(ENOSPC, "quantize expert: %llu-byte buffer for a %llu-byte blob",
				 (unsigned long long)dst_len, (unsigned long long)ql.bytes);
	if (!src || !dst || !status)
		return moem_errf(EINVAL, "quantize expert: null blob or status");
	ret = be->ops->memset(be, status, 0xff, sizeof(uint64_t), strm(be, s));
	for (int m = 0; !ret && m < MOEM_MAT_NR; m++) {
		struct moem_quantize_args q = {
			.prec = prec,
			.rows = ql.mat[m].rows,
			.cols = ql.mat[m].cols,
			.src = src + in.mat_off[m],
			.dst = dst + ql.mat_off[m],
			.dst_len = ql.mat[m].bytes,
			.status = status,
			.row_base = m * I,
		};

		/* One status word for the three: reset once, lowered by each. */
		ret = check_quantize(&q);
		if (!ret)
			ret = be->ops->quantize(be, strm(be, s), &q);
	}
	return ret;
}

int moem_quantize_status_error(uint64_t st)
{
	uint32_t row = (uint32_t)(st >> 32), group = (uint32_t)(st & 0xffffffffu) >> 4;

	if (st == MOEM_QSTATUS_OK)
		return 0;
	switch (st & 0xf) {
	case MOEM_QSTATUS_NONFINITE:
		return moem_errf(ERANGE, "quantize: row %u group %u: non-finite weight", row,
				 group);
	case MOEM_QSTATUS_RANGE:
		return moem_errf(ERANGE, "quantize: row %u group %u: scale or min overflows fp16",
				 row, group);
	default:
		return moem_errf(ERANGE, "quantize: bad status word 0x%llx",
				 (unsigned long long)st);
	}
}

int moem_op_histogram(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_hist_args *a)
{
	int ret;

	CHECK_ALIVE(be);
	if ((ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "histogram", "B")) ||
	    (ret = range(a->k, 1, 64, "histogram", "k")) ||
	    (ret = range(a->N, 1, MOEM_BE_MAX_EXPERTS, "histogram", "N")) ||
	    (ret = range(a->n_layers, 1, 65536, "histogram", "n_layers")) ||
	    (ret = need(a->ids, "histogram", "ids")) || (ret = need(a->cnt, "histogram", "cnt")) ||
	    (ret = need(a->counts, "histogram", "counts")))
		return ret;
	if (a->layer >= a->n_layers)
		return moem_errf(EINVAL, "histogram: layer %u of %u", a->layer, a->n_layers);
	return be->ops->histogram(be, strm(be, s), a);
}
