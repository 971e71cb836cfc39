// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pool tracer (bpf.h): bpf/moem_pool.bpf.c on moem.ko's tracepoints.
 * Before attaching, every tracepoint's record layout in tracefs
 * (events/moem/<event>/format) is compared with the one the program was
 * built for (bpf/moem_pool.h): moem.ko has no BTF, so nothing else would
 * notice a module whose records differ.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/types.h>

#include <moem/error.h>

#include "bpf_int.h"
#include "moem_pool.h"

_Static_assert((int)MOEM_PEV_NR == (int)MOEM_BPF_POOL_NR, "event types differ");

static const char *const type_names[MOEM_BPF_POOL_NR] = {
	"chunk_alloc",	  "chunk_free",	    "region_create", "region_open",
	"region_destroy", "region_release", "mmap",	     "budget_change",
};

const char *moem_bpf_pool_type_name(enum moem_bpf_pool_type t)
{
	return (unsigned int)t < MOEM_BPF_POOL_NR ? type_names[t] : "?";
}

void moem_bpf_pool_format(const struct moem_bpf_pool_ev *e, char *buf, size_t n)
{
	static const char *const why[] = {"pool", "kernel", "pinned"};
	const unsigned long long id = e->id, a = e->a, b = e->b, c = e->c, d = e->d;

	switch (e->type) {
	case MOEM_BPF_POOL_CHUNK_ALLOC:
		snprintf(buf, n, "region=%llu pfn=0x%llx node=%lld from=%s", id, a, (long long)b,
			 c ? "kernel" : "pool");
		break;
	case MOEM_BPF_POOL_CHUNK_FREE:
		snprintf(buf, n, "region=%llu pfn=0x%llx node=%lld to=%s", id, a, (long long)b,
			 c < 3 ? why[c] : "?");
		break;
	case MOEM_BPF_POOL_REGION_CREATE:
		snprintf(buf, n, "name=%s id=%llu size=%llu flags=0x%llx mode=0%llo uid=%llu",
			 e->name, id, a, b, c, d);
		break;
	case MOEM_BPF_POOL_REGION_OPEN:
		snprintf(buf, n, "name=%s id=%llu flags=0x%llx uid=%llu", e->name, id, b, d);
		break;
	case MOEM_BPF_POOL_REGION_DESTROY:
		snprintf(buf, n, "name=%s id=%llu maps=%lld files=%lld", e->name, id, (long long)a,
			 (long long)b);
		break;
	case MOEM_BPF_POOL_REGION_RELEASE:
		snprintf(buf, n, "name=%s id=%llu size=%llu", e->name, id, a);
		break;
	case MOEM_BPF_POOL_MMAP:
		snprintf(buf, n, "name=%s id=%llu start=0x%llx pgoff=%llu len=%llu %s", e->name, id,
			 a, b, c, d ? "rw" : "ro");
		break;
	case MOEM_BPF_POOL_BUDGET_CHANGE:
		snprintf(buf, n, "knob=%s old=%llu new=%llu seq=%llu", e->name, a, b, c);
		break;
	default:
		snprintf(buf, n, "unknown event %u", (unsigned int)e->type);
		break;
	}
}

/* ---- tracefs layout check ----------------------------------------------- */

struct field {
	const char *name;
	unsigned int off, size;
};

#define F(s, m, nm)                                                   \
	{                                                             \
		nm, offsetof(struct s, m), sizeof(((struct s *)0)->m) \
	}
#define COMMON(s)                                                   \
	F(s, c.type, "common_type"), F(s, c.flags, "common_flags"), \
		F(s, c.preempt_count, "common_preempt_count"), F(s, c.pid, "common_pid")

static const struct field f_chunk_alloc[] = {
	COMMON(moem_tp_chunk_alloc),
	F(moem_tp_chunk_alloc, id, "id"),
	F(moem_tp_chunk_alloc, pfn, "pfn"),
	F(moem_tp_chunk_alloc, nid, "nid"),
	F(moem_tp_chunk_alloc, fresh, "fresh"),
	{NULL, 0, 0},
};
static const struct field f_chunk_free[] = {
	COMMON(moem_tp_chunk_free),	   F(moem_tp_chunk_free, id, "id"),
	F(moem_tp_chunk_free, pfn, "pfn"), F(moem_tp_chunk_free, nid, "nid"),
	F(moem_tp_chunk_free, why, "why"), {NULL, 0, 0},
};
static const struct field f_region_create[] = {
	COMMON(moem_tp_region_create),
	F(moem_tp_region_create, name, "name"),
	F(moem_tp_region_create, id, "id"),
	F(moem_tp_region_create, size, "size"),
	F(moem_tp_region_create, flags, "flags"),
	F(moem_tp_region_create, mode, "mode"),
	F(moem_tp_region_create, uid, "uid"),
	{NULL, 0, 0},
};
static const struct field f_region_open[] = {
	COMMON(moem_tp_region_open),	    F(moem_tp_region_open, name, "name"),
	F(moem_tp_region_open, id, "id"),   F(moem_tp_region_open, flags, "flags"),
	F(moem_tp_region_open, uid, "uid"), {NULL, 0, 0},
};
static const struct field f_region_destroy[] = {
	COMMON(moem_tp_region_destroy),
	F(moem_tp_region_destroy, name, "name"),
	F(moem_tp_region_destroy, id, "id"),
	F(moem_tp_region_destroy, nr_maps, "nr_maps"),
	F(moem_tp_region_destroy, nr_files, "nr_files"),
	{NULL, 0, 0},
};
static const struct field f_region_release[] = {
	COMMON(moem_tp_region_release),
	F(moem_tp_region_release, name, "name"),
	F(moem_tp_region_release, id, "id"),
	F(moem_tp_region_release, size, "size"),
	{NULL, 0, 0},
};
static const struct field f_mmap[] = {
	COMMON(moem_tp_mmap),
	F(moem_tp_mmap, name, "name"),
	F(moem_tp_mmap, id, "id"),
	F(moem_tp_mmap, start, "start"),
	F(moem_tp_mmap, pgoff, "pgoff"),
	F(moem_tp_mmap, len, "len"),
	F(moem_tp_mmap, writable, "writable"),
	{NULL, 0, 0},
};
static const struct field f_budget_change[] = {
	COMMON(moem_tp_budget_change),	      F(moem_tp_budget_change, knob, "knob"),
	F(moem_tp_budget_change, old, "old"), F(moem_tp_budget_change, value, "value"),
	F(moem_tp_budget_change, seq, "seq"), {NULL, 0, 0},
};

static const struct field *const layouts[MOEM_PEV_NR] = {
	f_chunk_alloc,	  f_chunk_free,	    f_region_create, f_region_open,
	f_region_destroy, f_region_release, f_mmap,	     f_budget_change,
};

/* "\tfield:unsigned long pfn;\toffset:16;\tsize:8;\tsigned:0;" -> name, offset, size */
static bool parse_field(char *line, char *name, size_t name_len, unsigned int *off,
			unsigned int *size)
{
	char *decl = strstr(line, "field:"), *semi, *p, *o, *s;

	if (!decl)
		return false;
	decl += 6;
	semi = strchr(decl, ';');
	o = strstr(line, "offset:");
	s = strstr(line, "size:");
	if (!semi || !o || !s)
		return false;
	*semi = 0;
	/* The name is the last word, less an array size: "__data_loc char[] name",
	 * "char comm[16]". */
	p = strrchr(decl, ' ');
	p = p ? p + 1 : decl;
	snprintf(name, name_len, "%s", p);
	p = strchr(name, '[');
	if (p)
		*p = 0;
	*off = (unsigned int)strtoul(o + 7, NULL, 10);
	*size = (unsigned int)strtoul(s + 5, NULL, 10);
	return true;
}

static int check_layout(const char *root, unsigned int ev)
{
	char path[256], line[512], name[64];
	const struct field *want = layouts[ev];
	unsigned int found = 0, n = 0, off, size;
	FILE *f;

	snprintf(path, sizeof(path), "%s/events/moem/moem_%s/format", root, type_names[ev]);
	f = fopen(path, "r");
	if (!f)
		return moem_errf(ENOENT, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		if (!parse_field(line, name, sizeof(name), &off, &size))
			continue;
		for (unsigned int i = 0; want[i].name; i++) {
			if (strcmp(want[i].name, name))
				continue;
			if (want[i].off != off || want[i].size != size) {
				fclose(f);
				return moem_errf(
					EPROTO,
					"tracepoint moem/moem_%s: field %s is at offset %u "
					"(%u bytes) in tracefs but at %u (%u bytes) in this "
					"moem: moem.ko and moem come from different sources",
					type_names[ev], name, off, size, want[i].off, want[i].size);
			}
			found |= 1u << i;
		}
	}
	fclose(f);
	for (n = 0; want[n].name; n++)
		if (!(found & (1u << n)))
			return moem_errf(EPROTO, "tracepoint moem/moem_%s has no field %s (%s)",
					 type_names[ev], want[n].name, path);
	return 0;
}

int moem_bpf_pool_check_layouts(const char *root)
{
	int ret = 0;

	for (unsigned int ev = 0; ev < MOEM_PEV_NR && !ret; ev++)
		ret = check_layout(root, ev);
	return ret;
}

#ifdef MOEM_NO_BPF
int moem_bpf_pool_open(struct moem_bpf_pool **out)
{
	return moem_errf(EOPNOTSUPP, "moem was built without BPF tracing (no clang, bpftool, "
				     "libbpf or kernel BTF at build time; see mk/bpf.mk)");
}

void moem_bpf_pool_close(struct moem_bpf_pool *p)
{
}

int moem_bpf_pool_fd(const struct moem_bpf_pool *p)
{
	return -EOPNOTSUPP;
}

int moem_bpf_pool_poll(struct moem_bpf_pool *p, int timeout_ms, moem_bpf_pool_fn fn, void *arg)
{
	return -EOPNOTSUPP;
}

int moem_bpf_pool_stats(const struct moem_bpf_pool *p, struct moem_bpf_pool_stats *st)
{
	return -EOPNOTSUPP;
}
#else
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "moem_pool.skel.h"

/* libbpf's choice (tracefs under debugfs if that exists), so we check what it attaches. */
static const char *tracefs(void)
{
	return access("/sys/kernel/debug/tracing", F_OK) == 0 ? "/sys/kernel/debug/tracing"
							      : "/sys/kernel/tracing";
}

struct moem_bpf_pool {
	struct moem_pool_bpf *skel;
	struct ring_buffer *rb;
	moem_bpf_pool_fn fn;
	void *arg;
	int cb_ret;
};

static int check_tracefs(void)
{
	const char *root = tracefs();
	char path[256];

	snprintf(path, sizeof(path), "%s/events", root);
	if (access(path, F_OK))
		return moem_errf(ENOENT,
				 "tracefs is not mounted at %s (mount -t tracefs nodev "
				 "/sys/kernel/tracing)",
				 root);
	snprintf(path, sizeof(path), "%s/events/moem", root);
	if (access(path, F_OK))
		return moem_errf(ENOENT, "moem.ko is not loaded: no moem tracepoints in %s/events",
				 root);
	return moem_bpf_pool_check_layouts(root);
}

/* ---- the tracer --------------------------------------------------------- */

static int sample(void *ctx, void *data, size_t size)
{
	struct moem_bpf_pool *p = ctx;
	const struct moem_pool_ev *k = data;
	struct moem_bpf_pool_ev e;

	if (p->cb_ret || size < sizeof(*k))
		return 0;
	memset(&e, 0, sizeof(e));
	e.ts_ns = k->ts_ns;
	e.type = (enum moem_bpf_pool_type)k->type;
	e.pid = k->pid;
	e.tid = k->tid;
	memcpy(e.comm, k->comm, sizeof(e.comm));
	e.comm[sizeof(e.comm) - 1] = 0;
	e.id = k->id;
	e.a = k->a;
	e.b = k->b;
	e.c = k->c;
	e.d = k->d;
	memcpy(e.name, k->name, sizeof(e.name));
	e.name[sizeof(e.name) - 1] = 0;
	if (p->fn)
		p->cb_ret = p->fn(p->arg, &e);
	return p->cb_ret ? -ECANCELED : 0;
}

int moem_bpf_pool_open(struct moem_bpf_pool **out)
{
	struct moem_bpf_pool *p;
	int ret;

	ret = moem_bpf_check_perm();
	if (!ret)
		ret = check_tracefs();
	if (ret)
		return ret;
	moem_bpf_quiet_libbpf();
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	moem_bpf_libbpf_msg_reset();
	p->skel = moem_pool_bpf__open_and_load();
	if (!p->skel) {
		ret = moem_bpf_load_error(errno, "loading the moem.ko tracepoint program");
		goto err;
	}
	moem_bpf_libbpf_msg_reset();
	ret = moem_pool_bpf__attach(p->skel);
	if (ret) {
		ret = moem_bpf_load_error(ret, "attaching to moem.ko's tracepoints");
		goto err;
	}
	p->rb = ring_buffer__new(bpf_map__fd(p->skel->maps.moem_pool_ev), sample, p, NULL);
	if (!p->rb) {
		ret = moem_bpf_load_error(errno, "opening the moem.ko event ring buffer");
		goto err;
	}
	*out = p;
	return 0;
err:
	moem_bpf_pool_close(p);
	return ret;
}

void moem_bpf_pool_close(struct moem_bpf_pool *p)
{
	if (!p)
		return;
	ring_buffer__free(p->rb);
	moem_pool_bpf__destroy(p->skel);
	free(p);
}

int moem_bpf_pool_fd(const struct moem_bpf_pool *p)
{
	return ring_buffer__epoll_fd(p->rb);
}

int moem_bpf_pool_poll(struct moem_bpf_pool *p, int timeout_ms, moem_bpf_pool_fn fn, void *arg)
{
	int ret;

	p->fn = fn;
	p->arg = arg;
	p->cb_ret = 0;
	ret = timeout_ms ? ring_buffer__poll(p->rb, timeout_ms) : ring_buffer__consume(p->rb);
	if (p->cb_ret)
		return p->cb_ret;
	if (ret < 0 && ret != -EINTR)
		return moem_errf(-ret, "reading the moem.ko event ring buffer: %s", strerror(-ret));
	return ret;
}

int moem_bpf_pool_stats(const struct moem_bpf_pool *p, struct moem_bpf_pool_stats *st)
{
	uint64_t v[MOEM_PST_NR];
	int ret = moem_bpf_percpu_sum(bpf_map__fd(p->skel->maps.moem_pool_st), MOEM_PST_NR, v);

	if (ret)
		return ret;
	for (unsigned int i = 0; i < MOEM_BPF_POOL_NR; i++)
		st->events[i] = v[i];
	st->dropped = v[MOEM_PST_DROPS];
	return 0;
}
#endif /* MOEM_NO_BPF */
