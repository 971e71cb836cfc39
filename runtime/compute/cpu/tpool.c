// SPDX-License-Identifier: GPL-2.0-only
/*
 * Fork-join thread pool (tpool.h): one job at a time, items by atomic
 * counters, one list per NUMA node plus one any worker may take.
 *
 * Items are claimed in runs (drain_list(): guided, at least
 * moem_tpool_grain()), so that a worker's next item is usually the one
 * after its current: the CPU kernels prefetch the rows that follow their
 * own, which are the next item's. One at a time, with two workers
 * taking turns, those rows were the other worker's, and the prefetch
 * only pulled them into the wrong core's cache (bench_kernels, 2
 * threads, AMD EPYC: bf16 at 4 tokens about 241 us an expert against
 * 200-214 claimed four at a time, q2 at one token 60 against 54-56;
 * then guided runs against four at a time: q2 at one token 39 against
 * 48, at 4 tokens 69 against 87).
 *
 * A decode step is a few dozen jobs a few microseconds apart (every
 * projection, norm and expert pass is one), so both hand-overs spin
 * before they sleep: a worker polls the job generation for spin_ns after
 * its last job, and the caller polls the count of busy workers for as
 * long before it waits on the condition variable. Waking a sleeping
 * thread through the futex costs tens of microseconds on a busy machine,
 * about what a small projection takes; with the spin, a step's jobs hand
 * over in well under one. The sleep paths stay for idle pools (a server
 * between requests) and for workers the scheduler took away meanwhile.
 * The poll yields the CPU now and then: where other work is waiting for
 * it (a shared machine) a spinning thread only delays the job it waits
 * for; where none is, sched_yield() returns at once.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <moem/error.h>

#include "tpool.h"

#define TPOOL_MOVED 4 /* callers whose affinity a pool changed, at most */

struct node_list {
	const uint32_t *items; /* NULL: the identity 0..n-1 */
	uint32_t n;
	uint32_t grain;	  /* items claimed at a time, at least (moem_tpool_grain()) */
	uint32_t workers; /* workers that take from it */
	atomic_uint next;
};

struct moem_tpool {
	uint32_t n, n_nodes, pinned;
	pthread_t *threads;
	uint16_t *wnode;	/* [n] node of each worker */
	uint32_t *wcount;	/* [n_nodes] workers per node */
	pthread_mutex_t submit; /* one job at a time */
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	atomic_uint_fast64_t gen; /* job generation: a new value publishes the job */
	atomic_uint busy;	  /* workers still in the current job */
	atomic_int stop;
	uint32_t sleepers;	      /* workers waiting on go, under lock */
	uint64_t wake_gen;	      /* moem_tpool_wake() calls, under lock */
	int waiting;		      /* the caller waits on done, under lock */
	atomic_uint_fast64_t spin_ns; /* how long either side polls before it sleeps */
	/* the current job: lists[0..n_nodes) per node, lists[n_nodes] for anyone */
	moem_tpool_fn fn;
	void *arg;
	struct node_list lists[MOEM_TPOOL_MAX_NODES + 1];
	uint32_t *order; /* run_nodes' item lists, grown under submit */
	uint32_t order_cap;
	cpu_set_t wcpus; /* the CPUs workers are pinned to */
	/* callers moved off them (under submit): thread and its mask before */
	uint32_t n_moved;
	pid_t moved_tid[TPOOL_MOVED];
	cpu_set_t moved_mask[TPOOL_MOVED];
};

struct worker_arg {
	struct moem_tpool *p;
	uint32_t id;
	int cpu;
};

uint32_t moem_tpool_grain(uint32_t n_items, uint32_t n_workers)
{
	const uint32_t g = n_items / (16 * (n_workers ? n_workers : 1));

	return g < 1 ? 1 : g > MOEM_TPOOL_GRAIN_MAX ? MOEM_TPOOL_GRAIN_MAX : g;
}

/*
 * Guided claims: a worker takes 1 / (2 workers) of what is left (at
 * least the grain), so the first claims are long runs of consecutive
 * items, whose rows the kernels' prefetch of the next rows finds in its
 * own core's cache, and the last are short, so the workers end
 * together. With a fixed claim of 4 (bench_kernels, 2 threads, AMD
 * EPYC, 64 experts a call, alternated runs) q2 at one token took 48 us
 * an expert where whole experts a claim took 38.
 */
static void drain_list(struct moem_tpool *p, struct node_list *l, uint32_t worker)
{
	const uint32_t div = 2 * (l->workers ? l->workers : 1);
	uint32_t i = atomic_load_explicit(&l->next, memory_order_relaxed);

	while (i < l->n) {
		uint32_t take = (l->n - i) / div, end;

		take = take < l->grain ? l->grain : take;
		end = l->n - i < take ? l->n : i + take;
		if (!atomic_compare_exchange_weak_explicit(&l->next, &i, end, memory_order_relaxed,
							   memory_order_relaxed))
			continue; /* i is the counter's value now */
		for (; i < end; i++)
			p->fn(p->arg, l->items ? l->items[i] : i, worker);
		i = atomic_load_explicit(&l->next, memory_order_relaxed);
	}
}

static void drain(struct moem_tpool *p, uint32_t worker)
{
	drain_list(p, &p->lists[p->wnode[worker]], worker);
	drain_list(p, &p->lists[p->n_nodes], worker);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Poll until done(p, arg) or spin_ns have passed; whether done. */
static bool spin_until(struct moem_tpool *p, bool (*done)(struct moem_tpool *, uint64_t),
		       uint64_t arg)
{
	const uint64_t spin = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
	uint64_t t0 = 0;

	if (!spin)
		return done(p, arg);
	for (uint32_t i = 0;; i++) {
		if (done(p, arg))
			return true;
		cpu_relax();
		if ((i & 63) == 63) { /* the clock now and then: a pause is 10-150 cycles */
			uint64_t t = mono_ns();

			/* on a machine with more runnable threads than CPUs, let them run */
			sched_yield();

			if (!t0)
				t0 = t;
			else if (t - t0 >= spin)
				return done(p, arg);
		}
	}
}

static bool job_posted(struct moem_tpool *p, uint64_t seen)
{
	return atomic_load_explicit(&p->gen, memory_order_acquire) != seen ||
	       atomic_load_explicit(&p->stop, memory_order_relaxed);
}

static bool job_done(struct moem_tpool *p, uint64_t unused)
{
	return !atomic_load_explicit(&p->busy, memory_order_acquire);
}

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct moem_tpool *p = wa.p;
	uint64_t seen = 0;

	free(v);
	for (;;) {
		if (!spin_until(p, job_posted, seen)) {
			bool woken;

			/*
			 * gen and stop change before the caller takes the lock
			 * to look at sleepers, so one read here under the lock
			 * sees the change or is woken by its broadcast.
			 */
			pthread_mutex_lock(&p->lock);
			p->sleepers++;
			for (uint64_t w = p->wake_gen; !job_posted(p, seen) && p->wake_gen == w;)
				pthread_cond_wait(&p->go, &p->lock);
			p->sleepers--;
			woken = !job_posted(p, seen);
			pthread_mutex_unlock(&p->lock);
			if (woken)
				continue; /* moem_tpool_wake(): poll for the job coming */
		}
		if (atomic_load(&p->stop))
			break;
		/* the caller waits for every worker before it posts the next job */
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		drain(p, wa.id);
		if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&p->lock);
			if (p->waiting)
				pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->lock);
		}
	}
	return NULL;
}

/* Start worker i, pinned to cpu (>= 0) from its first instruction. */
static int start_worker(struct moem_tpool *p, uint32_t i, int cpu)
{
	struct worker_arg *wa = malloc(sizeof(*wa));
	pthread_attr_t attr;
	int ret;

	if (!wa)
		return -ENOMEM;
	*wa = (struct worker_arg){p, i, cpu};
	ret = -pthread_attr_init(&attr);
	if (!ret && cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		ret = -pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	if (!ret)
		ret = -pthread_create(&p->threads[i], &attr, worker_main, wa);
	pthread_attr_destroy(&attr);
	if (ret) {
		free(wa);
		if (cpu >= 0)
			return moem_errf(-ret, "cpu backend: cannot start worker %u on CPU %d", i,
					 cpu);
		return moem_errf(-ret, "cpu backend: cannot start worker thread %u", i);
	}
	return 0;
}

int moem_tpool_create(uint32_t n, const struct moem_tpool_place *place, struct moem_tpool **out)
{
	struct moem_tpool *p;
	uint32_t i = 1;
	int ret;

	*out = NULL;
	if (!n)
		n = 1;
	if (place && (!place->n_nodes || place->n_nodes > MOEM_TPOOL_MAX_NODES))
		return moem_errf(EINVAL, "cpu backend: %u NUMA nodes (1..%d)", place->n_nodes,
				 MOEM_TPOOL_MAX_NODES);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = n;
	p->n_nodes = place ? place->n_nodes : 1;
	atomic_init(&p->spin_ns, MOEM_TPOOL_SPIN_NS);
	p->threads = calloc(n, sizeof(*p->threads));
	p->wnode = calloc(n, sizeof(*p->wnode));
	p->wcount = calloc(p->n_nodes, sizeof(*p->wcount));
	if (!p->threads || !p->wnode || !p->wcount) {
		free(p->threads);
		free(p->wnode);
		free(p->wcount);
		free(p);
		return -ENOMEM;
	}
	for (uint32_t w = 0; w < n; w++) {
		uint16_t nd = place ? place->node[w] : 0;

		p->wnode[w] = nd < p->n_nodes ? nd : 0;
		p->wcount[p->wnode[w]]++;
	}
	pthread_mutex_init(&p->submit, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (; i < n; i++) {
		int cpu = place && place->cpu ? place->cpu[i] : -1;

		ret = start_worker(p, i, cpu);
		if (ret)
			goto err_stop;
		p->pinned += cpu >= 0;
		if (cpu >= 0 && cpu < CPU_SETSIZE)
			CPU_SET(cpu, &p->wcpus);
	}
	*out = p;
	return 0;

err_stop:
	p->n = i; /* threads 1..i-1 are running */
	moem_tpool_destroy(p);
	return ret;
}

void moem_tpool_destroy(struct moem_tpool *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, 1);
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (uint32_t i = 1; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	/* a thread id may be reused once its thread is gone: only our own */
	for (uint32_t i = 0; i < p->n_moved; i++)
		if (p->moved_tid[i] == gettid())
			sched_setaffinity(0, sizeof(p->moved_mask[i]), &p->moved_mask[i]);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->submit);
	free(p->threads);
	free(p->wnode);
	free(p->wcount);
	free(p->order);
	free(p);
}

uint32_t moem_tpool_size(const struct moem_tpool *p)
{
	return p->n;
}

uint32_t moem_tpool_nodes(const struct moem_tpool *p)
{
	return p->n_nodes;
}

uint32_t moem_tpool_pinned(const struct moem_tpool *p)
{
	return p->pinned;
}

void moem_tpool_wake(struct moem_tpool *p)
{
	pthread_mutex_lock(&p->lock);
	if (p->sleepers) {
		p->wake_gen++;
		pthread_cond_broadcast(&p->go);
	}
	pthread_mutex_unlock(&p->lock);
}

void moem_tpool_set_spin(struct moem_tpool *p, uint64_t ns)
{
	atomic_store_explicit(&p->spin_ns, ns, memory_order_relaxed);
}

uint32_t moem_tpool_worker_node(const struct moem_tpool *p, uint32_t w)
{
	return w < p->n ? p->wnode[w] : 0;
}

/*
 * The caller is worker 0 and runs where its thread runs. Found on the CPU
 * a worker is pinned to, it shares that CPU with the worker for the whole
 * job: the scheduler cannot move the worker and was slow to move the
 * caller (bench_kernels, q8 at 4 tokens on a 2-CPU machine: one thread's
 * speed, 330 us an expert against 185, for the first 1-3 s of a process,
 * and now and then after). Such a caller is kept off the workers' CPUs
 * from then on; the pool's destruction gives it its mask back when that
 * thread destroys it. A mask with only workers' CPUs is left alone, and
 * so are callers beyond TPOOL_MOVED. Called with submit held.
 */
static void caller_off_workers(struct moem_tpool *p)
{
	const int c = sched_getcpu();
	cpu_set_t now, want;
	pid_t tid;
	uint32_t i;

	if (!p->pinned || c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &p->wcpus))
		return;
	tid = gettid();
	for (i = 0; i < p->n_moved && p->moved_tid[i] != tid; i++)
		;
	if (i == TPOOL_MOVED || sched_getaffinity(0, sizeof(now), &now))
		return;
	CPU_XOR(&want, &now, &p->wcpus); /* want = now without the workers' CPUs */
	CPU_AND(&want, &want, &now);
	if (!CPU_COUNT(&want) || sched_setaffinity(0, sizeof(want), &want))
		return;
	if (i == p->n_moved) {
		p->moved_tid[i] = tid;
		p->moved_mask[i] = now;
		p->n_moved++;
	}
}

/* Run the job set up in p->lists on every worker; called with submit held. */
static void run_locked(struct moem_tpool *p, moem_tpool_fn fn, void *arg, uint32_t n_items)
{
	p->fn = fn;
	p->arg = arg;
	if (p->n == 1 || n_items == 1) {
		/* the caller alone: its own node's list and then every other */
		for (uint32_t l = 0; l <= p->n_nodes; l++)
			drain_list(p, &p->lists[l], 0);
		return;
	}
	caller_off_workers(p);
	atomic_store_explicit(&p->busy, p->n - 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_mutex_lock(&p->lock);
	if (p->sleepers)
		pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	drain(p, 0);
	if (spin_until(p, job_done, 0))
		return;
	pthread_mutex_lock(&p->lock);
	p->waiting = 1;
	while (!job_done(p, 0))
		pthread_cond_wait(&p->done, &p->lock);
	p->waiting = 0;
	pthread_mutex_unlock(&p->lock);
}

void moem_tpool_run(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg)
{
	if (!n_items)
		return;
	pthread_mutex_lock(&p->submit);
	for (uint32_t l = 0; l < p->n_nodes; l++) {
		p->lists[l].n = 0;
		atomic_store(&p->lists[l].next, 0);
	}
	p->lists[p->n_nodes].items = NULL;
	p->lists[p->n_nodes].n = n_items;
	p->lists[p->n_nodes].grain = moem_tpool_grain(n_items, p->n);
	p->lists[p->n_nodes].workers = p->n;
	atomic_store(&p->lists[p->n_nodes].next, 0);
	run_locked(p, fn, arg, n_items);
	pthread_mutex_unlock(&p->submit);
}

int moem_tpool_run_nodes(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg,
			 const uint16_t *item_node)
{
	uint32_t count[MOEM_TPOOL_MAX_NODES + 1] = {0}, pos[MOEM_TPOOL_MAX_NODES + 1];
	const uint32_t any = p->n_nodes;

	if (p->n_nodes == 1 || !item_node) {
		moem_tpool_run(p, n_items, fn, arg);
		return 0;
	}
	if (!n_items)
		return 0;
	pthread_mutex_lock(&p->submit);
	if (p->order_cap < n_items) {
		uint32_t *o = realloc(p->order, sizeof(*o) * n_items);

		if (!o) {
			pthread_mutex_unlock(&p->submit);
			return moem_errf(ENOMEM, "cpu backend: no memory for %u work items",
					 n_items);
		}
		p->order = o;
		p->order_cap = n_items;
	}
#define ITEM_LIST(i) (item_node[i] < any && p->wcount[item_node[i]] ? item_node[i] : any)
	for (uint32_t i = 0; i < n_items; i++)
		count[ITEM_LIST(i)]++;
	for (uint32_t l = 0, at = 0; l <= any; l++) {
		pos[l] = at;
		p->lists[l].items = p->order + at;
		p->lists[l].n = count[l];
		/* a node's items go to its own workers first, the rest to all */
		p->lists[l].workers = l < any ? p->wcount[l] : p->n;
		p->lists[l].grain = moem_tpool_grain(count[l], p->lists[l].workers);
		atomic_store(&p->lists[l].next, 0);
		at += count[l];
	}
	for (uint32_t i = 0; i < n_items; i++)
		p->order[pos[ITEM_LIST(i)]++] = i;
#undef ITEM_LIST
	run_locked(p, fn, arg, n_items);
	pthread_mutex_unlock(&p->submit);
	return 0;
}
