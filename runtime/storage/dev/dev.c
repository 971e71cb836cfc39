// SPDX-License-Identifier: GPL-2.0-only
/* Checked wrappers over the moem.ko ioctls (dev.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>

static int xioctl(int fd, unsigned long req, void *arg)
{
	int ret;

	do {
		ret = ioctl(fd, req, arg);
	} while (ret < 0 && errno == EINTR);
	return ret < 0 ? -errno : ret;
}

static int check_name(const char *name)
{
	size_t n = name ? strnlen(name, MOEM_NAME_MAX) : 0;

	if (!n)
		return moem_errf(EINVAL, "empty region name");
	if (n >= MOEM_NAME_MAX)
		return moem_errf(ENAMETOOLONG, "region name longer than %d bytes",
				 MOEM_NAME_MAX - 1);
	return 0;
}

int moem_dev_version(int fd, struct moem_version *v)
{
	memset(v, 0, sizeof(*v));
	return xioctl(fd, MOEM_IOC_VERSION, v);
}

int moem_dev_open(const char *path, int *out)
{
	struct moem_version v;
	int fd, ret;

	if (!path)
		path = MOEM_DEV_PATH;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = errno;
		if (ret == ENOENT)
			return moem_errf(ENODEV, "%s: not present (moem.ko not loaded)", path);
		return moem_errf(ret, "%s: %s", path, strerror(ret));
	}
	ret = moem_dev_version(fd, &v);
	if (ret) {
		close(fd);
		return moem_errf(-ret, "%s: VERSION ioctl failed: %s", path, strerror(-ret));
	}
	if ((v.abi_version >> 16) != (MOEM_ABI_VERSION >> 16) ||
	    v.min_lib_version > MOEM_LIB_VERSION) {
		close(fd);
		return moem_errf(
			EPROTO,
			"%s: module ABI %u.%u needs library >= %u.%u; this is %u.%u (ABI %u.x)",
			path, v.abi_version >> 16, v.abi_version & 0xffff, v.min_lib_version >> 16,
			v.min_lib_version & 0xffff, MOEM_LIB_VERSION >> 16,
			MOEM_LIB_VERSION & 0xffff, MOEM_ABI_VERSION >> 16);
	}
	*out = fd;
	return 0;
}

int moem_dev_region_create_on(int fd, const char *name, uint64_t size, uint32_t flags,
			      uint32_t mode, int node, int *region_fd)
{
	struct moem_region_create c;
	char where[32] = "";
	int ret = check_name(name);

	if (ret)
		return ret;
	memset(&c, 0, sizeof(c));
	c.name_ptr = (uintptr_t)name;
	c.size = size;
	c.flags = flags;
	c.mode = mode;
	if (node >= 0) {
		c.flags |= MOEM_REGION_NODE;
		c.node = (uint32_t)node;
		snprintf(where, sizeof(where), " on NUMA node %d", node);
	}
	ret = xioctl(fd, MOEM_IOC_REGION_CREATE, &c);
	if (ret == -ENOMEM && node >= 0)
		return moem_errf(ENOMEM,
				 "create region '%s' (%llu bytes)%s: the node has no free 2 MiB "
				 "pages left for it (or the memory cgroup's limit was reached)",
				 name, (unsigned long long)size, where);
	if (ret)
		return moem_errf(-ret, "create region '%s' (%llu bytes)%s: %s", name,
				 (unsigned long long)size, where, strerror(-ret));
	*region_fd = (int)c.fd;
	return 0;
}

int moem_dev_region_create(int fd, const char *name, uint64_t size, uint32_t flags, uint32_t mode,
			   int *region_fd)
{
	return moem_dev_region_create_on(fd, name, size, flags, mode, -1, region_fd);
}

int moem_dev_region_open(int fd, const char *name, uint32_t flags, int *region_fd)
{
	struct moem_region_open o;
	int ret = check_name(name);

	if (ret)
		return ret;
	memset(&o, 0, sizeof(o));
	o.name_ptr = (uintptr_t)name;
	o.flags = flags;
	ret = xioctl(fd, MOEM_IOC_REGION_OPEN, &o);
	if (ret)
		return moem_errf(-ret, "open region '%s': %s", name, strerror(-ret));
	*region_fd = (int)o.fd;
	return 0;
}

int moem_dev_region_info(int fd, const char *name, struct moem_region_info *info)
{
	int ret = check_name(name);

	if (ret)
		return ret;
	memset(info, 0, sizeof(*info));
	info->name_ptr = (uintptr_t)name;
	ret = xioctl(fd, MOEM_IOC_REGION_INFO, info);
	if (ret)
		return moem_errf(-ret, "region '%s': %s", name, strerror(-ret));
	return 0;
}

int moem_dev_region_fd_info(int region_fd, struct moem_region_info *info, char *name)
{
	int ret;

	memset(info, 0, sizeof(*info));
	info->name_ptr = (uintptr_t)name;
	ret = xioctl(region_fd, MOEM_IOC_REGION_FD_INFO, info);
	if (ret)
		return moem_errf(-ret, "region fd info: %s", strerror(-ret));
	return 0;
}

int moem_dev_region_destroy(int fd, const char *name)
{
	struct moem_region_destroy d;
	int ret = check_name(name);

	if (ret)
		return ret;
	memset(&d, 0, sizeof(d));
	d.name_ptr = (uintptr_t)name;
	ret = xioctl(fd, MOEM_IOC_REGION_DESTROY, &d);
	if (ret)
		return moem_errf(-ret, "destroy region '%s': %s", name, strerror(-ret));
	return 0;
}

void moem_dev_names_free(char **names, uint32_t count)
{
	for (uint32_t i = 0; names && i < count; i++)
		free(names[i]);
	free(names);
}

int moem_dev_region_list(int fd, char ***out, uint32_t *count)
{
	struct moem_region_list l;
	char *buf = NULL, **names = NULL;
	uint32_t len = 0;
	int ret;

	/* The list can grow between the sizing call and the copy: retry. */
	for (int tries = 0; tries < 8; tries++) {
		memset(&l, 0, sizeof(l));
		l.buf_ptr = (uintptr_t)buf;
		l.buf_len = len;
		ret = xioctl(fd, MOEM_IOC_REGION_LIST, &l);
		if (ret) {
			free(buf);
			return moem_errf(-ret, "list regions: %s", strerror(-ret));
		}
		if (l.needed <= len)
			break;
		free(buf);
		len = l.needed + 256;
		buf = malloc(len);
		if (!buf)
			return -ENOMEM;
	}
	if (l.needed > len) {
		free(buf);
		return moem_errf(EAGAIN, "list regions: list keeps changing");
	}
	names = calloc(l.count ? l.count : 1, sizeof(*names));
	if (!names) {
		free(buf);
		return -ENOMEM;
	}
	for (uint32_t i = 0, off = 0; i < l.count; i++) {
		names[i] = strdup(buf + off);
		if (!names[i]) {
			moem_dev_names_free(names, i);
			free(buf);
			return -ENOMEM;
		}
		off += (uint32_t)strlen(buf + off) + 1;
	}
	free(buf);
	*out = names;
	*count = l.count;
	return 0;
}

int moem_dev_pool_stats(int fd, struct moem_pool_stats *st)
{
	int ret;

	memset(st, 0, sizeof(*st));
	ret = xioctl(fd, MOEM_IOC_POOL_STATS, st);
	if (ret)
		return moem_errf(-ret, "pool stats: %s", strerror(-ret));
	return 0;
}

int moem_dev_budget_get(int fd, enum moem_budget_knob knob, uint64_t *value, uint64_t *seq)
{
	struct moem_budget b;
	int ret;

	memset(&b, 0, sizeof(b));
	b.knob = knob;
	ret = xioctl(fd, MOEM_IOC_BUDGET_GET, &b);
	if (ret)
		return moem_errf(-ret, "get budget %s: %s", moem_budget_name(knob), strerror(-ret));
	*value = b.value;
	if (seq)
		*seq = b.seq;
	return 0;
}

int moem_dev_budget_set(int fd, enum moem_budget_knob knob, uint64_t value)
{
	struct moem_budget b;
	int ret = moem_budget_validate(knob, value);

	if (ret)
		return ret;
	memset(&b, 0, sizeof(b));
	b.knob = knob;
	b.value = value;
	ret = xioctl(fd, MOEM_IOC_BUDGET_SET, &b);
	if (ret)
		return moem_errf(-ret, "set budget %s: %s", moem_budget_name(knob), strerror(-ret));
	return 0;
}
