/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * moem - the budget knobs, declared once.
 *
 * MOEM_KNOBS(X) lists every knob as
 *
 *	X(ID, name, nr, unit, min, max, who, apply, values)
 *
 *  ID     MOEM_BUDGET_<ID>, the knob's enum moem_budget_knob constant;
 *  name   its one spelling everywhere: the file /sys/kernel/moem/budgets/
 *         <name>, the control socket's and moemctl's knob name, moemd's
 *         config key and its /metrics label (a bare token: the kernel
 *         builds its sysfs attribute from it);
 *  nr     the ABI value (MOEM_IOC_BUDGET_GET/SET's knob): never changes;
 *  unit   MOEM_KNOB_UNIT_<unit>: BYTES (0 = no limit set), PERMILLE,
 *         LAYERS, or ENUM, an index into the knob's own value list
 *         (values) whose files show and take the value's name;
 *  min,   the range accepted, inclusive: a value outside is refused
 *  max    (-EINVAL from the kernel, -ERANGE from libmoem);
 *  who    MOEM_KNOB_WHO_<who>: ADMIN, CAP_SYS_ADMIN writes it through
 *         sysfs (files 0644 root) or the ioctl; moemd's control socket
 *         lets whoever its socket's mode lets in;
 *  apply  MOEM_KNOB_APPLY_<apply>, when a running moemd applies a change:
 *         NOW (the tiers take it at once; an eviction it causes waits for
 *         the experts in use), LAYER (at the next layer boundary), STEP
 *         (before the decoder's next step; a KV shrink waits for blocks
 *         to be free);
 *  values the X-macro listing an ENUM knob's values, X(ID, "name", nr)
 *         (MOEM_REROUTES, MOEM_EXECS), MOEM_KNOB_NO_VALUES for the others;
 *         min..max of an ENUM knob is 0..the list's last nr.
 *
 * The kernel (kmod/budget.c) derives its sysfs files, names and checks
 * from this list, libmoem (runtime/storage/dev/budget.c) its lookup,
 * parse, validate and format; tests/kselftest/knobs_test.c checks the
 * running module against it. ABI 1.2 added kv_bytes, ABI 1.3 exec and
 * cpu_moe_layers (hybrid execution, Documentation/engine.md) and the
 * values column.
 */
#ifndef _UAPI_LINUX_MOEM_KNOBS_H
#define _UAPI_LINUX_MOEM_KNOBS_H

#define MOEM_BUDGET_BYTES_MAX		(1ULL << 50)
#define MOEM_BUDGET_PERMILLE_MAX	1000
#define MOEM_BUDGET_PREFETCH_MAX	64
/* The most MoE layers a pack holds (MOEM_MAX_LAYERS of libmoem's model.h). */
#define MOEM_BUDGET_MOE_LAYERS_MAX	256

/* The value list of a knob that is not an ENUM: empty. */
#define MOEM_KNOB_NO_VALUES(X)

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

/*
 * X(ID, name, nr): the values of the exec knob, spelled as moem run's and
 * moemd's --exec spell them: gpu, every expert computed on the GPU (moved
 * there when not resident); hybrid, an expert not in HBM computed on the
 * CPU from DRAM where the cost model says it is cheaper.
 */
#define MOEM_EXECS(X)					\
	X(GPU, "gpu", 0)				\
	X(HYBRID, "hybrid", 1)

#define MOEM_EXEC_MODE_ENUM_(id, name, nr) MOEM_EXEC_MODE_##id = nr,
enum moem_exec_mode {
	MOEM_EXECS(MOEM_EXEC_MODE_ENUM_)
	MOEM_EXEC_MODE_NR
};

#undef MOEM_EXEC_MODE_ENUM_

#define MOEM_KNOBS(X)							\
	X(HBM_BYTES, hbm_bytes, 0, BYTES,				\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, NOW, MOEM_KNOB_NO_VALUES)	\
	X(DRAM_BYTES, dram_bytes, 1, BYTES,				\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, NOW, MOEM_KNOB_NO_VALUES)	\
	X(HI_PRECISION_PERMILLE, hi_precision_permille, 2, PERMILLE,	\
	  0, MOEM_BUDGET_PERMILLE_MAX, ADMIN, LAYER, MOEM_KNOB_NO_VALUES) \
	X(PREFETCH_DEPTH, prefetch_depth, 3, LAYERS,			\
	  0, MOEM_BUDGET_PREFETCH_MAX, ADMIN, LAYER, MOEM_KNOB_NO_VALUES) \
	X(REROUTE, reroute, 4, ENUM,					\
	  0, MOEM_REROUTE_NR - 1, ADMIN, LAYER, MOEM_REROUTES)		\
	X(KV_BYTES, kv_bytes, 5, BYTES,					\
	  0, MOEM_BUDGET_BYTES_MAX, ADMIN, STEP, MOEM_KNOB_NO_VALUES)	\
	X(EXEC, exec, 6, ENUM,						\
	  0, MOEM_EXEC_MODE_NR - 1, ADMIN, LAYER, MOEM_EXECS)		\
	X(CPU_MOE_LAYERS, cpu_moe_layers, 7, LAYERS,			\
	  0, MOEM_BUDGET_MOE_LAYERS_MAX, ADMIN, LAYER, MOEM_KNOB_NO_VALUES)

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

#define MOEM_KNOB_ENUM_(id, name, nr, unit, min, max, who, apply, values) \
	MOEM_BUDGET_##id = nr,
enum moem_budget_knob {
	MOEM_KNOBS(MOEM_KNOB_ENUM_)
	MOEM_BUDGET_NR
};

#undef MOEM_KNOB_ENUM_

#endif /* _UAPI_LINUX_MOEM_KNOBS_H */
