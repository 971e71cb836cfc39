// SPDX-License-Identifier: GPL-2.0-only
/*
 * /sys/kernel/moem: abi_version; pool/ (the numbers POOL_STATS returns, and
 * the per-user quota user_max_bytes); nodes/node<N>/ (the pool's bytes on
 * each NUMA node that had memory at load); budgets/ (budget.c);
 * regions/<name>/ for each named region, added on create and removed on
 * destroy.
 * Documented in Documentation/ABI/testing/sysfs-kernel-moem.
 *
 * Writable files follow one rule, the ioctls' too: the writer needs
 * CAP_SYS_ADMIN (the files are 0644 root, so it is root with that
 * capability), and a value is exactly what was written: plain decimal or
 * a name, at most one trailing newline, nothing after it, no NUL.
 *
 * Region attributes never take moem_lock: kobject_del() runs under it and
 * waits for their readers.
 */
#include <linux/capability.h>
#include <linux/kernel.h>
#include <linux/kobject.h>
#include <linux/nodemask.h>
#include <linux/string.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/uidgid.h>

#include "internal.h"

struct kobject *moem_kobj;
struct kobject *moem_regions_kobj;
static struct kobject *moem_nodes_kobj;
static struct kobject **moem_node_kobjs; /* [nr_node_ids], NULL: no directory */

/* The value part of what was written: count bytes minus one trailing newline. */
static int moem_sysfs_value_len(const char *buf, size_t count, size_t *len)
{
	if (count && buf[count - 1] == '\n')
		count--;
	/* An embedded NUL would end the parse early ("7\0xyz" is not 7). */
	if (!count || memchr(buf, '\0', count) || memchr(buf, '\n', count))
		return -EINVAL;
	*len = count;
	return 0;
}

int moem_sysfs_parse_u64(const char *buf, size_t count, u64 *value)
{
	char tmp[24];
	size_t len, i;
	int ret;

	ret = moem_sysfs_value_len(buf, count, &len);
	if (ret)
		return ret;
	if (len >= sizeof(tmp))
		return -EINVAL;
	/* Plain decimal: kstrtou64 would also take a leading '+'. */
	for (i = 0; i < len; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -EINVAL;
	}
	memcpy(tmp, buf, len);
	tmp[len] = '\0';
	/* One answer for a bad value: -ERANGE (too big) is -EINVAL too. */
	return kstrtou64(tmp, 10, value) ? -EINVAL : 0;
}

int moem_sysfs_match(const char *const *names, size_t n, const char *buf, size_t count)
{
	size_t len, i;
	int ret;

	ret = moem_sysfs_value_len(buf, count, &len);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		if (names[i] && strlen(names[i]) == len && !memcmp(names[i], buf, len))
			return i;
	}
	return -EINVAL;
}

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

	moem_regions_reap_now();
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

static ssize_t pool_user_max_bytes_show(struct kobject *kobj, struct kobj_attribute *attr,
					char *buf)
{
	return sysfs_emit(buf, "%llu\n", moem_user_get_max());
}

/* 0..max_bytes in chunk multiples; 0: users without CAP_SYS_ADMIN get nothing. */
static ssize_t pool_user_max_bytes_store(struct kobject *kobj, struct kobj_attribute *attr,
					 const char *buf, size_t count)
{
	u64 v;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (moem_sysfs_parse_u64(buf, count, &v) || !IS_ALIGNED(v, MOEM_CHUNK_SIZE) ||
	    v > moem_pool_max_bytes())
		return -EINVAL;
	moem_user_set_max(v);
	return count;
}

static struct kobj_attribute pool_user_max_bytes_attr =
	__ATTR(user_max_bytes, 0644, pool_user_max_bytes_show, pool_user_max_bytes_store);

static struct attribute *moem_pool_attrs[] = {
	&pool_total_bytes_attr.attr.attr,
	&pool_free_bytes_attr.attr.attr,
	&pool_max_bytes_attr.attr.attr,
	&pool_chunk_bytes_attr.attr.attr,
	&pool_node_attr.attr,
	&pool_regions_attr.attr,
	&pool_user_max_bytes_attr.attr,
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
/* -1: chunks on several nodes (MOEM_NODE_ANY in the ioctl). */
MOEM_REGION_ATTR(node, "%d", r->nid == MOEM_NODE_ANY ? -1 : (int)r->nid);

static struct attribute *moem_region_attrs[] = {
	&region_size_bytes_attr.attr, &region_owner_uid_attr.attr,
	&region_mode_attr.attr,	      &region_persistent_attr.attr,
	&region_maps_attr.attr,	      &region_files_attr.attr,
	&region_id_attr.attr,	      &region_node_attr.attr,
	NULL,
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

/* nodes/node<N>/: a node's total_bytes and free_bytes. */

struct moem_node_kobj {
	struct kobject kobj;
	int nid;
};

static int to_nid(struct kobject *kobj)
{
	return container_of(kobj, struct moem_node_kobj, kobj)->nid;
}

static ssize_t node_total_bytes_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u64 total, free;

	moem_regions_reap_now();
	moem_pool_node_stats(to_nid(kobj), &total, &free);
	return sysfs_emit(buf, "%llu\n", total);
}

static ssize_t node_free_bytes_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	u64 total, free;

	moem_regions_reap_now();
	moem_pool_node_stats(to_nid(kobj), &total, &free);
	return sysfs_emit(buf, "%llu\n", free);
}

static struct kobj_attribute node_total_bytes_attr =
	__ATTR(total_bytes, 0444, node_total_bytes_show, NULL);
static struct kobj_attribute node_free_bytes_attr =
	__ATTR(free_bytes, 0444, node_free_bytes_show, NULL);

static struct attribute *moem_node_attrs[] = {
	&node_total_bytes_attr.attr,
	&node_free_bytes_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(moem_node);

static void moem_node_kobj_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct moem_node_kobj, kobj));
}

static const struct kobj_type moem_node_ktype = {
	.release = moem_node_kobj_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = moem_node_groups,
};

static void moem_sysfs_nodes_exit(void)
{
	int nid;

	if (!moem_node_kobjs)
		return;
	for (nid = 0; nid < nr_node_ids; nid++)
		kobject_put(moem_node_kobjs[nid]); /* NULL is fine */
	kfree(moem_node_kobjs);
	moem_node_kobjs = NULL;
	kobject_put(moem_nodes_kobj);
}

static int moem_sysfs_nodes_init(void)
{
	struct moem_node_kobj *nk;
	int nid, ret;

	moem_nodes_kobj = kobject_create_and_add("nodes", moem_kobj);
	if (!moem_nodes_kobj)
		return -ENOMEM;
	moem_node_kobjs = kcalloc(nr_node_ids, sizeof(*moem_node_kobjs), GFP_KERNEL);
	if (!moem_node_kobjs) {
		kobject_put(moem_nodes_kobj);
		return -ENOMEM;
	}
	for_each_node_state(nid, N_MEMORY) {
		nk = kzalloc(sizeof(*nk), GFP_KERNEL);
		if (!nk) {
			ret = -ENOMEM;
			goto err_nodes;
		}
		nk->nid = nid;
		ret = kobject_init_and_add(&nk->kobj, &moem_node_ktype, moem_nodes_kobj, "node%d",
					   nid);
		if (ret) {
			kobject_put(&nk->kobj); /* frees nk */
			goto err_nodes;
		}
		moem_node_kobjs[nid] = &nk->kobj;
	}
	return 0;

err_nodes:
	moem_sysfs_nodes_exit();
	return ret;
}

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
	ret = moem_sysfs_nodes_init();
	if (ret)
		goto err_put_regions;
	return 0;

err_put_regions:
	kobject_put(moem_regions_kobj);
err_remove_groups:
	sysfs_remove_groups(moem_kobj, moem_groups);
err_put_moem:
	kobject_put(moem_kobj);
	return ret;
}

void moem_sysfs_exit(void)
{
	moem_sysfs_nodes_exit();
	kobject_put(moem_regions_kobj);
	sysfs_remove_groups(moem_kobj, moem_groups);
	kobject_put(moem_kobj);
}
