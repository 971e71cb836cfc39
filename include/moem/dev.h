/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Thin, checked wrappers over the moem.ko ioctls (include/uapi/linux/moem.h)
 * and the budget knob names shared by sysfs, the ioctl and moemd.
 */
#ifndef MOEM_DEV_H
#define MOEM_DEV_H

#include <stddef.h>
#include <stdint.h>

#include <linux/moem.h>

/* This library's version, checked against the module's at open. */
#define MOEM_LIB_VERSION ((1 << 16) | 4)
#define MOEM_DEV_PATH	 "/dev/moem"
#define MOEM_SYSFS_ROOT	 "/sys/kernel/moem"

/*
 * Open the control device and check the ABI: -ENODEV if absent, -EPROTO
 * if the module's major differs or it requires a newer library.
 */
int moem_dev_open(const char *path, int *fd);
int moem_dev_version(int fd, struct moem_version *v);
int moem_dev_region_create(int fd, const char *name, uint64_t size, uint32_t flags, uint32_t mode,
			   int *region_fd);
/*
 * The same with every chunk on NUMA node node (MOEM_REGION_NODE, ABI 1.4;
 * a 1.3 module refuses it with -EINVAL, so check the version first);
 * node -1: where the module's node= parameter says, as above.
 */
int moem_dev_region_create_on(int fd, const char *name, uint64_t size, uint32_t flags,
			      uint32_t mode, int node, int *region_fd);
int moem_dev_region_open(int fd, const char *name, uint32_t flags, int *region_fd);
int moem_dev_region_info(int fd, const char *name, struct moem_region_info *info);
int moem_dev_region_fd_info(int region_fd, struct moem_region_info *info, char *name);
int moem_dev_region_destroy(int fd, const char *name);
/* Region names as a malloc()ed array of malloc()ed strings; free with
 * moem_dev_names_free(). */
int moem_dev_region_list(int fd, char ***names, uint32_t *count);
void moem_dev_names_free(char **names, uint32_t count);
int moem_dev_pool_stats(int fd, struct moem_pool_stats *st);
int moem_dev_budget_get(int fd, enum moem_budget_knob knob, uint64_t *value, uint64_t *seq);
int moem_dev_budget_set(int fd, enum moem_budget_knob knob, uint64_t value);

/*
 * One knob's row of MOEM_KNOBS() (<linux/moem_knobs.h>, where the columns
 * are described). Every front end (sysfs, the ioctl, moemd's socket and
 * config, moemctl, /metrics) takes names, ranges and units from here.
 */
struct moem_knob_info {
	const char *name;
	enum moem_knob_unit unit;
	uint64_t min, max;
	enum moem_knob_who who;
	enum moem_knob_apply apply;
	/* An ENUM knob's value names, [0..max], NULL-terminated (its
	 * values column); an empty list ({NULL}) for the others. */
	const char *const *values;
};

/* The row of knob, or NULL if knob is not one. */
const struct moem_knob_info *moem_knob_info(enum moem_budget_knob knob);
/* "now", "at the next layer boundary", "before the next decode step". */
const char *moem_knob_apply_text(enum moem_knob_apply a);
/* "bytes", "permille", "layers", "name". */
const char *moem_knob_unit_name(enum moem_knob_unit u);

/* Knob names as sysfs spells them: "hbm_bytes", ..., "cpu_moe_layers". */
const char *moem_budget_name(enum moem_budget_knob knob);
int moem_budget_lookup(const char *name, enum moem_budget_knob *out);
/*
 * The name of an ENUM knob's value v ("hybrid" for exec 1, "lynx" for
 * reroute 1), or "?"; moem_budget_parse() takes the names.
 */
const char *moem_knob_value_name(enum moem_budget_knob knob, uint64_t v);
/*
 * Parse a knob value as a user writes it (sizes may carry K/M/G suffixes,
 * an ENUM knob takes one of its value names) and validate it with the kernel's rules; -EINVAL or
 * -ERANGE with a message otherwise, *value untouched.
 */
int moem_budget_parse(enum moem_budget_knob knob, const char *s, uint64_t *value);
int moem_budget_validate(enum moem_budget_knob knob, uint64_t value);
/* Format a value as sysfs shows it. */
void moem_budget_format(enum moem_budget_knob knob, uint64_t value, char *buf, size_t len);

#endif /* MOEM_DEV_H */
