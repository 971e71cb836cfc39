// SPDX-License-Identifier: GPL-2.0-only
/*
 * The calibration cache (calib.h): measuring the CPU kernels, writing the
 * file atomically and reading it back, and every way a file can be bad
 * (corrupt, cut short, another version, another machine, not a file),
 * each refused with a message and nothing else harmed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/backend.h>
#include <moem/calib.h>
#include <moem/error.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

/* The version this moem writes, as the files below spell it. */
#define VSTR_(v) #v
#define VSTR(v)	 VSTR_(v)
#define VERSION	 VSTR(MOEM_CALIB_VERSION)

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static char *slurp(const char *path)
{
	static char buf[65536];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

/* Files in dir other than . and .. */
static int n_entries(const char *dir)
{
	char cmd[600];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

TEST(measure_write_read)
{
	struct moem_backend_opts bo = {.threads = 1};
	struct moem_backend_info bi;
	struct moem_backend *be;
	struct moem_calib c, r;
	char *dir = st_tmpdir(), *path = st_path(dir, "a/b/calibration.json");
	uint64_t bytes = 0, tok, call;
	double g;

	ASSERT_EQ(0, moem_backend_open("cpu", &bo, &be)) TH_LOG("%s", moem_last_error());
	moem_backend_get_info(be, &bi);
	ASSERT_EQ(0, moem_calib_machine(bi.threads, bi.isa, &c));
	EXPECT_EQ(1u, c.threads);
	EXPECT_NE(MOEM_CPU_ISA_AUTO, c.isa);
	EXPECT_GT(strlen(c.cpu_model), 0u);
	c.hidden = 128;
	c.inter = 256;
	c.created = 1700000000;
	ASSERT_EQ(0, moem_calib_cpu_measure(be, MOEM_PREC_BF16, 128, 256, &c.cpu[MOEM_PREC_BF16],
					    &bytes))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0,
		  moem_calib_cpu_measure(be, MOEM_PREC_Q4, 128, 256, &c.cpu[MOEM_PREC_Q4], NULL));
	moem_backend_close(be);
	EXPECT_TRUE(c.cpu[MOEM_PREC_BF16].valid);
	EXPECT_GT(c.cpu[MOEM_PREC_BF16].gbps, 0);
	EXPECT_GE(c.cpu[MOEM_PREC_Q4].token_ns, 1u);
	EXPECT_GE(bytes, 64ull << 20);		 /* larger than the last-level cache */
	EXPECT_EQ(-ENODEV, moem_calib_link(&c)); /* no GPU here */
	EXPECT_NE(0, c.link_note[0]);

	/* the cache directory is created; the file reads back as written */
	ASSERT_EQ(0, moem_calib_write(path, &c)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_calib_read(path, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ(c.cpu_model, r.cpu_model);
	EXPECT_EQ(c.threads, r.threads);
	EXPECT_EQ(c.isa, r.isa);
	EXPECT_EQ(128u, r.hidden);
	EXPECT_EQ(256u, r.inter);
	EXPECT_EQ(1700000000, r.created);
	EXPECT_EQ(c.cpu[MOEM_PREC_BF16].gbps, r.cpu[MOEM_PREC_BF16].gbps);
	EXPECT_EQ(c.cpu[MOEM_PREC_Q4].token_ns, r.cpu[MOEM_PREC_Q4].token_ns);
	EXPECT_EQ(c.cpu[MOEM_PREC_BF16].call_ns, r.cpu[MOEM_PREC_BF16].call_ns);
	EXPECT_FALSE(r.cpu[MOEM_PREC_Q8].valid);
	EXPECT_STREQ(c.link_note, r.link_note);
	EXPECT_TRUE(moem_calib_matches(&r, &c, NULL, 0));
	/* figures for another shape: GB/s as measured, per-token cost scaled */
	r.cpu[MOEM_PREC_Q4].token_ns = 1000;
	r.cpu[MOEM_PREC_Q4].call_ns = 7000;
	ASSERT_EQ(0, moem_calib_cpu_for(&r, MOEM_PREC_Q4, 256, 512, &g, &tok, &call));
	EXPECT_EQ(r.cpu[MOEM_PREC_Q4].gbps, g);
	EXPECT_EQ(4000u, tok);
	EXPECT_EQ(7000u, call); /* a call's cost does not scale with the shape */
	EXPECT_EQ(-ENOENT, moem_calib_cpu_for(&r, MOEM_PREC_Q2, 128, 256, &g, &tok, NULL));
	EXPECT_MSG("no q2 figures");
	/* no temporary file left beside it */
	{
		char *sub = st_path(dir, "a/b");

		EXPECT_EQ(1, n_entries(sub));
		free(sub);
	}
	st_rm_rf(dir);
	free(path);
	free(dir);
}

TEST(bad_files)
{
	char *dir = st_tmpdir(), *path = st_path(dir, "c.json"),
	     *blocked = st_path(dir, "f/c.json");
	char *file = st_path(dir, "f"), good[4096], *before;
	struct moem_calib c, r;

	memset(&c, 0, sizeof(c));
	ASSERT_EQ(0, moem_calib_machine(2, MOEM_CPU_ISA_AVX2, &c));
	c.hidden = c.inter = 128;
	c.cpu[MOEM_PREC_BF16] = (struct moem_calib_cpu){true, 5.5, 120};
	EXPECT_EQ(-ENOENT, moem_calib_read(path, &r));
	ASSERT_EQ(0, moem_calib_write(path, &c)) TH_LOG("%s", moem_last_error());
	snprintf(good, sizeof(good), "%s", slurp(path));

	/* cut short, as a half-written file would be */
	good[strlen(good) / 2] = 0;
	put_file(path, good);
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	put_file(path, "\x01\x02garbage");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	put_file(path, "[1,2]");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	EXPECT_MSG("not a moem calibration file");
	put_file(path, "{\"format\":\"moem-calibration\",\"version\":99}");
	EXPECT_EQ(-ESTALE, moem_calib_read(path, &r));
	EXPECT_MSG("format version 99, this moem reads " VERSION);
	put_file(path, "{\"format\":\"moem-calibration\",\"version\":" VERSION
		       ",\"machine\":{\"cpu_model\":"
		       "\"X\",\"threads\":2,\"isa\":\"avx2\"},\"hidden\":128,\"inter\":128,"
		       "\"cpu\":{\"bf16\":{\"gbps\":-1,\"token_ns\":5,\"call_ns\":0}}}");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	EXPECT_MSG("cpu.bf16 wants gbps");
	/* version 2's figures, without the call's cost: refused as incomplete */
	put_file(path, "{\"format\":\"moem-calibration\",\"version\":" VERSION
		       ",\"machine\":{\"cpu_model\":"
		       "\"X\",\"threads\":2,\"isa\":\"avx2\"},\"hidden\":128,\"inter\":128,"
		       "\"cpu\":{\"bf16\":{\"gbps\":1,\"token_ns\":5}}}");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	EXPECT_MSG("call_ns in 0..1e9");
	put_file(path, "{\"format\":\"moem-calibration\",\"version\":" VERSION
		       ",\"machine\":{\"cpu_model\":"
		       "\"X\",\"threads\":2,\"isa\":\"auto\"},\"hidden\":128,\"inter\":128,"
		       "\"cpu\":{\"bf16\":{\"gbps\":1,\"token_ns\":5,\"call_ns\":0}}}");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	EXPECT_MSG("\"machine\" wants");
	put_file(path, "{\"format\":\"moem-calibration\",\"version\":" VERSION
		       ",\"machine\":{\"cpu_model\":"
		       "\"X\",\"threads\":2,\"isa\":\"avx2\"},\"hidden\":128,\"inter\":128,"
		       "\"cpu\":{}}");
	EXPECT_EQ(-EINVAL, moem_calib_read(path, &r));
	EXPECT_MSG("no precision");
	EXPECT_EQ(-EINVAL, moem_calib_read(dir, &r)); /* a directory */

	/* a write that cannot happen leaves the old file as it was, and no litter */
	ASSERT_EQ(0, moem_calib_write(path, &c));
	before = strdup(slurp(path));
	put_file(file, "a file where a directory should be");
	EXPECT_NE(0, moem_calib_write(blocked, &c));
	EXPECT_STREQ(before, slurp(path));
	EXPECT_EQ(2, n_entries(dir));
	free(before);

	/* another machine: the reason names what differs */
	ASSERT_EQ(0, moem_calib_read(path, &r));
	{
		struct moem_calib here = c;
		char why[512];

		EXPECT_TRUE(moem_calib_matches(&r, &here, why, sizeof(why)));
		snprintf(here.cpu_model, sizeof(here.cpu_model), "Other CPU 9000");
		EXPECT_FALSE(moem_calib_matches(&r, &here, why, sizeof(why)));
		EXPECT_NE(NULL, strstr(why, "another CPU model"));
		here = c;
		here.threads = 16;
		EXPECT_FALSE(moem_calib_matches(&r, &here, why, sizeof(why)));
		EXPECT_NE(NULL, strstr(why, "thread count"));
		here = c;
		here.isa = MOEM_CPU_ISA_SCALAR;
		EXPECT_FALSE(moem_calib_matches(&r, &here, why, sizeof(why)));
		EXPECT_NE(NULL, strstr(why, "instruction set"));
	}
	st_rm_rf(dir);
	free(dir);
	free(path);
	free(blocked);
	free(file);
}

TEST(default_path)
{
	char buf[4096];
	char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
	char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;

	setenv("XDG_CACHE_HOME", "/var/cache/x", 1);
	setenv("HOME", "/home/u", 1);
	ASSERT_EQ(0, moem_calib_default_path(buf, sizeof(buf)));
	EXPECT_STREQ("/var/cache/x/moem/calibration.json", buf);
	setenv("XDG_CACHE_HOME", "relative", 1); /* invalid by the spec: ignored */
	ASSERT_EQ(0, moem_calib_default_path(buf, sizeof(buf)));
	EXPECT_STREQ("/home/u/.cache/moem/calibration.json", buf);
	EXPECT_EQ(-ENAMETOOLONG, moem_calib_default_path(buf, 10));
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	EXPECT_EQ(-ENOENT, moem_calib_default_path(buf, sizeof(buf)));
	if (xdg)
		setenv("XDG_CACHE_HOME", xdg, 1);
	if (home)
		setenv("HOME", home, 1);
	free(xdg);
	free(home);
}

/*
 * Under the test runner (scripts/run-tests.sh, which says so with
 * MOEM_TEST_RUNNER=1) the calibration cache every engine open reads is a fresh
 * directory of the runner's, not the developer's ~/.cache/moem: tests
 * that open an engine are hermetic.
 */
TEST(runner_gives_a_fresh_cache)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char buf[4096], mine[4096];
	struct stat st;

	if (!getenv("MOEM_TEST_RUNNER"))
		SKIP(return, "not under scripts/run-tests.sh");
	ASSERT_NE(NULL, xdg) TH_LOG("the runner sets XDG_CACHE_HOME");
	ASSERT_EQ('/', xdg[0]);
	ASSERT_EQ(0, stat(xdg, &st)) TH_LOG("%s: %s", xdg, strerror(errno));
	EXPECT_TRUE(S_ISDIR(st.st_mode));
	ASSERT_EQ(0, moem_calib_default_path(buf, sizeof(buf)));
	EXPECT_EQ(0, strncmp(buf, xdg, strlen(xdg))) TH_LOG("%s", buf);
	EXPECT_NE(0, access(buf, F_OK)) TH_LOG("%s exists: not a fresh cache", buf);
	if (home) {
		snprintf(mine, sizeof(mine), "%s/.cache/moem/calibration.json", home);
		EXPECT_STRNE(mine, buf);
	}
}

TEST_HARNESS_MAIN
