// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budget knobs: values the kernel stores and validates for moemd, which
 * applies them. Written through /sys/kernel/moem/budgets/<knob> (0644) or
 * MOEM_IOC_BUDGET_SET, both needing CAP_SYS_ADMIN; every accepted write
 * bumps a global sequence number and wakes poll()ers of the knob's file
 * and of budgets/seq. The rules are runtime/storage/dev/budget.c's: sizes
 * in plain decimal bytes up to 2^50, permille 0..1000, prefetch depth
 * 0..64, reroute one of the policy names.
 */
#include <linux/capability.h>
#include <linux/kernel.h>
#include <linux/kobject.h>
#include <linux/mutex.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "internal.h"
#include "trace.h"

static DEFINE_MUTEX(moem_budget_lock);
static u64 moem_budget_values[MOEM_BUDGET_NR];
static u64 moem_budget_seq;

static const char *const moem_budget_names[MOEM_BUDGET_NR] = {
	[MOEM_BUDGET_HBM_BYTES] = "hbm_bytes",
	[MOEM_BUDGET_DRAM_BYTES] = "dram_bytes",
	[MOEM_BUDGET_HI_PRECISION_PERMILLE] = "hi_precision_permille",
	[MOEM_BUDGET_PREFETCH_DEPTH] = "prefetch_depth",
	[MOEM_BUDGET_REROUTE] = "reroute",
};

static const char *const moem_reroute_names[MOEM_REROUTE_NR] = {
	[MOEM_REROUTE_NONE] = "none",
	[MOEM_REROUTE_LYNX] = "lynx",
	[MOEM_REROUTE_OEA] = "oea",
	[MOEM_REROUTE_CACHE_AWARE] = "cache-aware",
	[MOEM_REROUTE_PIGGYBACK] = "piggyback",
};

static int moem_budget_validate(u32 knob, u64 v)
{
	switch (knob) {
	case MOEM_BUDGET_HBM_BYTES:
	case MOEM_BUDGET_DRAM_BYTES:
		return v <= MOEM_BUDGET_BYTES_MAX ? 0 : -EINVAL;
	case MOEM_BUDGET_HI_PRECISION_PERMILLE:
		return v <= MOEM_BUDGET_PERMILLE_MAX ? 0 : -EINVAL;
	case MOEM_BUDGET_PREFETCH_DEPTH:
		return v <= MOEM_BUDGET_PREFETCH_MAX ? 0 : -EINVAL;
	case MOEM_BUDGET_REROUTE:
		return v < MOEM_REROUTE_NR ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

int moem_budget_get(u32 knob, u64 *value, u64 *seq)
{
	if (knob >= MOEM_BUDGET_NR)
		return -EINVAL;
	mutex_lock(&moem_budget_lock);
	*value = moem_budget_values[knob];
	*seq = moem_budget_seq;
	mutex_unlock(&moem_budget_lock);
	return 0;
}

int moem_budget_set(u32 knob, u64 value, u64 *seq)
{
	u64 old, s;
	int ret;

	ret = moem_budget_validate(knob, value);
	if (ret)
		return ret;
	mutex_lock(&moem_budget_lock);
	old = moem_budget_values[knob];
	moem_budget_values[knob] = value;
	s = ++moem_budget_seq;
	mutex_unlock(&moem_budget_lock);
	trace_moem_budget_change(moem_budget_names[knob], old, value, s);
	sysfs_notify(moem_kobj, "budgets", moem_budget_names[knob]);
	sysfs_notify(moem_kobj, "budgets", "seq");
	if (seq)
		*seq = s;
	return 0;
}

/* Parse what a user wrote to budgets/<knob> (sysfs.c's rules). */
static int moem_budget_parse(u32 knob, const char *buf, size_t count, u64 *value)
{
	int ret;

	if (knob == MOEM_BUDGET_REROUTE) {
		ret = moem_sysfs_match(moem_reroute_names, ARRAY_SIZE(moem_reroute_names), buf,
				       count);
		if (ret < 0)
			return ret;
		*value = ret;
		return 0;
	}
	return moem_sysfs_parse_u64(buf, count, value);
}

struct moem_budget_attr {
	struct kobj_attribute attr;
	u32 knob;
};

static u32 to_knob(struct kobj_attribute *attr)
{
	return container_of(attr, struct moem_budget_attr, attr)->knob;
}

static ssize_t budget_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u32 knob = to_knob(attr);
	u64 v, seq;

	moem_budget_get(knob, &v, &seq);
	if (knob == MOEM_BUDGET_REROUTE)
		return sysfs_emit(buf, "%s\n", moem_reroute_names[v]);
	return sysfs_emit(buf, "%llu\n", v);
}

static ssize_t budget_store(struct kobject *kobj, struct kobj_attribute *attr, const char *buf,
			    size_t count)
{
	u32 knob = to_knob(attr);
	u64 v;
	int ret;

	/* The ioctl's rule: a root without CAP_SYS_ADMIN writes neither. */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	ret = moem_budget_parse(knob, buf, count, &v);
	if (ret)
		return ret;
	ret = moem_budget_set(knob, v, NULL);
	return ret ? ret : count;
}

#define MOEM_BUDGET_ATTR(_name, _knob)                                  \
	static struct moem_budget_attr budget_##_name##_attr = {        \
		.attr = __ATTR(_name, 0644, budget_show, budget_store), \
		.knob = _knob,                                          \
	}

MOEM_BUDGET_ATTR(hbm_bytes, MOEM_BUDGET_HBM_BYTES);
MOEM_BUDGET_ATTR(dram_bytes, MOEM_BUDGET_DRAM_BYTES);
MOEM_BUDGET_ATTR(hi_precision_permille, MOEM_BUDGET_HI_PRECISION_PERMILLE);
MOEM_BUDGET_ATTR(prefetch_depth, MOEM_BUDGET_PREFETCH_DEPTH);
MOEM_BUDGET_ATTR(reroute, MOEM_BUDGET_REROUTE);

static ssize_t seq_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u64 seq;

	mutex_lock(&moem_budget_lock);
	seq = moem_budget_seq;
	mutex_unlock(&moem_budget_lock);
	return sysfs_emit(buf, "%llu\n", seq);
}

static struct kobj_attribute budget_seq_attr = __ATTR_RO(seq);

static struct attribute *moem_budget_attrs[] = {
	&budget_hbm_bytes_attr.attr.attr,
	&budget_dram_bytes_attr.attr.attr,
	&budget_hi_precision_permille_attr.attr.attr,
	&budget_prefetch_depth_attr.attr.attr,
	&budget_reroute_attr.attr.attr,
	&budget_seq_attr.attr,
	NULL,
};

const struct attribute_group moem_budget_group = {
	.name = "budgets",
	.attrs = moem_budget_attrs,
};
