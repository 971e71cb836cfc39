/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * moem - the budget knobs, declared once.
 *
 * MOEM_KNOBS(X) lists every knob as
 *
 *	X(ID, name, nr, unit, min, max, who, apply)
 *
 *  ID     MOEM_BUDGET_<ID>, the knob's enum moem_budget_knob constant;
 *  name   its one spelling everywhere: the file /sys/kernel/moem/budgets/
 *         <name>, the control socket's and moemctl's knob name, moemd's
 *         config key and its /metrics label (a bare token: the kernel
 *         builds its sysfs attribute from it);
 *  nr     the ABI value (MOEM_IOC_BUDGET_GET/SET's knob): never changes;
 *  unit   MOEM_KNOB_UNIT_<unit>: BYTES (0 = no limit set), PERMILLE,
 *         LAYERS, or ENUM, an index into MOEM_REROUTES() whose files
 *         show and take its name;
 *  min,   the range accepted, inclusive: a value outside is refused
 *  max    (-EINVAL from the kernel, -ERANGE from libmoem);
 *  who    MOEM_KNOB_WHO_<who>: ADMIN, CAP_SYS_ADMIN writes it through
 *         sysfs (files 0644 root) or the ioctl; moemd's control socket
 *         lets whoever its socket's mode lets in;
 *  apply  MOEM_KNOB_APPLY_<apply>, when a running moemd applies a change:
 *         NOW (the tiers take it at once; an eviction it causes waits for
 *         the experts in use), LAYER (at the next layer boundary), STEP
 *         (before the decoder's next step; a KV shrink waits for blocks
 *         to be free).
 *
 * The kernel (kmod/budget.c) derives its sysfs files, names and checks
 * from this list, libmoem (runtime/storage/dev/budget.c) its lookup,
 * parse, validate and format; tests/kselftest/knobs_test.c checks the
 * running module against it. ABI 1.2 added kv_bytes.
 */
#ifndef _UAPI_LINUX_MOEM_KNOBS_H
#define _UAPI_LINUX_MOEM_KNOBS_H

#define MOEM_BUDGET_BYTES_MAX		(1ULL << 50)
#define MOEM_BUDGET_PERMILLE_MAX	1000
#define MOEM_BUDGET_PREFETCH_MAX	64

/* X(ID, name, nr): the values of the reroute knob, spelled as name says. */
#define MOEM_REROUTES(X)				\
	X(NONE, "none", 0)				\
	X(LYNX, "lynx", 1)				\
	X(OEA, "oea", 2)				\
	X(CACHE_AWARE, "cache-aware", 3)		\
	X(PIGGYBACK, "piggyback", 4)

#define MOEM_REROUTE_ENUM_(id, name, nr) MOEM_REROUTE_##id = nr,
enum moem_reroute {
	MOEM_REROUTES(MOEM_REROUTE_ENUM_)
	MOEM_REROUTE_NR
};

#undef MOEM_REROUTE_ENUM_

#define MOEM_KNOBS(X)							\
	X(HBM_BYTES, hbm_bytes, 0, BYTES,				\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, NOW)				\
	X(DRAM_BYTES, dram_bytes, 1, BYTES,				\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, NOW)				\
	X(HI_PRECISION_PERMILLE, hi_precision_permille, 2, PERMILLE,	\
	  0, MOEM_BUDGET_PERMILLE_MAX, ADMIN, LAYER)			\
	X(PREFETCH_DEPTH, prefetch_depth, 3, LAYERS,			\
	  0, MOEM_BUDGET_PREFETCH_MAX, ADMIN, LAYER)			\
	X(REROUTE, reroute, 4, ENUM,					\
	  0, MOEM_REROUTE_NR - 1, ADMIN, LAYER)				\
	X(KV_BYTES, kv_bytes, 5, BYTES,					\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, STEP)

enum moem_knob_unit {
	MOEM_KNOB_UNIT_BYTES = 0,
	MOEM_KNOB_UNIT_PERMILLE = 1,
	MOEM_KNOB_UNIT_LAYERS = 2,
	MOEM_KNOB_UNIT_ENUM = 3
};

enum moem_knob_who {
	MOEM_KNOB_WHO_ADMIN = 0
};

enum moem_knob_apply {
	MOEM_KNOB_APPLY_NOW = 0,
	MOEM_KNOB_APPLY_LAYER = 1,
	MOEM_KNOB_APPLY_STEP = 2
};

#define MOEM_KNOB_ENUM_(id, name, nr, unit, min, max, who, apply) MOEM_BUDGET_##id = nr,
enum moem_budget_knob {
	MOEM_KNOBS(MOEM_KNOB_ENUM_)
	MOEM_BUDGET_NR
};

#undef MOEM_KNOB_ENUM_

#endif /* _UAPI_LINUX_MOEM_KNOBS_H */
