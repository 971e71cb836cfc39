// SPDX-License-Identifier: GPL-2.0-only
/*
 * /dev/moem: a misc device (mode 0660) whose ioctls implement
 * include/uapi/linux/moem.h. Every struct is copied in whole, every pad
 * and reserved field must be zero, unknown flags and knobs are -EINVAL,
 * unknown ioctl numbers -ENOTTY. Nothing is copied to or from user space
 * under moem_lock.
 */
#include <linux/build_bug.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/file.h>
#include <linux/fcntl.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "internal.h"
#include "trace.h"

/* The ABI is these exact sizes on every architecture (no implicit holes). */
static_assert(sizeof(struct moem_version) == 24);
static_assert(sizeof(struct moem_region_create) == 64);
static_assert(sizeof(struct moem_region_open) == 48);
static_assert(sizeof(struct moem_region_info) == 80);
static_assert(sizeof(struct moem_region_list) == 40);
static_assert(sizeof(struct moem_region_destroy) == 24);
static_assert(sizeof(struct moem_pool_stats) == 72);
static_assert(sizeof(struct moem_budget) == 40);

#define moem_zero(field) mem_is_zero(&(field), sizeof(field))

static long moem_ioc_version(struct moem_version __user *uarg)
{
	struct moem_version v = {
		.abi_version = MOEM_ABI_VERSION,
		.min_lib_version = MOEM_MIN_LIB_VERSION,
	};

	return copy_to_user(uarg, &v, sizeof(v)) ? -EFAULT : 0;
}

/*
 * Hand a region file to user space: reserve an fd, write the struct that
 * carries it, and only then install it, so a failed copy leaves no fd.
 */
static int moem_install_region_fd(struct moem_region *r, bool rdonly, void __user *uarg, void *karg,
				  size_t len, u32 *fd_field)
{
	struct file *file;
	int fd, ret;

	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0)
		return fd;
	file = moem_region_file(r, rdonly);
	if (IS_ERR(file)) {
		ret = PTR_ERR(file);
		goto err_put_fd;
	}
	*fd_field = fd;
	if (copy_to_user(uarg, karg, len)) {
		ret = -EFAULT;
		goto err_fput;
	}
	fd_install(fd, file);
	return 0;

err_fput:
	fput(file);
err_put_fd:
	put_unused_fd(fd);
	return ret;
}

static long moem_ioc_create(struct moem_region_create __user *uarg)
{
	struct moem_region_create c;
	char name[MOEM_NAME_MAX];
	struct moem_region *r;
	int ret;

	if (copy_from_user(&c, uarg, sizeof(c)))
		return -EFAULT;
	if (!moem_zero(c.reserved) || (c.flags & ~MOEM_REGION_FLAGS_ALL) || (c.mode & ~0777U))
		return -EINVAL;
	/* node was a pad before 1.4: without the flag it must still be zero. */
	if ((c.flags & MOEM_REGION_NODE) ? !moem_pool_node_valid(c.node) : c.node)
		return -EINVAL;
	ret = moem_name_from_user(name, c.name_ptr);
	if (ret)
		return ret;
	ret = moem_region_check_size(c.size);
	if (ret)
		return ret;
	/* Fail fast before zeroing chunks; publish decides under the lock. */
	r = moem_region_lookup(name);
	if (!IS_ERR(r)) {
		moem_region_put(r);
		return -EEXIST;
	}
	ret = moem_region_new(name, c.size, c.flags, c.mode, c.node, &r);
	if (ret)
		return ret;
	ret = moem_region_publish(r);
	if (ret)
		goto out_put;
	ret = moem_install_region_fd(r, false, uarg, &c, sizeof(c), &c.fd);
	if (ret)
		moem_region_unpublish(r); /* loses nothing: as if never made */
out_put:
	moem_region_put(r);
	return ret;
}

static long moem_ioc_open(struct moem_region_open __user *uarg)
{
	struct moem_region_open o;
	char name[MOEM_NAME_MAX];
	struct moem_region *r;
	bool rdonly;
	int ret;

	if (copy_from_user(&o, uarg, sizeof(o)))
		return -EFAULT;
	if (!moem_zero(o.reserved) || (o.flags & ~MOEM_OPEN_FLAGS_ALL))
		return -EINVAL;
	ret = moem_name_from_user(name, o.name_ptr);
	if (ret)
		return ret;
	r = moem_region_lookup(name);
	if (IS_ERR(r))
		return PTR_ERR(r);
	rdonly = o.flags & MOEM_OPEN_RDONLY;
	ret = moem_region_may_open(r, o.flags);
	if (ret)
		goto out_put;
	ret = moem_install_region_fd(r, rdonly, uarg, &o, sizeof(o), &o.fd);
	if (!ret)
		trace_moem_region_open(r->name, r->id, o.flags,
				       from_kuid(&init_user_ns, current_euid()));
out_put:
	moem_region_put(r);
	return ret;
}

static long moem_ioc_info(struct moem_region_info __user *uarg)
{
	struct moem_region_info info;
	char name[MOEM_NAME_MAX];
	int ret;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	/* node is output only (ABI 1.4): what it held on input does not matter. */
	if (!moem_zero(info.reserved))
		return -EINVAL;
	ret = moem_name_from_user(name, info.name_ptr);
	if (ret)
		return ret;
	ret = moem_region_info_by_name(name, &info);
	if (ret)
		return ret;
	return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long moem_ioc_list(struct moem_region_list __user *uarg)
{
	struct moem_region_list l;
	char *buf;
	int ret;

	if (copy_from_user(&l, uarg, sizeof(l)))
		return -EFAULT;
	if (l.pad || !moem_zero(l.reserved))
		return -EINVAL;
	ret = moem_region_list(l.buf_len, &buf, &l.count, &l.needed);
	if (ret)
		return ret;
	/* buf is NULL when nothing fits: then only the counts go back. */
	if (buf && copy_to_user(u64_to_user_ptr(l.buf_ptr), buf, l.needed))
		ret = -EFAULT;
	kvfree(buf);
	if (!ret && copy_to_user(uarg, &l, sizeof(l)))
		ret = -EFAULT;
	return ret;
}

static long moem_ioc_destroy(struct moem_region_destroy __user *uarg)
{
	struct moem_region_destroy d;
	char name[MOEM_NAME_MAX];
	int ret;

	if (copy_from_user(&d, uarg, sizeof(d)))
		return -EFAULT;
	if (!moem_zero(d.reserved))
		return -EINVAL;
	ret = moem_name_from_user(name, d.name_ptr);
	if (ret)
		return ret;
	return moem_region_destroy(name);
}

static long moem_ioc_pool_stats(struct moem_pool_stats __user *uarg)
{
	struct moem_pool_stats st;

	memset(&st, 0, sizeof(st));
	moem_regions_reap_now();
	moem_pool_stats(&st);
	st.nr_regions = moem_region_count();
	return copy_to_user(uarg, &st, sizeof(st)) ? -EFAULT : 0;
}

static long moem_ioc_budget(struct moem_budget __user *uarg, bool set)
{
	struct moem_budget b;
	int ret;

	if (copy_from_user(&b, uarg, sizeof(b)))
		return -EFAULT;
	if (b.pad || !moem_zero(b.reserved) || b.knob >= MOEM_BUDGET_NR)
		return -EINVAL;
	if (set) {
		/* As the sysfs files: the table says who writes. */
		if (!moem_budget_may_set(b.knob))
			return -EPERM;
		ret = moem_budget_set(b.knob, b.value, &b.seq);
	} else {
		ret = moem_budget_get(b.knob, &b.value, &b.seq);
	}
	if (ret)
		return ret;
	return copy_to_user(uarg, &b, sizeof(b)) ? -EFAULT : 0;
}

static long moem_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case MOEM_IOC_VERSION:
		return moem_ioc_version(uarg);
	case MOEM_IOC_REGION_CREATE:
		return moem_ioc_create(uarg);
	case MOEM_IOC_REGION_OPEN:
		return moem_ioc_open(uarg);
	case MOEM_IOC_REGION_INFO:
		return moem_ioc_info(uarg);
	case MOEM_IOC_REGION_LIST:
		return moem_ioc_list(uarg);
	case MOEM_IOC_REGION_DESTROY:
		return moem_ioc_destroy(uarg);
	case MOEM_IOC_POOL_STATS:
		return moem_ioc_pool_stats(uarg);
	case MOEM_IOC_BUDGET_GET:
		return moem_ioc_budget(uarg, false);
	case MOEM_IOC_BUDGET_SET:
		return moem_ioc_budget(uarg, true);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations moem_ctl_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = moem_ctl_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice moem_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "moem",
	.fops = &moem_ctl_fops,
	.mode = 0660,
};

int moem_chardev_init(void)
{
	return misc_register(&moem_misc);
}

void moem_chardev_exit(void)
{
	misc_deregister(&moem_misc);
}
