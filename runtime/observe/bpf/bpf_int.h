/* SPDX-License-Identifier: GPL-2.0-only */
/* Internals of the BPF loaders (bpf.h), shared by runtime/observe/bpf/ only. */
#ifndef MOEM_BPF_INT_H
#define MOEM_BPF_INT_H

#include <stdarg.h>

#include <moem/bpf.h>

/*
 * libbpf prints warnings to stderr by default; a library must not. Route
 * them into a per-thread buffer instead (installed once per process) so
 * that a failed open can say what libbpf saw.
 */
void moem_bpf_quiet_libbpf(void);
/* The last libbpf warning on this thread ("" if none); cleared by reset. */
const char *moem_bpf_libbpf_msg(void);
void moem_bpf_libbpf_msg_reset(void);

/* -errno for a failed load, with the libbpf detail and a privilege hint. */
int moem_bpf_load_error(int err, const char *what);

/* Sum a per-CPU u64 array map's slots [0, n) into out[]. */
int moem_bpf_percpu_sum(int map_fd, unsigned int n, uint64_t *out);

/*
 * Compare root/events/moem/<event>/format with the records the pool
 * program reads (bpf/moem_pool.h): -EPROTO naming the field that differs,
 * -ENOENT for a missing file. root is tracefs's mount point.
 */
int moem_bpf_pool_check_layouts(const char *root);

#endif /* MOEM_BPF_INT_H */
