// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CPU backend's fork-join pool (runtime/compute/cpu/tpool.c): every
 * item of every job runs exactly once and the job is complete when
 * moem_tpool_run() returns, for 1..8 workers, many jobs back to back
 * (the hand-over spins) and with the spin off (every hand-over through
 * the condition variables), for jobs whose items go to NUMA nodes, and
 * with workers woken ahead of jobs (moem_tpool_wake()), a caller on a
 * pinned worker's CPU kept off it, and consecutive items claimed together.
 * No timing: a lost wake-up would hang a job, which the suite's timeout
 * reports; a lost or doubled item is counted.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/compute/cpu/tpool.h"
#include "kselftest_harness.h"

#define MAX_ITEMS 1024

struct job {
	atomic_uint hits[MAX_ITEMS];
	atomic_uint bad_worker;
	uint32_t n_workers;
	const uint16_t *item_node; /* NULL: any worker */
	const uint16_t *worker_node;
};

static void count(void *arg, uint32_t item, uint32_t worker)
{
	struct job *j = arg;

	if (item >= MAX_ITEMS || worker >= j->n_workers ||
	    (j->item_node && j->item_node[item] < 2 &&
	     j->worker_node[worker] != j->item_node[item]))
		atomic_fetch_add(&j->bad_worker, 1);
	else
		atomic_fetch_add(&j->hits[item], 1);
}

/* Run jobs of 1..MAX_ITEMS items back to back; every item exactly once each time. */
static void run_jobs(struct __test_metadata *_metadata, struct moem_tpool *p, uint32_t nw,
		     uint32_t jobs, const uint16_t *item_node, const uint16_t *worker_node)
{
	struct job *j = calloc(1, sizeof(*j));

	ASSERT_NE(NULL, j);
	j->n_workers = nw;
	j->item_node = item_node;
	j->worker_node = worker_node;
	for (uint32_t k = 0; k < jobs; k++) {
		/* small jobs (fewer items than workers) and large ones */
		uint32_t n = 1 + (k * 37 + k / 3) % (k % 4 ? 8 : MAX_ITEMS);

		for (uint32_t i = 0; i < MAX_ITEMS; i++)
			atomic_store(&j->hits[i], 0);
		if (item_node) {
			ASSERT_EQ(0, moem_tpool_run_nodes(p, n, count, j, item_node));
		} else {
			moem_tpool_run(p, n, count, j);
		}
		/* the job is complete when the call returns */
		for (uint32_t i = 0; i < MAX_ITEMS; i++) {
			unsigned int h = atomic_load(&j->hits[i]);

			ASSERT_EQ(i < n ? 1u : 0u, h)
			TH_LOG("%u workers, job %u of %u items: item %u ran %u times", nw, k, n, i,
			       h);
		}
		ASSERT_EQ(0u, atomic_load(&j->bad_worker));
	}
	free(j);
}

TEST(every_item_once_spinning_and_sleeping)
{
	static const uint32_t sizes[] = {1, 2, 3, 8};

	for (unsigned int s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int spin = 0; spin < 2; spin++) {
			struct moem_tpool *p;

			ASSERT_EQ(0, moem_tpool_create(sizes[s], NULL, &p));
			ASSERT_EQ(sizes[s], moem_tpool_size(p));
			if (!spin)
				moem_tpool_set_spin(p, 0);
			run_jobs(_metadata, p, sizes[s], 2400 / sizes[s], NULL, NULL);
			/* from spinning to sleeping and back while the workers are idle */
			moem_tpool_set_spin(p, spin ? 0 : MOEM_TPOOL_SPIN_NS);
			run_jobs(_metadata, p, sizes[s], 240 / sizes[s], NULL, NULL);
			moem_tpool_destroy(p);
		}
}

static void who(void *arg, uint32_t item, uint32_t worker)
{
	uint8_t *by = arg;
	volatile uint32_t work = 0;

	/* some work (about a microsecond), so that both workers take items */
	for (uint32_t i = 0; i < 1000; i++)
		work += i;
	by[item] = (uint8_t)(worker + 1);
}

/*
 * Consecutive items are claimed in runs (guided: a quarter of what is
 * left with two workers, at least moem_tpool_grain()), so the first
 * quarter of a job ran on one worker, every run of one worker's items
 * but the last is at least the grain long (the kernels' prefetch of the
 * next rows depends on both), and every item ran.
 */
TEST(items_claimed_in_runs)
{
	static uint8_t by[MAX_ITEMS];
	struct moem_tpool *p;

	ASSERT_EQ(1u, moem_tpool_grain(1, 2));
	ASSERT_EQ(1u, moem_tpool_grain(63, 2));
	ASSERT_EQ(2u, moem_tpool_grain(64, 2));
	ASSERT_EQ(MOEM_TPOOL_GRAIN_MAX, moem_tpool_grain(1000000, 2));
	ASSERT_EQ(1u, moem_tpool_grain(384, 16));
	ASSERT_EQ(1u, moem_tpool_grain(5, 0));
	ASSERT_EQ(0, moem_tpool_create(2, NULL, &p));
	for (int k = 0; k < 200; k++) {
		const uint32_t n = k % 2 ? MAX_ITEMS : 129, g = moem_tpool_grain(n, 2);
		uint32_t start = 0;

		memset(by, 0, sizeof(by));
		moem_tpool_run(p, n, who, by);
		for (uint32_t i = 0; i < n; i++) {
			ASSERT_NE(0, by[i]);
			ASSERT_TRUE(i >= n / 4 || by[i] == by[0])
			TH_LOG("job of %u items: item %u on worker %u, item 0 on %u", n, i,
			       by[i] - 1, by[0] - 1);
			if (i + 1 < n && by[i + 1] != by[i]) { /* a run ends at i */
				ASSERT_LE(g, i + 1 - start)
				TH_LOG("job of %u items, grain %u: items %u..%u on worker %u", n, g,
				       start, i, by[i] - 1);
				start = i + 1;
			}
		}
	}
	moem_tpool_destroy(p);
}

TEST(node_items_on_their_node)
{
	static const uint16_t wnode[4] = {0, 1, 0, 1};
	static uint16_t inode[MAX_ITEMS];
	const struct moem_tpool_place place = {.n_nodes = 2, .node = wnode};

	/* nodes 0 and 1 have workers; 7 is out of range: any worker */
	for (uint32_t i = 0; i < MAX_ITEMS; i++)
		inode[i] = i % 5 == 4 ? 7 : i % 2;
	for (int spin = 0; spin < 2; spin++) {
		struct moem_tpool *p;

		ASSERT_EQ(0, moem_tpool_create(4, &place, &p));
		ASSERT_EQ(2u, moem_tpool_nodes(p));
		moem_tpool_set_spin(p, spin ? MOEM_TPOOL_SPIN_NS : 0);
		run_jobs(_metadata, p, 4, 1000, inode, wnode);
		moem_tpool_destroy(p);
	}
}

/*
 * moem_tpool_wake() between jobs, before a job, twice in a row and right
 * before the pool goes: woken workers poll and sleep again without taking
 * a job twice or missing one, with either hand-over (spin 0: they go back
 * to sleep at once).
 */
TEST(wake_between_jobs)
{
	for (uint32_t n = 1; n <= 4; n++)
		for (int spin = 0; spin < 2; spin++) {
			struct moem_tpool *p;

			ASSERT_EQ(0, moem_tpool_create(n, NULL, &p));
			moem_tpool_set_spin(p, spin ? MOEM_TPOOL_SPIN_NS : 0);
			for (int k = 0; k < 100; k++) {
				if (k % 3)
					moem_tpool_wake(p);
				if (k % 5 == 0)
					moem_tpool_wake(p);
				/* jobs of 1, 6, 3, 1 and 150 items */
				run_jobs(_metadata, p, n, 5, NULL, NULL);
			}
			moem_tpool_wake(p);
			moem_tpool_destroy(p);
		}
}

/* A pool destroyed right after it is made, and after one job, with either hand-over. */
TEST(destroy_at_once)
{
	for (int k = 0; k < 200; k++) {
		struct moem_tpool *p;

		ASSERT_EQ(0, moem_tpool_create(1 + k % 4, NULL, &p));
		if (k % 3 == 1)
			moem_tpool_set_spin(p, 0);
		if (k % 2)
			run_jobs(_metadata, p, 1 + k % 4, 1, NULL, NULL);
		moem_tpool_destroy(p);
	}
}

/*
 * A caller on the CPU a worker is pinned to would share it for the whole
 * job: the pool keeps it off the workers' CPUs from its next job on, and
 * gives its mask back when that thread destroys the pool. The caller is
 * put on the worker's CPU by narrowing its mask to that CPU and widening
 * it again (a widening that keeps the current CPU does not move a thread;
 * the scheduler may still move it meanwhile, so up to 50 tries, of which
 * one must see the move). A mask of workers' CPUs only is left alone.
 */
TEST(caller_kept_off_pinned_workers)
{
	cpu_set_t all, one, a_only, both, now;
	int cpus[2], nc = 0, moved = 0;

	ASSERT_EQ(0, sched_getaffinity(0, sizeof(all), &all));
	for (int c = 0; c < CPU_SETSIZE && nc < 2; c++)
		if (CPU_ISSET(c, &all))
			cpus[nc++] = c;
	if (nc < 2)
		SKIP(return, "one CPU in this thread's mask");
	CPU_ZERO(&one);
	CPU_SET(cpus[1], &one);
	CPU_ZERO(&a_only);
	CPU_SET(cpus[0], &a_only);
	CPU_OR(&both, &one, &a_only);
	for (int k = 0; k < 50 && !moved; k++) {
		const int wcpu[2] = {-1, cpus[1]};
		const uint16_t wnode[2] = {0, 0};
		const struct moem_tpool_place place = {.n_nodes = 1, .cpu = wcpu, .node = wnode};
		struct moem_tpool *p;

		ASSERT_EQ(0, moem_tpool_create(2, &place, &p));
		ASSERT_EQ(1u, moem_tpool_pinned(p));
		/* only the worker's CPU: nothing to move to, the mask stays */
		ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one));
		run_jobs(_metadata, p, 2, 3, NULL, NULL);
		ASSERT_EQ(0, sched_getaffinity(0, sizeof(now), &now));
		EXPECT_TRUE(CPU_EQUAL(&now, &one));
		/* on the worker's CPU with another allowed: kept off it */
		ASSERT_EQ(0, sched_setaffinity(0, sizeof(both), &both));
		run_jobs(_metadata, p, 2, 3, NULL, NULL);
		ASSERT_EQ(0, sched_getaffinity(0, sizeof(now), &now));
		if (CPU_EQUAL(&now, &a_only))
			moved = 1;
		else
			EXPECT_TRUE(CPU_EQUAL(&now, &both));
		moem_tpool_destroy(p);
		/* the mask it had before the move, back */
		ASSERT_EQ(0, sched_getaffinity(0, sizeof(now), &now));
		EXPECT_TRUE(CPU_EQUAL(&now, &both));
	}
	EXPECT_TRUE(moved);
	ASSERT_EQ(0, sched_setaffinity(0, sizeof(all), &all));
}

TEST_HARNESS_MAIN
