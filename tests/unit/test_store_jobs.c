// SPDX-License-Identifier: GPL-2.0-only
/*
 * The store's worker pool (moem_store_run_jobs, runtime/storage/store/
 * jobs.c), which mkmodel, pack and the quantization-error measurement
 * share: every job runs exactly once whatever the thread count, the first
 * error stops the pool and comes back with the failing thread's message,
 * and every thread's scratch is released, also when its init fails.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "../../runtime/storage/store/store_int.h"
#include "kselftest_harness.h"

struct ctx {
	int *runs;
	size_t fail_at; /* (size_t)-1: none */
	int fail_init;	/* the init call that fails (1-based), 0: none */
	int inits, finis, live;
};

static int t_init(void *c, void **scratch)
{
	struct ctx *x = c;
	int k = __atomic_add_fetch(&x->inits, 1, __ATOMIC_RELAXED);

	*scratch = malloc(64);
	if (*scratch)
		__atomic_add_fetch(&x->live, 1, __ATOMIC_RELAXED);
	if (k == x->fail_init)
		return moem_errf(ENOSPC, "init %d refused", k);
	return *scratch ? 0 : -ENOMEM;
}

static int t_run(void *c, size_t job, void *scratch)
{
	struct ctx *x = c;

	memset(scratch, (int)job, 64);
	__atomic_add_fetch(&x->runs[job], 1, __ATOMIC_RELAXED);
	if (job == x->fail_at)
		return moem_errf(EIO, "job %zu failed", job);
	return 0;
}

static void t_fini(void *c, void *scratch)
{
	struct ctx *x = c;

	__atomic_add_fetch(&x->finis, 1, __ATOMIC_RELAXED);
	if (scratch)
		__atomic_sub_fetch(&x->live, 1, __ATOMIC_RELAXED);
	free(scratch);
}

static const struct moem_store_jobs ops = {.init = t_init, .run = t_run, .fini = t_fini};

TEST(every_job_once)
{
	static const size_t jobs[] = {0, 1, 7, 1000};
	static const uint32_t threads[] = {0, 1, 2, 3, 16, 64};

	for (size_t a = 0; a < sizeof(jobs) / sizeof(jobs[0]); a++) {
		for (size_t b = 0; b < sizeof(threads) / sizeof(threads[0]); b++) {
			struct ctx x = {.runs = calloc(jobs[a] + 1, sizeof(int)),
					.fail_at = (size_t)-1};

			ASSERT_NE(NULL, x.runs);
			ASSERT_EQ(0, moem_store_run_jobs(&ops, &x, jobs[a], threads[b]));
			for (size_t i = 0; i < jobs[a]; i++)
				ASSERT_EQ(1, x.runs[i]);
			/* At most 16 threads, never more than jobs; each cleaned up. */
			ASSERT_LE(x.inits, 16);
			ASSERT_LE((size_t)x.inits, jobs[a] ? jobs[a] : 0);
			ASSERT_EQ(x.inits, x.finis);
			ASSERT_EQ(0, x.live);
			free(x.runs);
		}
	}
}

TEST(first_error_stops_with_its_message)
{
	for (uint32_t t = 1; t <= 4; t++) {
		struct ctx x = {.runs = calloc(5000, sizeof(int)), .fail_at = 10};
		size_t ran = 0;
		int ret;

		ASSERT_NE(NULL, x.runs);
		ret = moem_store_run_jobs(&ops, &x, 5000, t);
		ASSERT_EQ(-EIO, ret);
		ASSERT_STREQ("job 10 failed", moem_strerror(ret));
		for (size_t i = 0; i < 5000; i++) {
			ASSERT_LE(x.runs[i], 1);
			ran += (size_t)x.runs[i];
		}
		/*
		 * One thread takes the jobs in order and stops at the failing
		 * one; with more, how many ran depends on scheduling.
		 */
		if (t == 1)
			ASSERT_EQ((size_t)11, ran);
		ASSERT_EQ(x.inits, x.finis);
		ASSERT_EQ(0, x.live);
		free(x.runs);
	}
}

TEST(failed_init_is_cleaned_up)
{
	struct ctx x = {.runs = calloc(100, sizeof(int)), .fail_at = (size_t)-1, .fail_init = 1};
	int ret;

	ASSERT_NE(NULL, x.runs);
	ret = moem_store_run_jobs(&ops, &x, 100, 2);
	ASSERT_EQ(-ENOSPC, ret);
	ASSERT_STREQ("init 1 refused", moem_strerror(ret));
	ASSERT_EQ(x.inits, x.finis);
	ASSERT_EQ(0, x.live);
	free(x.runs);
}

TEST_HARNESS_MAIN
