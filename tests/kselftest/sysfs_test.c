// SPDX-License-Identifier: GPL-2.0-only
/*
 * /sys/kernel/moem: pool files agree with POOL_STATS; regions/<name>/
 * appears on create and goes on destroy; every budget knob accepts valid
 * values and refuses invalid ones exactly as libmoem's rules do, through
 * sysfs and the ioctl alike; a poll() waiter wakes on every change and
 * only then; the tracepoints exist and fire.
 */
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>

#include <moem/dev.h>

#include "moem_test.h"

/* Knob names are libmoem's (tests/kselftest/knobs_test.c checks them against the module). */
#define knobs_name(k) moem_budget_name((enum moem_budget_knob)(k))

static void knob_path(char *buf, size_t len, const char *knob)
{
	snprintf(buf, len, SYSFS "/budgets/%s", knob);
}

static int budget_get(int dev, uint32_t knob, uint64_t *v, uint64_t *seq)
{
	struct moem_budget b = {.knob = knob};
	int ret = ioc(dev, MOEM_IOC_BUDGET_GET, &b);

	*v = b.value;
	if (seq)
		*seq = b.seq;
	return ret;
}

static int budget_set(int dev, uint32_t knob, uint64_t v)
{
	struct moem_budget b = {.knob = knob, .value = v};

	return ioc(dev, MOEM_IOC_BUDGET_SET, &b);
}

TEST_F(moem, pool_files)
{
	struct moem_pool_stats st;
	uint64_t v;
	char buf[32];

	ASSERT_EQ(0, pool_stats(self->dev, &st));
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/total_bytes", &v));
	EXPECT_EQ(st.total_bytes, v);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/free_bytes", &v));
	EXPECT_EQ(st.free_bytes, v);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/max_bytes", &v));
	EXPECT_EQ(st.max_bytes, v);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/chunk_bytes", &v));
	EXPECT_EQ(CHUNK, v);
	EXPECT_EQ(CHUNK, st.chunk_bytes);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/regions", &v));
	EXPECT_EQ(st.nr_regions, v);
	ASSERT_EQ(0, sysfs_read(SYSFS "/pool/node", buf, sizeof(buf)));
	EXPECT_EQ((int)st.node, atoi(buf));
	/* Read-only: even root cannot write them. */
	EXPECT_NE(0, sysfs_write(SYSFS "/pool/free_bytes", "0"));
	/* The module parameters the pool came from. */
	ASSERT_EQ(0, sysfs_read_u64("/sys/module/moem/parameters/max_pool_mb", &v));
	EXPECT_EQ(st.max_bytes, v * MiB);
	ASSERT_EQ(0, sysfs_read_u64("/sys/module/moem/parameters/prealloc_mb", &v));
	EXPECT_LE(v * MiB, st.total_bytes);
}

TEST_F(moem, region_directory)
{
	char path[128], buf[64];
	uint64_t v;
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "sysdir", 4 * MiB, MOEM_REGION_PERSISTENT, 0640);
	ASSERT_LE(0, fd);
#define RPATH(f) (snprintf(path, sizeof(path), SYSFS "/regions/sysdir/" f), path)
	ASSERT_EQ(0, sysfs_read_u64(RPATH("size_bytes"), &v));
	EXPECT_EQ(4 * MiB, v);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("owner_uid"), &v));
	EXPECT_EQ(getuid(), v);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("persistent"), &v));
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, sysfs_read(RPATH("mode"), buf, sizeof(buf)));
	EXPECT_STREQ("0640", buf);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("files"), &v));
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("maps"), &v));
	EXPECT_EQ(0, v);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("maps"), &v));
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	ASSERT_EQ(0, sysfs_read_u64(RPATH("maps"), &v));
	EXPECT_EQ(0, v);
	struct moem_region_info info;

	ASSERT_EQ(0, region_fd_info(fd, &info, NULL));
	ASSERT_EQ(0, sysfs_read_u64(RPATH("id"), &v));
	EXPECT_EQ(info.id, v);
	close(fd);
	ASSERT_EQ(0, sysfs_read_u64(RPATH("files"), &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, region_destroy(self->dev, "sysdir"));
	EXPECT_EQ(-ENOENT, sysfs_read_u64(RPATH("size_bytes"), &v));
#undef RPATH
	EXPECT_POOL_BASELINE(self);
}

/* Text a user might write, the knob, and whether libmoem's rules accept it. */
static const struct {
	uint32_t knob;
	const char *text;
} writes[] = {
	{MOEM_BUDGET_HBM_BYTES, "0"},
	{MOEM_BUDGET_HBM_BYTES, "17179869184"},
	{MOEM_BUDGET_HBM_BYTES, "1125899906842624"}, /* 2^50 */
	{MOEM_BUDGET_HBM_BYTES, "1125899906842625"},
	{MOEM_BUDGET_HBM_BYTES, "18446744073709551615"},
	{MOEM_BUDGET_HBM_BYTES, "18446744073709551616"},
	{MOEM_BUDGET_HBM_BYTES, "16G"},
	{MOEM_BUDGET_HBM_BYTES, "-1"},
	{MOEM_BUDGET_HBM_BYTES, "+5"},
	{MOEM_BUDGET_HBM_BYTES, "0x10"},
	{MOEM_BUDGET_HBM_BYTES, " 5"},
	{MOEM_BUDGET_HBM_BYTES, "5 "},
	{MOEM_BUDGET_HBM_BYTES, "\n"},
	{MOEM_BUDGET_DRAM_BYTES, "51539607552"},
	{MOEM_BUDGET_DRAM_BYTES, "abc"},
	{MOEM_BUDGET_HI_PRECISION_PERMILLE, "0"},
	{MOEM_BUDGET_HI_PRECISION_PERMILLE, "1000"},
	{MOEM_BUDGET_HI_PRECISION_PERMILLE, "1001"},
	{MOEM_BUDGET_HI_PRECISION_PERMILLE, "4294967297"},
	{MOEM_BUDGET_HI_PRECISION_PERMILLE, "12.5"},
	{MOEM_BUDGET_PREFETCH_DEPTH, "0"},
	{MOEM_BUDGET_PREFETCH_DEPTH, "64"},
	{MOEM_BUDGET_PREFETCH_DEPTH, "65"},
	{MOEM_BUDGET_PREFETCH_DEPTH, ""},
	{MOEM_BUDGET_REROUTE, "none"},
	{MOEM_BUDGET_REROUTE, "lynx"},
	{MOEM_BUDGET_REROUTE, "oea"},
	{MOEM_BUDGET_REROUTE, "cache-aware"},
	{MOEM_BUDGET_REROUTE, "piggyback"},
	{MOEM_BUDGET_REROUTE, "LYNX"},
	{MOEM_BUDGET_REROUTE, "lynx2"},
	{MOEM_BUDGET_REROUTE, "1"},
	{MOEM_BUDGET_REROUTE, "cache_aware"},
	{MOEM_BUDGET_REROUTE, "hybrid"},
	{MOEM_BUDGET_EXEC, "gpu"},
	{MOEM_BUDGET_EXEC, "hybrid"},
	{MOEM_BUDGET_EXEC, "hybrid\n"},
	{MOEM_BUDGET_EXEC, "transfer"},
	{MOEM_BUDGET_EXEC, "HYBRID"},
	{MOEM_BUDGET_EXEC, "1"},
	{MOEM_BUDGET_EXEC, "lynx"},
	{MOEM_BUDGET_EXEC, ""},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "0"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "48"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "256"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "257"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "4294967297"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "-1"},
	{MOEM_BUDGET_CPU_MOE_LAYERS, "2M"},
};

/*
 * Would libmoem accept this text? Its parser takes size suffixes the
 * kernel does not (sysfs sizes are plain decimal bytes), so sizes are
 * first required to be plain digits; then the value rules must agree.
 */
static bool lib_accepts(uint32_t knob, const char *text, uint64_t *v)
{
	const bool is_enum =
		moem_knob_info((enum moem_budget_knob)knob)->unit == MOEM_KNOB_UNIT_ENUM;
	char t[64];
	size_t n = strlen(text);

	/* sysfs drops one trailing newline, as echo writes it */
	snprintf(t, sizeof(t), "%.*s", (int)(n && text[n - 1] == '\n' ? n - 1 : n), text);
	if (!is_enum && (!*t || strspn(t, "0123456789") != strlen(t)))
		return false;
	return moem_budget_parse((enum moem_budget_knob)knob, t, v) == 0;
}

TEST_F(moem, budget_knobs_sysfs_and_ioctl)
{
	char path[128], buf[64], want[64];
	uint64_t v, lib_v, seq0, seq1;

	REQUIRE_ROOT();
	for (unsigned int i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		uint32_t k = writes[i].knob;
		bool ok = lib_accepts(k, writes[i].text, &lib_v);
		int ret;

		knob_path(path, sizeof(path), knobs_name(k));
		ASSERT_EQ(0, sysfs_read(path, want, sizeof(want))); /* value before */
		ASSERT_EQ(0, budget_get(self->dev, k, &v, &seq0));
		ret = sysfs_write(path, writes[i].text);
		if (!*writes[i].text) {
			/* An empty write(2) never reaches the store method. */
			EXPECT_EQ(0, ret);
			continue;
		}
		ASSERT_EQ(0, budget_get(self->dev, k, &v, &seq1));
		if (ok) {
			EXPECT_EQ(0, ret) TH_LOG("%s <- '%s'", knobs_name(k), writes[i].text);
			EXPECT_EQ(lib_v, v) TH_LOG("%s <- '%s'", knobs_name(k), writes[i].text);
			EXPECT_EQ(seq0 + 1, seq1);
			moem_budget_format((enum moem_budget_knob)k, lib_v, want, sizeof(want));
		} else {
			EXPECT_EQ(-EINVAL, ret) TH_LOG("%s <- '%s'", knobs_name(k), writes[i].text);
			EXPECT_EQ(seq0, seq1);
		}
		ASSERT_EQ(0, sysfs_read(path, buf, sizeof(buf)));
		EXPECT_STREQ(want, buf) TH_LOG("%s <- '%s'", knobs_name(k), writes[i].text);
		/* The same value through the ioctl gives the same answer. */
		if (ok) {
			EXPECT_EQ(0, budget_set(self->dev, k, lib_v));
		}
	}
	/* The ioctl refuses exactly what moem_budget_validate() refuses. */
	const uint64_t vals[] = {0,    1, 64, 65, 1000, 1001, 4, 5, 1ULL << 50, (1ULL << 50) + 1,
				 ~0ULL};

	for (uint32_t k = 0; k < MOEM_BUDGET_NR; k++) {
		for (unsigned int i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
			int lib = moem_budget_validate((enum moem_budget_knob)k, vals[i]);
			int ret = budget_set(self->dev, k, vals[i]);

			EXPECT_EQ(lib ? -EINVAL : 0, ret)
			TH_LOG("%s = %llu", knobs_name(k), (unsigned long long)vals[i]);
			if (!ret) {
				ASSERT_EQ(0, budget_get(self->dev, k, &v, NULL));
				EXPECT_EQ(vals[i], v);
			}
		}
	}
	/* Leave the defaults behind. */
	for (uint32_t k = 0; k < MOEM_BUDGET_NR; k++)
		ASSERT_EQ(0, budget_set(self->dev, k, 0));
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/budgets/seq", &v));
	ASSERT_EQ(0, budget_get(self->dev, 0, &lib_v, &seq1));
	EXPECT_EQ(seq1, v);
	/* Read-only to everyone but root. */
	struct stat st;

	knob_path(path, sizeof(path), "hbm_bytes");
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0644, st.st_mode & 0777);
	ASSERT_EQ(0, stat(SYSFS "/budgets/seq", &st));
	EXPECT_EQ(0444, st.st_mode & 0777);
}

/* Write exactly len bytes (NULs included) with one write(2); 0 or -errno. */
static int sysfs_write_n(const char *path, const char *s, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, len) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * A value is all the bytes written: "7\0xyz" is not 7, "lynx\0junk" not
 * lynx, and nothing may follow the one trailing newline.
 */
TEST_F(moem, knob_writes_whole_value)
{
	static const struct {
		const char *file, *text;
		size_t len;
	} bad[] = {
		{"budgets/prefetch_depth", "7\0xyz", 6},
		{"budgets/prefetch_depth", "7\0", 2},
		{"budgets/prefetch_depth",
		 "\0"
		 "7",
		 2},
		{"budgets/prefetch_depth", "7\n8", 3},
		{"budgets/prefetch_depth", "7\n\n", 3},
		{"budgets/hbm_bytes", "1048576\0", 8},
		{"budgets/reroute", "lynx\0junk", 9},
		{"budgets/reroute", "lynx\0", 5},
		{"budgets/reroute", "lynx\n\n", 6},
		{"budgets/reroute", "ly\0nx", 5},
		{"pool/user_max_bytes",
		 "4194304\0"
		 "0",
		 9},
	};
	char path[128], before[64], after[64];

	REQUIRE_ROOT();
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(path, sizeof(path), SYSFS "/%s", bad[i].file);
		ASSERT_EQ(0, sysfs_read(path, before, sizeof(before)));
		EXPECT_EQ(-EINVAL, sysfs_write_n(path, bad[i].text, bad[i].len))
		TH_LOG("%s <- %u bytes", bad[i].file, (unsigned int)bad[i].len);
		ASSERT_EQ(0, sysfs_read(path, after, sizeof(after)));
		EXPECT_STREQ(before, after);
	}
	/* The whole value, with or without its newline, is taken. */
	snprintf(path, sizeof(path), SYSFS "/budgets/prefetch_depth");
	EXPECT_EQ(0, sysfs_write_n(path, "7\n", 2));
	ASSERT_EQ(0, sysfs_read(path, after, sizeof(after)));
	EXPECT_STREQ("7", after);
	EXPECT_EQ(0, sysfs_write_n(path, "0", 1));
	snprintf(path, sizeof(path), SYSFS "/budgets/reroute");
	EXPECT_EQ(0, sysfs_write_n(path, "lynx\n", 5));
	ASSERT_EQ(0, sysfs_read(path, after, sizeof(after)));
	EXPECT_STREQ("lynx", after);
	EXPECT_EQ(0, sysfs_write_n(path, "none", 4));
}

struct waiter {
	const char *path;
	int timeout_ms;
	int ret; /* poll()'s result */
	short revents;
	int ready;
	pid_t tid;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	char buf[64];

	w->tid = (pid_t)syscall(SYS_gettid);
	struct pollfd pfd;
	int fd = open(w->path, O_RDONLY);

	if (fd < 0) {
		w->ret = -errno;
		__atomic_store_n(&w->ready, 1, __ATOMIC_RELEASE);
		return NULL;
	}
	/* sysfs_notify wakes those who read the file and then poll it. */
	if (read(fd, buf, sizeof(buf)) < 0)
		w->ret = -errno;
	pfd = (struct pollfd){.fd = fd, .events = POLLPRI | POLLERR};
	__atomic_store_n(&w->ready, 1, __ATOMIC_RELEASE);
	w->ret = poll(&pfd, 1, w->timeout_ms);
	w->revents = pfd.revents;
	close(fd);
	return NULL;
}

/* Is thread tid blocked in poll() or ppoll() right now? */
static bool in_poll(pid_t tid)
{
	char path[64], buf[32];
	long nr;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	if (sysfs_read(path, buf, sizeof(buf)))
		return false;
	nr = strtol(buf, NULL, 10);
	return nr == SYS_poll || nr == SYS_ppoll;
}

/* Start the waiter and return once it sleeps in poll() (10 s at most). */
static void start_waiter(struct waiter *w, pthread_t *th)
{
	pthread_create(th, NULL, wait_thread, w);
	while (!__atomic_load_n(&w->ready, __ATOMIC_ACQUIRE))
		usleep(1000);
	for (int i = 0; i < 10000 && !in_poll(w->tid); i++)
		usleep(1000);
}

TEST_F(moem, poll_wakes_on_change)
{
	char path[128];
	pthread_t th;
	struct waiter w;

	REQUIRE_ROOT();
	for (uint32_t k = 0; k < MOEM_BUDGET_NR; k++) {
		knob_path(path, sizeof(path), knobs_name(k));
		/* A sysfs write wakes the waiter. */
		w = (struct waiter){.path = path, .timeout_ms = 10000};
		start_waiter(&w, &th);
		ASSERT_EQ(0,
			  sysfs_write(path,
				      moem_knob_info((enum moem_budget_knob)k)->unit ==
						      MOEM_KNOB_UNIT_ENUM
					      ? moem_knob_info((enum moem_budget_knob)k)->values[1]
					      : "7"));
		pthread_join(th, NULL);
		EXPECT_EQ(1, w.ret) TH_LOG("%s", knobs_name(k));
		EXPECT_TRUE(w.revents & POLLPRI);
		/* So does the ioctl. */
		w = (struct waiter){.path = path, .timeout_ms = 10000};
		start_waiter(&w, &th);
		ASSERT_EQ(0, budget_set(self->dev, k, 0));
		pthread_join(th, NULL);
		EXPECT_EQ(1, w.ret) TH_LOG("%s", knobs_name(k));
		/* A refused write and a change of another knob do not. */
		w = (struct waiter){.path = path, .timeout_ms = 300};
		start_waiter(&w, &th);
		EXPECT_EQ(-EINVAL, sysfs_write(path, "bogus"));
		ASSERT_EQ(0, budget_set(self->dev, (k + 1) % MOEM_BUDGET_NR, 0));
		pthread_join(th, NULL);
		EXPECT_EQ(0, w.ret) TH_LOG("%s woke without a change", knobs_name(k));
	}
	/* budgets/seq wakes on any knob. */
	w = (struct waiter){.path = SYSFS "/budgets/seq", .timeout_ms = 10000};
	start_waiter(&w, &th);
	ASSERT_EQ(0, budget_set(self->dev, MOEM_BUDGET_PREFETCH_DEPTH, 0));
	pthread_join(th, NULL);
	EXPECT_EQ(1, w.ret);
}

#define TRACEFS "/sys/kernel/tracing"

TEST_F(moem, tracepoints_fire)
{
	static const char *const events[] = {
		"moem_chunk_alloc", "moem_chunk_free",	   "moem_region_create",
		"moem_region_open", "moem_region_destroy", "moem_region_release",
		"moem_mmap",	    "moem_budget_change",
	};
	char path[256], *buf;
	struct stat st;
	void *p;
	int fd, fd2, tr;
	ssize_t n, len = 0;

	REQUIRE_ROOT();
	if (stat(TRACEFS "/events", &st))
		SKIP(return, "tracefs not mounted at " TRACEFS);
	for (unsigned int i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
		snprintf(path, sizeof(path), TRACEFS "/events/moem/%s/format", events[i]);
		EXPECT_EQ(0, stat(path, &st)) TH_LOG("%s", path);
	}
	ASSERT_EQ(0, budget_set(self->dev, MOEM_BUDGET_PREFETCH_DEPTH, 0));
	tr = open(TRACEFS "/trace", O_WRONLY | O_TRUNC); /* empties the buffer */
	ASSERT_LE(0, tr);
	close(tr);
	ASSERT_EQ(0, sysfs_write(TRACEFS "/events/moem/enable", "1"));
	ASSERT_EQ(0, sysfs_write(TRACEFS "/tracing_on", "1"));

	fd = region_create(self->dev, "traced", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	fd2 = region_open(self->dev, "traced", 0);
	ASSERT_LE(0, fd2);
	p = map_region(fd2, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	munmap(p, 2 * MiB);
	ASSERT_EQ(0, region_destroy(self->dev, "traced"));
	close(fd2);
	close(fd);
	ASSERT_EQ(0, budget_set(self->dev, MOEM_BUDGET_PREFETCH_DEPTH, 3));
	ASSERT_EQ(0, budget_set(self->dev, MOEM_BUDGET_PREFETCH_DEPTH, 0));
	ASSERT_EQ(0, sysfs_write(TRACEFS "/events/moem/enable", "0"));

	buf = malloc(1 << 20);
	ASSERT_NE(NULL, buf);
	tr = open(TRACEFS "/trace", O_RDONLY);
	ASSERT_LE(0, tr);
	while ((n = read(tr, buf + len, (1 << 20) - 1 - len)) > 0)
		len += n;
	close(tr);
	buf[len] = 0;
	EXPECT_NE(NULL, strstr(buf, "moem_region_create: name=traced"));
	EXPECT_NE(NULL, strstr(buf, "moem_region_open: name=traced"));
	EXPECT_NE(NULL, strstr(buf, "moem_mmap: name=traced"));
	EXPECT_NE(NULL, strstr(buf, "moem_region_destroy: name=traced"));
	EXPECT_NE(NULL, strstr(buf, "moem_region_release: name=traced"));
	EXPECT_NE(NULL, strstr(buf, "moem_chunk_alloc: region="));
	EXPECT_NE(NULL, strstr(buf, "moem_chunk_free: region="));
	EXPECT_NE(NULL, strstr(buf, "moem_budget_change: knob=prefetch_depth old=0 new=3"));
	if (!_metadata->passed)
		TH_LOG("trace:\n%s", buf);
	free(buf);
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
