// SPDX-License-Identifier: GPL-2.0-only
/*
 * The loader's errors and their messages: reads past the end of file on
 * every engine, bad file indexes, unaligned O_DIRECT reads, bad options
 * and arguments, memory registration refused while busy, and destroy with
 * reads outstanding (every callback exactly once).
 */
#include <sys/stat.h>

#include "test_loader_lib.h"

#include "kselftest_harness.h"

#define SEED	  0x6572726f72ULL
/* Not a multiple of any block: the last block is partial. */
#define FILE_SIZE (4 * MOEM_MiB + 100)

FIXTURE(eng)
{
	char path[256];
	struct moem_loader *ld;
	uint32_t idx;
	uint8_t *buf;
};

FIXTURE_VARIANT(eng)
{
	enum moem_loader_mode mode;
};

FIXTURE_VARIANT_ADD(eng, uring){
	.mode = MOEM_LOADER_URING,
};

FIXTURE_VARIANT_ADD(eng, pread){
	.mode = MOEM_LOADER_PREAD,
};

FIXTURE_VARIANT_ADD(eng, buffered){
	.mode = MOEM_LOADER_BUFFERED,
};

FIXTURE_SETUP(eng)
{
	/* One pread thread: a callback that blocks holds the whole engine,
	 * as it does the io_uring thread, so the destroy tests are exact. */
	struct moem_loader_opts lo = {.mode = variant->mode, .req_size = 64 * 1024, .threads = 1};

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, self->path, sizeof(self->path)));
	ASSERT_EQ(0, moem_loader_create(&lo, &self->ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(self->ld, self->path, &self->idx));
	self->buf = aligned_alloc(4096, 8 * MOEM_MiB);
	ASSERT_NE(NULL, self->buf);
}

FIXTURE_TEARDOWN(eng)
{
	moem_loader_destroy(self->ld);
	free(self->buf);
}

TEST_F(eng, read_past_eof)
{
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	char want[64];

	/* Straddling the end: the bytes before it arrive, the read fails. */
	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 4 * MOEM_MiB - 8192, 3 * 4096, self->buf,
				      tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(self->ld));
	ASSERT_EQ(1, d.calls);
	EXPECT_EQ(-EIO, d.last_err);
	EXPECT_NE(NULL, strstr(d.msg, self->path)) TH_LOG("%s", d.msg);
	EXPECT_NE(NULL, strstr(d.msg, "short read")) TH_LOG("%s", d.msg);
	snprintf(want, sizeof(want), "end of file at %llu", (unsigned long long)FILE_SIZE);
	EXPECT_NE(NULL, strstr(d.msg, want)) TH_LOG("%s", d.msg);
	EXPECT_EQ(-1, tl_check(SEED, self->buf, 4 * MOEM_MiB - 8192, 8192 + 100));

	/* Wholly past the end; and a long read whose later requests fail
	 * while earlier ones succeed. */
	ASSERT_EQ(0,
		  moem_loader_read(self->ld, self->idx, 8 * MOEM_MiB, 4096, self->buf, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 8 * MOEM_MiB, self->buf, tl_cb, &d));
	/* A good read after them still completes. */
	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 4096, self->buf + 4096, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(self->ld));
	EXPECT_EQ(4, d.calls);
	EXPECT_EQ(3, d.eio);
	EXPECT_EQ(1, d.ok);
	EXPECT_NE(NULL, strstr(d.msg, "offset")) TH_LOG("%s", d.msg);
	moem_loader_get_stats(self->ld, &st);
	EXPECT_EQ(3, st.errors);
	EXPECT_NE(NULL, strstr(st.last_error, "short read")) TH_LOG("%s", st.last_error);
}

TEST_F(eng, bad_index_and_arguments)
{
	struct tl_done d = TL_DONE_INIT;

	EXPECT_EQ(-EBADF, moem_loader_read(self->ld, 5, 0, 4096, self->buf, tl_cb, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "file index 5 was not added (1 file)"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL, moem_loader_read(self->ld, self->idx, 0, 0, self->buf, tl_cb, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "read of 0 bytes"));
	EXPECT_EQ(-EINVAL, moem_loader_read(self->ld, self->idx, 0, 4096, NULL, tl_cb, &d));
	EXPECT_EQ(-EOVERFLOW, moem_loader_read(self->ld, self->idx, UINT64_MAX - 4095, 8192,
					       self->buf, tl_cb, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "wraps"));
	EXPECT_EQ(-EOVERFLOW, moem_loader_read(self->ld, self->idx, 0, 8192,
					       (void *)(UINTPTR_MAX - 4095), tl_cb, &d));
	EXPECT_EQ(0, d.calls); /* refused reads never call back */
}

TEST_F(eng, unaligned_direct_read)
{
	struct moem_loader_file_info fi;
	struct tl_done d = TL_DONE_INIT;

	ASSERT_EQ(0, moem_loader_file_info(self->ld, self->idx, &fi));
	if (!fi.direct) {
		/* Buffered: any range reads. */
		ASSERT_EQ(0,
			  moem_loader_read(self->ld, self->idx, 3, 1000, self->buf + 1, tl_cb, &d));
		ASSERT_EQ(0, moem_loader_drain(self->ld));
		EXPECT_EQ(1, d.ok);
		EXPECT_EQ(-1, tl_check(SEED, self->buf + 1, 3, 1000));
		return;
	}
	TH_LOG("O_DIRECT alignment: offset %u, memory %u", fi.off_align, fi.mem_align);
	EXPECT_EQ(-EINVAL, moem_loader_read(self->ld, self->idx, fi.off_align / 2, 4096, self->buf,
					    tl_cb, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "not aligned")) TH_LOG("%s", moem_last_error());
	EXPECT_NE(NULL, strstr(moem_last_error(), self->path));
	EXPECT_EQ(-EINVAL,
		  moem_loader_read(self->ld, self->idx, 0, 4096 + 1, self->buf, tl_cb, &d));
	if (fi.mem_align > 1) {
		EXPECT_EQ(-EINVAL,
			  moem_loader_read(self->ld, self->idx, 0, 4096, self->buf + 1, tl_cb, &d));
	}
	EXPECT_EQ(0, d.calls);
}

/* Destroy with reads queued: each callback runs once, the rest cancelled. */
struct gate {
	struct tl_done *d;
	int entered, release; /* __atomic */
};

static void slow_cb(void *arg, int err)
{
	struct gate *g = arg;

	/* Hold the completion thread until the test is inside destroy. */
	__atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->release, __ATOMIC_ACQUIRE))
		usleep(1000);
	usleep(50000);
	tl_cb(g->d, err);
}

struct destroyer {
	struct moem_loader *ld;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *x = arg;

	moem_loader_destroy(x->ld);
	return NULL;
}

TEST_F(eng, destroy_with_reads_outstanding)
{
	struct tl_done d = TL_DONE_INIT;
	struct gate g = {.d = &d};
	struct destroyer x;
	const unsigned int n = 64;
	pthread_t th;

	/* The first read's callback blocks the loader until destroy has begun,
	 * so the rest are still queued when it does. */
	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 4096, self->buf, slow_cb, &g));
	for (unsigned int i = 1; i < n; i++) {
		ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 4 * MOEM_MiB,
					      self->buf + MOEM_MiB, tl_cb, &d));
	}
	while (!__atomic_load_n(&g.entered, __ATOMIC_ACQUIRE))
		usleep(1000);
	x.ld = self->ld;
	ASSERT_EQ(0, pthread_create(&th, NULL, destroy_thread, &x));
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	self->ld = NULL; /* destroyed */
	EXPECT_EQ(n, d.calls);
	EXPECT_EQ(n, d.ok + d.ecanceled);
	EXPECT_EQ(1, d.ok); /* the first read; none of the rest was issued whole */
	EXPECT_EQ(n - 1, d.ecanceled);
	EXPECT_EQ(0, d.other + d.eio);
	TH_LOG("%u completed, %u cancelled", d.ok, d.ecanceled);
}

/* Reads issued from a callback during destroy are refused, not lost. */
struct resubmit {
	struct moem_loader *ld;
	uint32_t idx;
	uint8_t *buf;
	int release; /* __atomic */
	int ret;
	unsigned int calls;
};

static void resubmit_cb(void *arg, int err)
{
	struct resubmit *r = arg;

	r->calls++;
	while (!__atomic_load_n(&r->release, __ATOMIC_ACQUIRE))
		usleep(1000);
	usleep(50000);
	r->ret = moem_loader_read(r->ld, r->idx, 0, 4096, r->buf, resubmit_cb, r);
}

TEST_F(eng, read_during_destroy)
{
	struct resubmit r = {.ld = self->ld, .idx = self->idx, .buf = self->buf};
	struct destroyer x = {.ld = self->ld};
	pthread_t th;

	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 4096, self->buf, resubmit_cb, &r));
	ASSERT_EQ(0, pthread_create(&th, NULL, destroy_thread, &x));
	__atomic_store_n(&r.release, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	self->ld = NULL;
	EXPECT_EQ(-ESHUTDOWN, r.ret);
	EXPECT_EQ(1, r.calls);
}

TEST_F(eng, register_while_busy)
{
	struct tl_done d = TL_DONE_INIT;
	struct gate g = {.d = &d};
	void *mem = aligned_alloc(4096, MOEM_MiB);

	ASSERT_NE(NULL, mem);
	ASSERT_EQ(0, moem_loader_read(self->ld, self->idx, 0, 4096, self->buf, slow_cb, &g));
	/* The callback has not returned: the read is outstanding. */
	EXPECT_EQ(-EBUSY, moem_loader_register_memory(self->ld, mem, MOEM_MiB));
	EXPECT_NE(NULL, strstr(moem_last_error(), "outstanding"));
	__atomic_store_n(&g.release, 1, __ATOMIC_RELEASE);
	ASSERT_EQ(0, moem_loader_drain(self->ld));
	EXPECT_EQ(0, moem_loader_register_memory(self->ld, mem, MOEM_MiB));
	EXPECT_EQ(-EEXIST, moem_loader_register_memory(self->ld, (uint8_t *)mem + 4096, 4096));
	EXPECT_NE(NULL, strstr(moem_last_error(), "overlaps"));
	EXPECT_EQ(-EINVAL, moem_loader_register_memory(self->ld, (uint8_t *)mem + 1, 4096));
	EXPECT_EQ(-EINVAL, moem_loader_register_memory(self->ld, mem, 0));
	moem_loader_destroy(self->ld);
	self->ld = NULL;
	free(mem);
}

TEST(bad_options)
{
	struct moem_loader_opts lo = {.req_size = 1000};
	struct moem_loader *ld;
	enum moem_loader_mode m;

	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	EXPECT_NE(NULL, strstr(moem_last_error(), "request size 1000"));
	lo = (struct moem_loader_opts){.req_size = 128 << 20};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	lo = (struct moem_loader_opts){.queue_depth = 5000};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	EXPECT_NE(NULL, strstr(moem_last_error(), "queue depth 5000"));
	lo = (struct moem_loader_opts){.threads = 1000};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	lo = (struct moem_loader_opts){.piece_max = 2 * MOEM_GiB};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	lo = (struct moem_loader_opts){.piece_max = 4097};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	lo = (struct moem_loader_opts){.mode = MOEM_LOADER_MODE_NR};
	EXPECT_EQ(-EINVAL, moem_loader_create(&lo, &ld));
	EXPECT_EQ(-EINVAL, moem_loader_mode_parse("fast", &m));
	EXPECT_NE(NULL, strstr(moem_last_error(), "'fast'"));
	ASSERT_EQ(0, moem_loader_mode_parse("pread", &m));
	EXPECT_EQ(MOEM_LOADER_PREAD, m);
	EXPECT_STREQ("buffered", moem_loader_mode_name(MOEM_LOADER_BUFFERED));
	/* NULL options are the defaults */
	ASSERT_EQ(0, moem_loader_create(NULL, &ld));
	moem_loader_destroy(ld);
	moem_loader_destroy(NULL);
}

TEST(bad_files)
{
	struct moem_loader_opts lo = {.max_files = 1};
	struct moem_loader *ld;
	char path[256];
	uint32_t idx;

	ASSERT_EQ(0, moem_loader_create(&lo, &ld));
	EXPECT_EQ(-ENOENT, moem_loader_add_file(ld, "/nonexistent/moem.pack", &idx));
	EXPECT_NE(NULL, strstr(moem_last_error(), "/nonexistent/moem.pack"));
	EXPECT_EQ(-EINVAL, moem_loader_add_file(ld, "/", &idx));
	EXPECT_NE(NULL, strstr(moem_last_error(), "not a regular file"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL, moem_loader_add_file(ld, "", &idx));
	ASSERT_EQ(0, tl_make_file(NULL, SEED, 8192, path, sizeof(path)));
	EXPECT_EQ(0, moem_loader_add_file(ld, path, &idx));
	EXPECT_EQ(0, idx);
	EXPECT_EQ(-ENOSPC, moem_loader_add_file(ld, path, &idx));
	EXPECT_NE(NULL, strstr(moem_last_error(), "full (1 files"));
	unlink(path);
	moem_loader_destroy(ld);
}

TEST_HARNESS_MAIN
