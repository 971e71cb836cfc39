// SPDX-License-Identifier: GPL-2.0-only
/*
 * A region name squatted by another user (in the guest, with moem.ko):
 * before moemd ever ran, uid 65534 creates a persistent, world-writable
 * region under the name moemd derives from the pack and fills it with
 * bytes of its choosing. moemd, run by root, must not serve from it: it
 * refuses the region and exits non-zero with a message that says whose it
 * is and what to do, leaving the squatter's bytes alone. Once root
 * destroys the region, moemd starts normally on its own.
 */
#include <grp.h>

#include "kselftest_harness.h"
#include "guest_util.h"

#define SQUAT_UID  65534
#define SQUAT_SIZE (4ULL << 20)

FIXTURE(sq)
{
	char *dir;
	char region[64];
	struct dmn m;
};

FIXTURE_SETUP(sq)
{
	if (access("/dev/moem", F_OK))
		SKIP(return, "moem.ko is not loaded (these tests run in the guest)");
	if (access(g_pack(), R_OK))
		SKIP(return, "no test pack at %s", g_pack());
	if (geteuid() != 0)
		SKIP(return, "needs root (to be the daemon and to become the squatter)");
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	ASSERT_EQ(0, g_region_of(g_pack(), self->region));
}

FIXTURE_TEARDOWN(sq)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	g_region_destroy(self->region);
	dmn_rm_rf(self->dir);
	free(self->dir);
}

/* As uid 65534: a persistent 0666 region under name, full of 0xa5. */
static int squat(const char *name)
{
	uint8_t *p;
	pid_t pid;
	int st, dev, fd;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* The device is root's: open it, then become the other user. */
		if (moem_dev_open(NULL, &dev))
			_exit(10);
		if (setgroups(0, NULL) || setgid(SQUAT_UID) || setuid(SQUAT_UID))
			_exit(11);
		if (moem_dev_region_create(dev, name, SQUAT_SIZE, MOEM_REGION_PERSISTENT, 0666,
					   &fd))
			_exit(12);
		p = mmap(NULL, SQUAT_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			_exit(13);
		memset(p, 0xa5, SQUAT_SIZE);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Does the region still hold only the squatter's bytes? */
static int squatter_bytes_intact(const char *name)
{
	struct moem_region_info ri;
	uint8_t *p;
	int dev, fd, ret;

	ret = moem_dev_open(NULL, &dev);
	if (ret)
		return ret;
	ret = moem_dev_region_info(dev, name, &ri);
	if (!ret)
		ret = moem_dev_region_open(dev, name, MOEM_OPEN_RDONLY, &fd);
	close(dev);
	if (ret)
		return ret;
	if (ri.owner_uid != SQUAT_UID) {
		close(fd);
		return -EPERM;
	}
	p = mmap(NULL, SQUAT_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	ret = 0;
	for (uint64_t i = 0; i < SQUAT_SIZE; i++) {
		if (p[i] != 0xa5) {
			ret = -EBADMSG;
			break;
		}
	}
	munmap(p, SQUAT_SIZE);
	return ret;
}

TEST_F_TIMEOUT(sq, squatted_region_refused, 900)
{
	const char *args[] = {"--pack", g_pack(),	"--backend", "cpu",   "--threads",
			      "1",	"--precisions", "bf16,q4",   "--hbm", "25%",
			      "--dram", "50%",		"--steps",   "1",     NULL};
	struct g_pool base, now;

	ASSERT_EQ(0, g_region_destroy(self->region));
	ASSERT_EQ(0, g_pool_read(&base));
	ASSERT_EQ(0, squat(self->region));

	/* The default pool choice (auto) finds moem.ko and must not use the region. */
	ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 300000)) TH_LOG("moemd served from a squatted region");
	EXPECT_NE(0, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "owned by uid 65534"));
	EXPECT_TRUE(dmn_log_has(&self->m, "refusing it"));
	EXPECT_TRUE(dmn_log_has(&self->m, self->region));
	if (_metadata->passed)
		dmn_dump_log(&self->m); /* the message a user sees */
	EXPECT_EQ(0, squatter_bytes_intact(self->region));

	/* An administrator removes it; moemd then makes and uses its own. */
	ASSERT_EQ(0, g_region_destroy(self->region));
	ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 60000));
	EXPECT_EQ(0, dmn_exit_code(&self->m));
	ASSERT_EQ(0, g_pool_read(&now));
	EXPECT_EQ(base.regions + 1, now.regions);
	EXPECT_NE(NULL, strstr(now.names, self->region));
	ASSERT_EQ(0, g_region_destroy(self->region));
	ASSERT_EQ(0, g_pool_read(&now));
	EXPECT_EQ(base.total, now.total);
	EXPECT_EQ(base.free, now.free);
	EXPECT_EQ(base.regions, now.regions);
}

TEST_HARNESS_MAIN
