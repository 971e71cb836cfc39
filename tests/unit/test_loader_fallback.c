// SPDX-License-Identifier: GPL-2.0-only
/*
 * The loader when the kernel says no: io_uring refused (a seccomp filter
 * in this test's process answers io_uring_setup with EPERM or ENOSYS, as
 * container runtimes and kernel.io_uring_disabled do) falls back to the
 * pread pool, and fixed-buffer registration refused (RLIMIT_MEMLOCK
 * without CAP_IPC_LOCK) falls back to plain reads; the stats say so and
 * every byte still arrives. The harness forks each test, so the filter
 * and the dropped capability end with it.
 */
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "test_loader_lib.h"

#include "kselftest_harness.h"

#define SEED	  0x66616c6cULL
#define FILE_SIZE (4 * MOEM_MiB)

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

/* Make io_uring_setup fail with err in this process; false if unsupported. */
static bool deny_io_uring(int err)
{
#ifdef NATIVE_ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO | ((unsigned int)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = MOEM_ARRAY_SIZE(f), .filter = f};

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
	return false;
#endif
}

/* Read the whole file through ld into dst and check it. */
static void read_all(struct __test_metadata *_metadata, struct moem_loader *ld, uint32_t idx,
		     uint8_t *dst)
{
	struct tl_done d = TL_DONE_INIT;

	memset(dst, 0, FILE_SIZE);
	ASSERT_EQ(0, moem_loader_read(ld, idx, 0, FILE_SIZE, dst, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	ASSERT_EQ(1, d.ok) TH_LOG("%s", d.msg);
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, FILE_SIZE));
}

FIXTURE(refused){};

FIXTURE_VARIANT(refused)
{
	int err;
	const char *says;
};

FIXTURE_VARIANT_ADD(refused, eperm){
	.err = EPERM,
	.says = "Operation not permitted",
};

FIXTURE_VARIANT_ADD(refused, enosys){
	.err = ENOSYS,
	.says = "kernel built without io_uring",
};

FIXTURE_SETUP(refused)
{
}

FIXTURE_TEARDOWN(refused)
{
}

TEST_F(refused, auto_falls_back_to_pread)
{
	struct moem_loader_opts lo = {.mode = MOEM_LOADER_AUTO, .threads = 4};
	struct moem_loader_stats st;
	struct moem_loader *ld;
	char path[256], buf[2048];
	uint8_t *dst;
	uint32_t idx;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	if (!deny_io_uring(variant->err)) {
		unlink(path);
		SKIP(return, "cannot install a seccomp filter here");
	}
	/* Asked for by name, io_uring's refusal is the error. */
	lo.mode = MOEM_LOADER_URING;
	EXPECT_EQ(-variant->err, moem_loader_create(&lo, &ld));
	EXPECT_NE(NULL, strstr(moem_last_error(), "io_uring_queue_init"));
	EXPECT_NE(NULL, strstr(moem_last_error(), variant->says)) TH_LOG("%s", moem_last_error());

	lo.mode = MOEM_LOADER_AUTO;
	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	dst = aligned_alloc(4096, FILE_SIZE);
	ASSERT_NE(NULL, dst);
	ASSERT_EQ(0, moem_loader_register_memory(ld, dst, FILE_SIZE));
	read_all(_metadata, ld, idx, dst);
	moem_loader_get_stats(ld, &st);
	TH_LOG("%s", moem_loader_format_stats(&st, buf, sizeof(buf)));
	EXPECT_EQ(MOEM_LOADER_ENGINE_PREAD, st.engine);
	EXPECT_NE(NULL, strstr(st.path, "pread x4 threads")) TH_LOG("%s", st.path);
	EXPECT_NE(NULL, strstr(st.why, "io_uring unavailable")) TH_LOG("%s", st.why);
	EXPECT_NE(NULL, strstr(st.why, variant->says)) TH_LOG("%s", st.why);
	EXPECT_FALSE(st.fixed_buffers);
	EXPECT_FALSE(st.registered_files);
	EXPECT_EQ(FILE_SIZE, st.bytes);
	moem_loader_destroy(ld);
	free(dst);
}

/* Drop CAP_IPC_LOCK so io_uring accounts pinned buffers against RLIMIT_MEMLOCK. */
static bool drop_ipc_lock(rlim_t limit)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct c[2];
	struct rlimit rl = {limit, limit};

	if (syscall(SYS_capget, &h, c) < 0)
		return false;
	c[CAP_IPC_LOCK / 32].effective &= ~(1U << (CAP_IPC_LOCK % 32));
	c[CAP_IPC_LOCK / 32].permitted &= ~(1U << (CAP_IPC_LOCK % 32));
	c[CAP_IPC_LOCK / 32].inheritable &= ~(1U << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &h, c) == 0 && setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
}

TEST(fixed_buffers_refused)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP, .size = FILE_SIZE};
	struct moem_loader_opts lo = {.mode = MOEM_LOADER_URING};
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	struct moem_loader *ld;
	struct moem_pool *pool;
	char path[256], buf[2048];
	uint8_t *small;
	uint32_t idx;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	/* The pool is locked while the capability is still there; 32 KiB of
	 * small pages fits the limit set next, the 4 MiB pool does not. */
	ASSERT_EQ(0, moem_pool_open(&po, &pool));
	small = mmap(NULL, 32768, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, small);
	madvise(small, 32768, MADV_NOHUGEPAGE);
	if (!drop_ipc_lock(256 * 1024)) {
		unlink(path);
		SKIP(return, "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK");
	}
	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, small, 32768)) TH_LOG("%s", moem_last_error());
	moem_loader_get_stats(ld, &st);
	ASSERT_TRUE(st.fixed_buffers) TH_LOG("%s", st.why);
	/* Refused, yet not an error: the first region stays registered. */
	ASSERT_EQ(0, moem_loader_register_memory(ld, moem_pool_base(pool), FILE_SIZE));
	moem_loader_get_stats(ld, &st);
	EXPECT_TRUE(st.fixed_buffers);
	EXPECT_EQ(1, st.fixed_pieces);
	EXPECT_EQ(32768, st.fixed_bytes);
	EXPECT_NE(NULL, strstr(st.why, "fixed buffers refused")) TH_LOG("%s", st.why);
	EXPECT_NE(NULL, strstr(st.why, "RLIMIT_MEMLOCK")) TH_LOG("%s", st.why);

	read_all(_metadata, ld, idx, moem_pool_base(pool));
	ASSERT_EQ(0, moem_loader_read(ld, idx, 8192, 32768, small, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(1, d.ok);
	EXPECT_EQ(-1, tl_check(SEED, small, 8192, 32768));
	moem_loader_get_stats(ld, &st);
	TH_LOG("%s", moem_loader_format_stats(&st, buf, sizeof(buf)));
	EXPECT_EQ(4 + 1, st.requests);
	EXPECT_EQ(1, st.fixed_requests); /* only the read into the small region */
	EXPECT_STREQ("io_uring + fixed buffers + registered file, O_DIRECT", st.path);
	moem_loader_destroy(ld);
	munmap(small, 32768);
	moem_pool_close(pool);
}

TEST(fixed_buffers_off)
{
	struct moem_loader_opts lo = {
		.mode = MOEM_LOADER_URING, .no_fixed_buffers = true, .no_registered_files = true};
	struct moem_loader_stats st;
	struct moem_loader *ld;
	char path[256];
	uint8_t *dst;
	uint32_t idx;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	ASSERT_EQ(0, moem_loader_create(&lo, &ld));
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	dst = aligned_alloc(4096, FILE_SIZE);
	ASSERT_NE(NULL, dst);
	ASSERT_EQ(0, moem_loader_register_memory(ld, dst, FILE_SIZE));
	read_all(_metadata, ld, idx, dst);
	moem_loader_get_stats(ld, &st);
	EXPECT_FALSE(st.fixed_buffers);
	EXPECT_FALSE(st.registered_files);
	EXPECT_EQ(0, st.fixed_requests);
	EXPECT_NE(NULL, strstr(st.why, "no_fixed_buffers")) TH_LOG("%s", st.why);
	EXPECT_NE(NULL, strstr(st.why, "no_registered_files")) TH_LOG("%s", st.why);
	moem_loader_destroy(ld);
	free(dst);
}

TEST_HARNESS_MAIN
