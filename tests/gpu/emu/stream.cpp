// SPDX-License-Identifier: GPL-2.0-only
/*
 * The kernel emulator's streams, events and graphs. Each stream is a
 * thread that runs its operations (kernels, copies, memsets, event
 * records, event waits) in order while the host goes on, as a GPU would:
 * a host that reads a result, reuses a buffer or frees memory without
 * waiting for the stream gets what a GPU would give it, stale bytes or a
 * fault, not the right answer by luck. Copies start MOEM_EMU_LAG_US
 * (default 200) after they are due, to make that window wide. Kernels of
 * different streams take turns (one at a time); copies overlap them.
 *
 * Events mark a point in a stream: recording one takes a new marker that
 * completes when the stream reaches it (the time is taken then);
 * cuStreamWaitEvent makes a stream wait for the marker the event held at
 * the call. Stream capture records a stream's operations into a graph
 * instead of running them; cuGraphLaunch queues them again, as many times
 * as it is called. Calls a capture cannot contain (a synchronisation, a
 * pageable copy, an event record) end it as invalidated, like the driver;
 * so do the calls the driver calls potentially unsafe (allocations,
 * frees, host registrations and any synchronisation) made by the thread
 * that began a capture in global or thread-local mode, or by any thread
 * while a global-mode capture is under way: emu_capture_unsafe(). A
 * capture ends on the thread that began it (unless relaxed). With
 * MOEM_EMU_FAULT_CAPTURE=1 every capture ends invalidated (the engine's
 * fallback is tested with it).
 *
 * MOEM_EMU_STATS=FILE appends one line per process at exit: the host
 * synchronisations it made by kind, its launches (kernels launched
 * plainly; a capture's are not), graph launches and the kernels they
 * ran, and the graphs and graph execs still alive (a leak if not 0). With
 * MOEM_EMU_STEP_KERNEL=NAME, a kernel launched once at the start of each
 * step (moem_embed for a decode step), the line ends with step_syncs=
 * the host synchronisations between one launch of it and the next, step
 * by step (the last step, which runs into the exit, is left out):
 * tests/gpu/sync_per_step.sh checks one per decode step with it.
 */
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "cuda_emu.h"
#include "emu.h"

struct op {
	std::function<void()> fn;
	bool is_copy;
	const char *kernel; /* the kernel's name, for the counts of a graph's replays */
};

struct emu_graph {
	std::vector<op> ops;
};

struct emu_stream {
	pthread_t th;
	std::deque<op> q;
	uint64_t enq, done;
	bool stop, running;
	/* capture */
	bool capturing;
	int capture_err;
	int capture_mode; /* CU_STREAM_CAPTURE_MODE_*: 0 global, 1 thread-local, 2 relaxed */
	pthread_t capture_owner;
	emu_graph *graph;
};

struct marker {
	bool done;
	double ms;
};

struct emu_event {
	unsigned int flags;
	std::shared_ptr<marker> last;
};

static std::mutex g_mu;
static std::condition_variable g_cv;
static std::vector<emu_stream *> streams; /* live ones, under g_mu */
static emu_stream *legacy;
static long lag_us = -1;

/* ---- statistics ------------------------------------------------------------- */

enum { S_STREAM, S_EVENT, S_CTX, S_PAGEABLE, S_IMPLICIT, S_NR };
static const char *const sync_names[S_NR] = { "stream_sync", "event_sync", "ctx_sync",
					      "pageable_dtoh", "implicit" };
static std::atomic<uint64_t> n_sync[S_NR], n_launch, n_graph, n_graph_kernels, n_query;
static std::atomic<int64_t> n_graphs_live, n_execs_live;
static std::mutex step_mu;
/* Total syncs at each step kernel launch; never freed, so that it outlives
 * the static destructors that run before write_stats(). */
static std::vector<uint64_t> &step_marks = *new std::vector<uint64_t>;

static uint64_t total_syncs(void)
{
	uint64_t total = 0;

	for (int i = 0; i < S_NR; i++)
		total += n_sync[i];
	return total;
}

void emu_count_sync(const char *kind)
{
	for (int i = 0; i < S_NR; i++)
		if (!strcmp(kind, sync_names[i]))
			n_sync[i]++;
}

void emu_count_launch(const char *name, bool graph)
{
	static const char *step = getenv("MOEM_EMU_STEP_KERNEL");

	if (graph)
		n_graph_kernels++;
	else
		n_launch++;
	if (step && name && !strcmp(name, step)) {
		std::lock_guard<std::mutex> g(step_mu);

		step_marks.push_back(total_syncs());
	}
}

__attribute__((destructor)) static void write_stats(void)
{
	const char *path = getenv("MOEM_EMU_STATS");
	uint64_t total = total_syncs();
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "pid=%d syncs=%llu", (int)getpid(), (unsigned long long)total);
	for (int i = 0; i < S_NR; i++)
		fprintf(f, " %s=%llu", sync_names[i], (unsigned long long)n_sync[i]);
	fprintf(f, " queries=%llu launches=%llu graph_launches=%llu graph_kernels=%llu",
		(unsigned long long)n_query, (unsigned long long)n_launch,
		(unsigned long long)n_graph, (unsigned long long)n_graph_kernels);
	fprintf(f, " graphs_live=%lld execs_live=%lld", (long long)n_graphs_live,
		(long long)n_execs_live);
	if (getenv("MOEM_EMU_STEP_KERNEL")) {
		std::lock_guard<std::mutex> g(step_mu);

		fprintf(f, " step_syncs=");
		for (size_t i = 1; i < step_marks.size(); i++)
			fprintf(f, "%s%llu", i > 1 ? "," : "",
				(unsigned long long)(step_marks[i] - step_marks[i - 1]));
	}
	fputc('\n', f);
	fclose(f);
}

/* ---- streams ---------------------------------------------------------------- */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *worker(void *arg)
{
	emu_stream *s = (emu_stream *)arg;
	std::unique_lock<std::mutex> lk(g_mu);

	for (;;) {
		g_cv.wait(lk, [s] { return !s->q.empty() || s->stop; });
		if (s->q.empty())
			break;
		op o = std::move(s->q.front());
		s->running = true;
		lk.unlock();
		if (o.is_copy && lag_us > 0)
			usleep((useconds_t)lag_us);
		if (!emu_sticky)
			o.fn();
		lk.lock();
		s->running = false;
		s->q.pop_front();
		s->done++;
		g_cv.notify_all();
	}
	return NULL;
}

static emu_stream *stream_new(void)
{
	emu_stream *s = new emu_stream();

	if (lag_us < 0) {
		const char *v = getenv("MOEM_EMU_LAG_US");

		lag_us = v ? atol(v) : 200;
	}
	if (pthread_create(&s->th, NULL, worker, s)) {
		delete s;
		return NULL;
	}
	std::lock_guard<std::mutex> g(g_mu);
	streams.push_back(s);
	return s;
}

static emu_stream *resolve(emu_stream *s)
{
	static std::once_flag once;

	if (s)
		return s;
	std::call_once(once, [] { legacy = stream_new(); });
	return legacy;
}

/* Queue o on s, or record it into the graph s is capturing. */
static int push(emu_stream *s, op o, uint64_t *seq)
{
	s = resolve(s);
	std::lock_guard<std::mutex> g(g_mu);

	if (s->capturing) {
		if (!s->capture_err)
			s->graph->ops.push_back(std::move(o));
		return s->capture_err ? E_STREAM_CAPTURE_INVALIDATED : OK;
	}
	s->q.push_back(std::move(o));
	s->enq++;
	if (seq)
		*seq = s->enq;
	g_cv.notify_all();
	return OK;
}

int emu_enqueue_kernel(emu_stream *s, std::function<void()> fn, const char *kernel)
{
	return push(s, op{ std::move(fn), false, kernel }, NULL);
}

int emu_enqueue(emu_stream *s, std::function<void()> fn, bool is_copy, uint64_t *seq)
{
	return push(s, op{ std::move(fn), is_copy, NULL }, seq);
}

void emu_wait_seq(emu_stream *s, uint64_t seq)
{
	s = resolve(s);
	std::unique_lock<std::mutex> lk(g_mu);

	g_cv.wait(lk, [s, seq] { return s->done >= seq; });
}

void emu_drain_all(void)
{
	std::unique_lock<std::mutex> lk(g_mu);

	g_cv.wait(lk, [] {
		for (emu_stream *s : streams)
			if (s->done < s->enq)
				return false;
		return true;
	});
}

bool emu_capturing(emu_stream *s)
{
	std::lock_guard<std::mutex> g(g_mu);

	return s && s->capturing;
}

int emu_capture_refuse(emu_stream *s)
{
	std::lock_guard<std::mutex> g(g_mu);

	if (s && s->capturing)
		s->capture_err = E_STREAM_CAPTURE_INVALIDATED;
	return E_STREAM_CAPTURE_UNSUPPORTED;
}

int emu_capture_unsafe(void)
{
	std::lock_guard<std::mutex> g(g_mu);
	pthread_t self = pthread_self();
	bool hit = false;

	for (emu_stream *s : streams) {
		if (!s->capturing)
			continue;
		if (s->capture_mode == 0 ||
		    (s->capture_mode == 1 && pthread_equal(s->capture_owner, self))) {
			s->capture_err = E_STREAM_CAPTURE_INVALIDATED;
			hit = true;
		}
	}
	return hit ? E_STREAM_CAPTURE_UNSUPPORTED : OK;
}

static bool any_capture(void)
{
	std::lock_guard<std::mutex> g(g_mu);

	for (emu_stream *s : streams)
		if (s->capturing)
			return true;
	return false;
}

CUAPI cuStreamCreate(void **out, unsigned int)
{
	emu_stream *s;

	if (emu_sticky)
		return emu_sticky;
	s = stream_new();
	if (!s)
		return E_OUT_OF_MEMORY;
	*out = s;
	return OK;
}

CUAPI cuStreamDestroy_v2(void *p)
{
	emu_stream *s = (emu_stream *)p;

	if (!s)
		return E_INVALID_HANDLE;
	{
		std::lock_guard<std::mutex> g(g_mu);

		/* the driver lets queued work finish first; so does the thread */
		s->stop = true;
		g_cv.notify_all();
	}
	pthread_join(s->th, NULL);
	{
		std::lock_guard<std::mutex> g(g_mu);

		for (size_t i = 0; i < streams.size(); i++)
			if (streams[i] == s)
				streams.erase(streams.begin() + i);
	}
	delete s->graph;
	delete s;
	return OK;
}

CUAPI cuStreamSynchronize(void *p)
{
	emu_stream *s = (emu_stream *)p;

	if (emu_capturing(s))
		return emu_capture_refuse(s);
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	emu_count_sync("stream_sync");
	s = resolve(s);
	{
		std::unique_lock<std::mutex> lk(g_mu);

		g_cv.wait(lk, [s] { return s->done >= s->enq; });
	}
	return emu_sticky;
}

CUAPI cuStreamQuery(void *p)
{
	emu_stream *s = resolve((emu_stream *)p);
	std::lock_guard<std::mutex> g(g_mu);

	n_query++;
	if (emu_sticky)
		return emu_sticky;
	return s->done >= s->enq ? OK : E_NOT_READY;
}

CUAPI cuCtxSynchronize(void)
{
	if (any_capture()) {
		emu_capture_unsafe();
		return E_STREAM_CAPTURE_UNSUPPORTED;
	}
	emu_count_sync("ctx_sync");
	emu_drain_all();
	return emu_sticky;
}

/* ---- events ------------------------------------------------------------------- */

CUAPI cuEventCreate(void **e, unsigned int flags)
{
	if (emu_sticky)
		return emu_sticky;
	*e = new emu_event{ flags, nullptr };
	return OK;
}

CUAPI cuEventDestroy_v2(void *e)
{
	if (!e)
		return E_INVALID_HANDLE;
	{
		std::lock_guard<std::mutex> g(g_mu);

		delete (emu_event *)e; /* a queued record keeps its marker alive */
	}
	return OK;
}

CUAPI cuEventRecord(void *e, void *p)
{
	emu_event *ev = (emu_event *)e;
	emu_stream *s = (emu_stream *)p;
	auto m = std::make_shared<marker>();

	if (emu_sticky)
		return emu_sticky;
	if (!ev)
		return E_INVALID_HANDLE;
	/* Within a capture an event only orders captured streams: not used. */
	if (emu_capturing(s))
		return emu_capture_refuse(s);
	{
		std::lock_guard<std::mutex> g(g_mu);

		m->done = false;
		ev->last = m;
	}
	return emu_enqueue(
		s,
		[m] {
			std::lock_guard<std::mutex> g(g_mu);

			m->ms = now_ms();
			m->done = true;
			g_cv.notify_all();
		},
		false, NULL);
}

CUAPI cuEventQuery(void *e)
{
	emu_event *ev = (emu_event *)e;
	std::lock_guard<std::mutex> g(g_mu);

	n_query++;
	if (emu_sticky)
		return emu_sticky;
	return !ev->last || ev->last->done ? OK : E_NOT_READY;
}

CUAPI cuEventSynchronize(void *e)
{
	emu_event *ev = (emu_event *)e;
	std::shared_ptr<marker> m;

	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	emu_count_sync("event_sync");
	{
		std::unique_lock<std::mutex> lk(g_mu);

		m = ev->last;
		if (m)
			g_cv.wait(lk, [&m] { return m->done || emu_sticky; });
	}
	return emu_sticky;
}

CUAPI cuStreamWaitEvent(void *p, void *e, unsigned int)
{
	emu_event *ev = (emu_event *)e;
	emu_stream *s = (emu_stream *)p;
	std::shared_ptr<marker> m;

	if (emu_sticky)
		return emu_sticky;
	{
		std::lock_guard<std::mutex> g(g_mu);

		m = ev->last;
	}
	if (!m)
		return OK;
	if (emu_capturing(s)) {
		std::lock_guard<std::mutex> g(g_mu);

		/* an event recorded before the capture, already complete: no edge */
		if (m->done)
			return OK;
		if (s->capturing)
			s->capture_err = E_STREAM_CAPTURE_INVALIDATED;
		return E_STREAM_CAPTURE_UNSUPPORTED;
	}
	return emu_enqueue(
		s,
		[m] {
			std::unique_lock<std::mutex> lk(g_mu);

			g_cv.wait(lk, [&m] { return m->done || emu_sticky; });
		},
		false, NULL);
}

/*
 * The stream waits until a 32-bit word satisfies the condition (flags 0:
 * (int32_t)(*addr - value) >= 0, 1: equal), polling it as the GPU's front
 * end does; the word is host (pinned) or device memory.
 */
CUAPI cuStreamWaitValue32_v2(void *p, uint64_t addr, uint32_t value, unsigned int flags)
{
	if (emu_sticky)
		return emu_sticky;
	if ((flags & ~1u) || !emu_mem_is(addr, 4, EMU_ANY_DEVICE | EMU_PINNED))
		return E_INVALID_VALUE;
	return emu_enqueue(
		(emu_stream *)p,
		[addr, value, flags] {
			const volatile uint32_t *w = (const volatile uint32_t *)(uintptr_t)addr;
			struct timespec ts = { 0, 20000 };

			while (!emu_sticky && !(flags ? *w == value : (int32_t)(*w - value) >= 0))
				nanosleep(&ts, NULL);
		},
		false, NULL);
}

CUAPI cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
	emu_event *ea = (emu_event *)a, *eb = (emu_event *)b;
	std::lock_guard<std::mutex> g(g_mu);

	if (emu_sticky)
		return emu_sticky;
	if ((ea->flags | eb->flags) & 2 /* CU_EVENT_DISABLE_TIMING */)
		return E_INVALID_HANDLE;
	if (!ea->last || !eb->last)
		return E_INVALID_HANDLE;
	if (!ea->last->done || !eb->last->done)
		return E_NOT_READY;
	*ms = (float)(eb->last->ms - ea->last->ms);
	return OK;
}

/* ---- graphs ---------------------------------------------------------------------- */

CUAPI cuStreamBeginCapture_v2(void *p, int mode)
{
	emu_stream *s = (emu_stream *)p;
	std::lock_guard<std::mutex> g(g_mu);

	if (emu_sticky)
		return emu_sticky;
	if (!s) /* the legacy stream cannot be captured */
		return E_STREAM_CAPTURE_UNSUPPORTED;
	if (s->capturing || mode < 0 || mode > 2)
		return E_INVALID_VALUE;
	s->capturing = true;
	s->capture_err = 0;
	s->capture_mode = mode;
	s->capture_owner = pthread_self();
	s->graph = new emu_graph();
	return OK;
}

CUAPI cuStreamEndCapture(void *p, void **graph)
{
	emu_stream *s = (emu_stream *)p;
	std::lock_guard<std::mutex> g(g_mu);

	if (!s)
		return E_INVALID_VALUE;
	/* A stream not capturing: what the H200's driver answered (580.159.04). */
	if (!s->capturing)
		return E_ILLEGAL_STATE;
	/*
	 * Another thread ending a thread-local or global capture: refused, and
	 * the capture is over (the driver of the H200 run of 83b299c answered
	 * the capturing thread's own cuStreamEndCapture afterwards with
	 * CUDA_ERROR_ILLEGAL_STATE, as for a stream not capturing).
	 */
	if (s->capture_mode != 2 && !pthread_equal(s->capture_owner, pthread_self())) {
		s->capturing = false;
		delete s->graph;
		s->graph = NULL;
		return E_STREAM_CAPTURE_WRONG_THREAD;
	}
	s->capturing = false;
	{
		static const char *f = getenv("MOEM_EMU_FAULT_CAPTURE");

		if (f && !strcmp(f, "1"))
			s->capture_err = E_STREAM_CAPTURE_INVALIDATED;
	}
	if (s->capture_err) {
		delete s->graph;
		s->graph = NULL;
		*graph = NULL;
		return E_STREAM_CAPTURE_INVALIDATED;
	}
	*graph = s->graph;
	s->graph = NULL;
	n_graphs_live++;
	return OK;
}

CUAPI cuStreamIsCapturing(void *p, int *status)
{
	emu_stream *s = (emu_stream *)p;
	std::lock_guard<std::mutex> g(g_mu);

	/* CU_STREAM_CAPTURE_STATUS_NONE 0, ACTIVE 1, INVALIDATED 2 */
	*status = s && s->capturing ? (s->capture_err ? 2 : 1) : 0;
	return OK;
}

CUAPI cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long)
{
	if (emu_sticky)
		return emu_sticky;
	if (!graph)
		return E_INVALID_VALUE;
	*exec = new emu_graph(*(emu_graph *)graph);
	n_execs_live++;
	return OK;
}

CUAPI cuGraphLaunch(void *exec, void *p)
{
	emu_graph *gr = (emu_graph *)exec;
	int r = OK;

	if (emu_sticky)
		return emu_sticky;
	if (!gr)
		return E_INVALID_VALUE;
	if (emu_capturing((emu_stream *)p))
		return emu_capture_refuse((emu_stream *)p); /* no child graphs here */
	n_graph++;
	for (const op &o : gr->ops) {
		if (r)
			break;
		if (o.kernel) {
			emu_count_launch(o.kernel, true);
			r = emu_enqueue_kernel((emu_stream *)p, o.fn, o.kernel);
		} else {
			r = emu_enqueue((emu_stream *)p, o.fn, o.is_copy, NULL);
		}
	}
	return r;
}

CUAPI cuGraphExecDestroy(void *exec)
{
	if (!exec)
		return E_INVALID_VALUE;
	n_execs_live--;
	delete (emu_graph *)exec;
	return OK;
}

CUAPI cuGraphDestroy(void *graph)
{
	if (!graph)
		return E_INVALID_VALUE;
	n_graphs_live--;
	delete (emu_graph *)graph;
	return OK;
}
