// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CPU backend's fork-join pool (runtime/compute/cpu/tpool.c): every
 * item of every job runs exactly once and the job is complete when
 * moem_tpool_run() returns, for 1..8 workers, many jobs back to back
 * (the hand-over spins) and with the spin off (every hand-over through
 * the condition variables), for jobs whose items go to NUMA nodes, and
 * with workers woken ahead of jobs (moem_tpool_wake()).
 * No timing: a lost wake-up would hang a job, which the suite's timeout
 * reports; a lost or doubled item is counted.
 */
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

TEST_HARNESS_MAIN
