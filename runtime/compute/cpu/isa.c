// SPDX-License-Identifier: GPL-2.0-only
/*
 * Which instruction set the CPU backend's kernels may use (backend.h
 * enum moem_cpu_isa): CPUID for what the processor has, XGETBV for what
 * the operating system saves on a context switch (a CPU with AVX-512
 * under a kernel that does not save ZMM state must not use it), and
 * $MOEM_CPU_ISA as the override that makes every path testable.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <moem/backend.h>
#include <moem/error.h>

#include "cpu_int.h"

static const char *const isa_names[MOEM_CPU_ISA_NR] = {"auto", "scalar", "avx2", "avx512", "amx"};

const char *moem_cpu_isa_name(enum moem_cpu_isa isa)
{
	return (unsigned int)isa < MOEM_CPU_ISA_NR ? isa_names[isa] : "?";
}

int moem_cpu_isa_parse(const char *s, enum moem_cpu_isa *out)
{
	for (int i = 0; i < MOEM_CPU_ISA_NR; i++)
		if (s && !strcmp(s, isa_names[i])) {
			*out = (enum moem_cpu_isa)i;
			return 0;
		}
	return moem_errf(EINVAL, "CPU ISA '%s': expected auto, scalar, avx2, avx512 or amx",
			 s ? s : "");
}

void moem_cpu_features(struct moem_cpu_feat *f)
{
	memset(f, 0, sizeof(*f));
#if defined(__x86_64__)
	{
		unsigned int a, b, c, d, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
		unsigned long long xcr0 = 0;

		if (!__get_cpuid(1, &a, &b, &c, &d))
			return;
		if (c & (1u << 27)) { /* OSXSAVE: XGETBV is allowed */
			unsigned int lo, hi;

			__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
			xcr0 = ((unsigned long long)hi << 32) | lo;
		}
		f->os_avx = (xcr0 & 0x6) == 0x6;
		f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;
		f->os_amx = (xcr0 & 0x60000) == 0x60000;
		f->fma = !!(c & (1u << 12));
		f->avx = !!(c & (1u << 28));
		f->f16c = !!(c & (1u << 29));
		if (__get_cpuid_max(0, NULL) >= 7) {
			__cpuid_count(7, 0, a, b, c, d);
			__cpuid_count(7, 1, a1, b1, c1, d1);
			f->avx2 = !!(b & (1u << 5));
			f->avx512f = !!(b & (1u << 16));
			f->avx512bw = !!(b & (1u << 30));
			f->avx512vl = !!(b & (1u << 31));
			f->avx512vnni = !!(c & (1u << 11));
			f->gfni = !!(c & (1u << 8));
			f->avx512bf16 = !!(a1 & (1u << 5));
			f->amx_tile = !!(d & (1u << 24));
			f->amx_bf16 = !!(d & (1u << 22));
			f->amx_int8 = !!(d & (1u << 25));
		}
	}
#endif
}

/* Append the names of what isa needs and f lacks to buf; true if nothing is missing. */
static bool isa_missing(const struct moem_cpu_feat *f, enum moem_cpu_isa isa, char *buf, size_t len)
{
	struct {
		bool have;
		const char *name;
	} need[] = {
		{f->avx && f->os_avx, "avx (with OS support)"},
		{f->avx2, "avx2"},
		{f->fma, "fma"},
		{f->f16c, "f16c"},
		{f->avx512f && f->os_avx512, "avx512f (with OS support)"},
		{f->avx512bw, "avx512bw"},
		{f->avx512vl, "avx512vl"},
		{f->avx512bf16, "avx512bf16"},
		{f->avx512vnni, "avx512vnni"},
		{f->amx_tile && f->os_amx, "amx-tile (with OS support)"},
		{f->amx_bf16, "amx-bf16"},
		{f->amx_int8, "amx-int8"},
		{f->gfni, "gfni"},
	};
	unsigned int n = isa == MOEM_CPU_ISA_AVX2     ? 4
			 : isa == MOEM_CPU_ISA_AVX512 ? 9
			 : isa == MOEM_CPU_ISA_AMX    ? 13
						      : 0;
	size_t used = 0;

	buf[0] = 0;
	for (unsigned int i = 0; i < n; i++)
		if (!need[i].have && used + 1 < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
						 need[i].name);
	return !buf[0];
}

/* What f has, for messages: "avx2 fma f16c". */
static void isa_have(const struct moem_cpu_feat *f, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
		 f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "",
		 f->avx512bw ? "avx512bw " : "", f->avx512vl ? "avx512vl " : "",
		 f->avx512bf16 ? "avx512bf16 " : "", f->avx512vnni ? "avx512vnni " : "",
		 f->gfni ? "gfni " : "", f->amx_tile ? "amx " : "");
	if (!buf[0])
		snprintf(buf, len, "none of avx2, fma, avx512");
	else
		buf[strlen(buf) - 1] = 0;
}

/*
 * Linux hands out the AMX tile data state (8 KB of XSAVE area per
 * thread) only on request: arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), once per process, before any tile instruction;
 * threads made later have it. Asked once, the answer kept: 0 or the
 * errno (negative).
 */
static int amx_permit(void)
{
#if defined(__x86_64__)
	static atomic_int res = 1; /* 1: not asked yet */
	int r = atomic_load(&res);

	if (r == 1) {
		r = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
			    18 /* XFEATURE_XTILEDATA */)
			    ? -errno
			    : 0;
		atomic_store(&res, r);
	}
	return r;
#else
	return -ENOTSUP;
#endif
}

int moem_cpu_isa_check(enum moem_cpu_isa isa)
{
	struct moem_cpu_feat f;
	char miss[160], have[160];

	if ((unsigned int)isa >= MOEM_CPU_ISA_NR)
		return moem_errf(EINVAL, "CPU ISA %d is not one of moem's", (int)isa);
	if (isa == MOEM_CPU_ISA_AUTO || isa == MOEM_CPU_ISA_SCALAR)
		return 0;
#if !defined(__x86_64__)
	return moem_errf(ENOTSUP, "CPU ISA %s: only on x86-64", moem_cpu_isa_name(isa));
#else
	moem_cpu_features(&f);
	if (isa_missing(&f, isa, miss, sizeof(miss))) {
		int r = isa == MOEM_CPU_ISA_AMX ? amx_permit() : 0;

		if (r)
			return moem_errf(
				ENOTSUP,
				"CPU ISA amx: the kernel does not grant the AMX tile state "
				"(arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
				strerror(-r));
		return 0;
	}
	isa_have(&f, have, sizeof(have));
	return moem_errf(ENOTSUP, "CPU ISA %s: this CPU lacks %s (it has %s)",
			 moem_cpu_isa_name(isa), miss, have);
#endif
}

enum moem_cpu_isa moem_cpu_isa_best(void)
{
	struct moem_cpu_feat f;
	char miss[160];

	/*
	 * amx where the CPU has it and the kernel grants the tile state: its
	 * bf16 kernel, with the B tiles laid out once per FFN stage, was as
	 * fast as avx512's at batch 1 and 2x (4 tokens) to 5x (64) faster on
	 * the Xeon it was measured on (backends.md); its q8/q4/q2
	 * (kern_amx_q.c) about level with avx512's at batch 1 on 2 threads
	 * (5-15% behind on one) and 2-3x faster from 16 tokens, with bits of
	 * their own (a calibration made on avx512 is redone).
	 */
	moem_cpu_features(&f);
	if (isa_missing(&f, MOEM_CPU_ISA_AMX, miss, sizeof(miss)) && amx_permit() == 0)
		return MOEM_CPU_ISA_AMX;
	if (isa_missing(&f, MOEM_CPU_ISA_AVX512, miss, sizeof(miss)))
		return MOEM_CPU_ISA_AVX512;
	if (isa_missing(&f, MOEM_CPU_ISA_AVX2, miss, sizeof(miss)))
		return MOEM_CPU_ISA_AVX2;
	return MOEM_CPU_ISA_SCALAR;
}

int moem_cpu_isa_resolve(enum moem_cpu_isa want, enum moem_cpu_isa *out)
{
	const char *env = getenv("MOEM_CPU_ISA");
	int ret;

	if (want == MOEM_CPU_ISA_AUTO && env && env[0]) {
		ret = moem_cpu_isa_parse(env, &want);
		if (!ret)
			ret = moem_cpu_isa_check(want);
		if (ret)
			return moem_err_prefix(-ret, "MOEM_CPU_ISA=%s", env);
	}
	ret = moem_cpu_isa_check(want);
	if (ret)
		return ret;
	*out = want == MOEM_CPU_ISA_AUTO ? moem_cpu_isa_best() : want;
	return 0;
}

uint32_t moem_cpu_count(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	n = CPU_COUNT(&set);
	return n > 0 ? (uint32_t)n : 1;
}
