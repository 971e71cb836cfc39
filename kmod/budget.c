// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budget knobs: values the kernel stores and validates for moemd, which
 * applies them. Written through /sys/kernel/moem/budgets/<knob> (0644) or
 * MOEM_IOC_BUDGET_SET, both needing CAP_SYS_ADMIN; every accepted write
 * bumps a global sequence number and wakes poll()ers of the knob's file
 * and of budgets/seq. Names, ranges and files all come from MOEM_KNOBS()
 * (<linux/moem_knobs.h>), the table libmoem reads too.
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

struct moem_knob_def {
	const char *name;
	u64 min, max;
	u32 unit; /* enum moem_knob_unit */
	u32 who;  /* enum moem_knob_who */
	/* An ENUM knob's value names, [0..max], NULL-terminated. */
	const char *const *values;
};

#define MOEM_VALUE_NAME_(id, nm, nr) \
	[nr] = nm,
#define MOEM_KNOB_DEF_(id, nm, nr, u, lo, hi, w, a, vals)			\
	[nr] = { .name = #nm, .min = lo, .max = hi, .unit = MOEM_KNOB_UNIT_##u,	\
		 .who = MOEM_KNOB_WHO_##w,					\
		 .values = (const char *const[]){ vals(MOEM_VALUE_NAME_) NULL } },
static const struct moem_knob_def moem_knobs[MOEM_BUDGET_NR] = {
	MOEM_KNOBS(MOEM_KNOB_DEF_)
};

static int moem_budget_validate(u32 knob, u64 v)
{
	if (knob >= MOEM_BUDGET_NR)
		return -EINVAL;
	return v >= moem_knobs[knob].min && v <= moem_knobs[knob].max ? 0 : -EINVAL;
}

bool moem_budget_may_set(u32 knob)
{
	if (knob >= MOEM_BUDGET_NR)
		return false;
	switch (moem_knobs[knob].who) {
	case MOEM_KNOB_WHO_ADMIN:
		return capable(CAP_SYS_ADMIN);
	default:
		return false;
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
	trace_moem_budget_change(moem_knobs[knob].name, old, value, s);
	sysfs_notify(moem_kobj, "budgets", moem_knobs[knob].name);
	sysfs_notify(moem_kobj, "budgets", "seq");
	if (seq)
		*seq = s;
	return 0;
}

/* Parse what a user wrote to budgets/<knob> (sysfs.c's rules). */
static int moem_budget_parse(u32 knob, const char *buf, size_t count, u64 *value)
{
	int ret;

	if (moem_knobs[knob].unit == MOEM_KNOB_UNIT_ENUM) {
		ret = moem_sysfs_match(moem_knobs[knob].values, moem_knobs[knob].max + 1, buf,
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
	if (moem_knobs[knob].unit == MOEM_KNOB_UNIT_ENUM)
		return sysfs_emit(buf, "%s\n", moem_knobs[knob].values[v]);
	return sysfs_emit(buf, "%llu\n", v);
}

static ssize_t budget_store(struct kobject *kobj, struct kobj_attribute *attr, const char *buf,
			    size_t count)
{
	u32 knob = to_knob(attr);
	u64 v;
	int ret;

	/* The ioctl's rule: a root without CAP_SYS_ADMIN writes neither. */
	if (!moem_budget_may_set(knob))
		return -EPERM;
	ret = moem_budget_parse(knob, buf, count, &v);
	if (ret)
		return ret;
	ret = moem_budget_set(knob, v, NULL);
	return ret ? ret : count;
}

/* One file per knob, named as the table says. */
#define MOEM_KNOB_ATTR_(id, nm, nr, u, lo, hi, w, a, vals)		\
	[nr] = {							\
		.attr = __ATTR(nm, 0644, budget_show, budget_store),	\
		.knob = nr,						\
	},
static struct moem_budget_attr moem_budget_knob_attrs[MOEM_BUDGET_NR] = {
	MOEM_KNOBS(MOEM_KNOB_ATTR_)
};

static ssize_t seq_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u64 seq;

	mutex_lock(&moem_budget_lock);
	seq = moem_budget_seq;
	mutex_unlock(&moem_budget_lock);
	return sysfs_emit(buf, "%llu\n", seq);
}

static struct kobj_attribute budget_seq_attr = __ATTR_RO(seq);

#define MOEM_KNOB_ATTR_PTR_(id, nm, nr, ...) \
	[nr] = &moem_budget_knob_attrs[nr].attr.attr,
static struct attribute *moem_budget_attrs[MOEM_BUDGET_NR + 2] = {
	MOEM_KNOBS(MOEM_KNOB_ATTR_PTR_)
	[MOEM_BUDGET_NR] = &budget_seq_attr.attr,
	[MOEM_BUDGET_NR + 1] = NULL,
};

const struct attribute_group moem_budget_group = {
	.name = "budgets",
	.attrs = moem_budget_attrs,
};
