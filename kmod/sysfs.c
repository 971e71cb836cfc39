// SPDX-License-Identifier: GPL-2.0-only
/*
 * /sys/kernel/moem: abi_version; pool/ (the numbers POOL_STATS returns);
 * budgets/ (budget.c); regions/<name>/ for each named region, added on
 * create and removed on destroy. Documented in
 * Documentation/ABI/testing/sysfs-kernel-moem.
 *
 * Region attributes never take moem_lock: kobject_del() runs under it and
 * waits for their readers.
 */
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/uidgid.h>

#include "internal.h"

struct kobject *moem_kobj;
struct kobject *moem_regions_kobj;

static ssize_t abi_version_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u.%u\n", MOEM_ABI_MAJOR, MOEM_ABI_MINOR);
}

static struct kobj_attribute abi_version_attr = __ATTR_RO(abi_version);

static struct attribute *moem_top_attrs[] = {
	&abi_version_attr.attr,
	NULL,
};

static const struct attribute_group moem_top_group = {
	.attrs = moem_top_attrs,
};

/* pool/: the u64 fields of struct moem_pool_stats, by offset. */

struct moem_pool_attr {
	struct kobj_attribute attr;
	size_t offset;
};

static ssize_t pool_u64_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	size_t offset = container_of(attr, struct moem_pool_attr, attr)->offset;
	struct moem_pool_stats st;

	moem_pool_stats(&st);
	return sysfs_emit(buf, "%llu\n", *(u64 *)((char *)&st + offset));
}

static struct moem_pool_attr pool_total_bytes_attr = {
	.attr = __ATTR(total_bytes, 0444, pool_u64_show, NULL),
	.offset = offsetof(struct moem_pool_stats, total_bytes),
};

static struct moem_pool_attr pool_free_bytes_attr = {
	.attr = __ATTR(free_bytes, 0444, pool_u64_show, NULL),
	.offset = offsetof(struct moem_pool_stats, free_bytes),
};

static struct moem_pool_attr pool_max_bytes_attr = {
	.attr = __ATTR(max_bytes, 0444, pool_u64_show, NULL),
	.offset = offsetof(struct moem_pool_stats, max_bytes),
};

static struct moem_pool_attr pool_chunk_bytes_attr = {
	.attr = __ATTR(chunk_bytes, 0444, pool_u64_show, NULL),
	.offset = offsetof(struct moem_pool_stats, chunk_bytes),
};

static ssize_t pool_node_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct moem_pool_stats st;

	moem_pool_stats(&st);
	return sysfs_emit(buf, "%d\n", (int)st.node);
}

static struct kobj_attribute pool_node_attr = __ATTR(node, 0444, pool_node_show, NULL);

static ssize_t pool_regions_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", moem_region_count());
}

static struct kobj_attribute pool_regions_attr = __ATTR(regions, 0444, pool_regions_show, NULL);

static struct attribute *moem_pool_attrs[] = {
	&pool_total_bytes_attr.attr.attr,
	&pool_free_bytes_attr.attr.attr,
	&pool_max_bytes_attr.attr.attr,
	&pool_chunk_bytes_attr.attr.attr,
	&pool_node_attr.attr,
	&pool_regions_attr.attr,
	NULL,
};

static const struct attribute_group moem_pool_group = {
	.name = "pool",
	.attrs = moem_pool_attrs,
};

static const struct attribute_group *moem_groups[] = {
	&moem_top_group,
	&moem_pool_group,
	&moem_budget_group,
	NULL,
};

/* regions/<name>/ */

static struct moem_region *to_region(struct kobject *kobj)
{
	return container_of(kobj, struct moem_region, kobj);
}

/* _expr may use r, the region whose directory is read. */
#define MOEM_REGION_ATTR(_name, _fmt, _expr)                                                    \
	static ssize_t region_##_name##_show(struct kobject *kobj, struct kobj_attribute *attr, \
					     char *buf)                                         \
	{                                                                                       \
		const struct moem_region *r = to_region(kobj);                                  \
		return sysfs_emit(buf, _fmt "\n", _expr);                                       \
	}                                                                                       \
	static struct kobj_attribute region_##_name##_attr =                                    \
		__ATTR(_name, 0444, region_##_name##_show, NULL)

MOEM_REGION_ATTR(size_bytes, "%llu", r->size);
MOEM_REGION_ATTR(owner_uid, "%u", from_kuid_munged(&init_user_ns, r->owner));
MOEM_REGION_ATTR(mode, "0%03o", r->mode);
MOEM_REGION_ATTR(persistent, "%d", !!(r->flags & MOEM_REGION_PERSISTENT));
MOEM_REGION_ATTR(maps, "%d", atomic_read(&r->nr_maps));
MOEM_REGION_ATTR(files, "%d", atomic_read(&r->nr_files));
MOEM_REGION_ATTR(id, "%llu", r->id);

static struct attribute *moem_region_attrs[] = {
	&region_size_bytes_attr.attr, &region_owner_uid_attr.attr,
	&region_mode_attr.attr,	      &region_persistent_attr.attr,
	&region_maps_attr.attr,	      &region_files_attr.attr,
	&region_id_attr.attr,	      NULL,
};
ATTRIBUTE_GROUPS(moem_region);

static void moem_region_kobj_release(struct kobject *kobj)
{
	kfree(to_region(kobj));
}

const struct kobj_type moem_region_ktype = {
	.release = moem_region_kobj_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = moem_region_groups,
};

int moem_sysfs_init(void)
{
	int ret;

	moem_kobj = kobject_create_and_add("moem", kernel_kobj);
	if (!moem_kobj)
		return -ENOMEM;
	ret = sysfs_create_groups(moem_kobj, moem_groups);
	if (ret)
		goto err_put_moem;
	moem_regions_kobj = kobject_create_and_add("regions", moem_kobj);
	if (!moem_regions_kobj) {
		ret = -ENOMEM;
		goto err_remove_groups;
	}
	return 0;

err_remove_groups:
	sysfs_remove_groups(moem_kobj, moem_groups);
err_put_moem:
	kobject_put(moem_kobj);
	return ret;
}

void moem_sysfs_exit(void)
{
	kobject_put(moem_regions_kobj);
	sysfs_remove_groups(moem_kobj, moem_groups);
	kobject_put(moem_kobj);
}
