// SPDX-License-Identifier: GPL-2.0-only
/*
 * The serving scheduler (sched.h). One mutex guards the queue, the
 * running list and the flags other threads set (cancel, options); the
 * model thread takes it only to plan a step and to file its results, and
 * never holds it across a call into the model or the sink, so an HTTP
 * thread never waits for a step and a step never waits for HTTP.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/sched.h>
#include <moem/util.h>

struct entry {
	void *req;
	uint64_t seq; /* once started */
	bool started;
	uint32_t prompt_len, computed;
	bool cancel;   /* moem_sched_cancel() asked */
	bool decoding; /* the prompt is prefilled: one token a step */
	bool leaving;  /* finished this step: dropped at the end of it */
	enum moem_sched_finish why;
	int err; /* why it failed to start */
	struct entry *next;
};

struct moem_sched {
	pthread_mutex_t lock;
	struct moem_sched_opts opts, pending;
	bool opts_changed, closed;
	const struct moem_sched_ops *ops;
	void *be;
	struct moem_sched_sink sink;
	struct entry *wait_head, *wait_tail;
	uint32_t n_waiting;
	struct entry **run; /* model thread writes, under the lock */
	uint32_t n_run, run_cap;
	uint32_t n_cancel; /* cancel flags set and not yet handled */
	struct moem_sched_stats st;
	/* Step scratch, model thread only. */
	struct moem_sched_item *items;
	struct moem_sched_out *outs;
	struct entry **item_entry;
	uint32_t items_cap;
};

void moem_sched_opts_default(struct moem_sched_opts *o)
{
	o->max_waiting = 256;
	o->max_running = 64;
	o->step_tokens = 512;
	o->prefill_chunk = 256;
}

int moem_sched_opts_check(const struct moem_sched_opts *o)
{
	if (o->max_waiting < 1 || o->max_waiting > 1000000)
		return moem_errf(EINVAL, "max-queue %u: 1..1000000", o->max_waiting);
	if (o->max_running < 1 || o->max_running > 4096)
		return moem_errf(EINVAL, "max-batch %u: 1..4096", o->max_running);
	if (o->step_tokens < o->max_running || o->step_tokens > 1u << 20)
		return moem_errf(EINVAL,
				 "step-tokens %u: at least max-batch (%u, one decode token per "
				 "sequence) and at most 1048576",
				 o->step_tokens, o->max_running);
	if (o->prefill_chunk < 1 || o->prefill_chunk > o->step_tokens)
		return moem_errf(EINVAL, "prefill-chunk %u: 1..step-tokens (%u)", o->prefill_chunk,
				 o->step_tokens);
	return 0;
}

int moem_sched_create(const struct moem_sched_opts *o, const struct moem_sched_ops *ops, void *be,
		      const struct moem_sched_sink *sink, struct moem_sched **out)
{
	struct moem_sched *s;
	int ret = moem_sched_opts_check(o);

	if (ret)
		return ret;
	if (!ops || !ops->start || !ops->step || !ops->end || !sink || !sink->token || !sink->done)
		return moem_errf(EINVAL, "scheduler: ops and sink need every required callback");
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->opts = *o;
	s->ops = ops;
	s->be = be;
	s->sink = *sink;
	*out = s;
	return 0;
}

static void wake(struct moem_sched *s)
{
	if (s->sink.wake)
		s->sink.wake(s->sink.arg);
}

void moem_sched_destroy(struct moem_sched *s)
{
	struct entry *e, *next;

	if (!s)
		return;
	for (e = s->wait_head; e; e = next) {
		next = e->next;
		s->sink.done(s->sink.arg, e->req, MOEM_SCHED_CANCEL, 0);
		free(e);
	}
	for (uint32_t i = 0; i < s->n_run; i++) {
		e = s->run[i];
		s->ops->end(s->be, e->seq);
		s->sink.done(s->sink.arg, e->req, MOEM_SCHED_CANCEL, 0);
		free(e);
	}
	free(s->run);
	free(s->items);
	free(s->outs);
	free(s->item_entry);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int moem_sched_submit(struct moem_sched *s, void *req, uint32_t prompt_len)
{
	struct entry *e;

	if (!prompt_len)
		return moem_errf(EINVAL, "an empty prompt");
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->req = req;
	e->prompt_len = prompt_len;
	pthread_mutex_lock(&s->lock);
	if (s->closed || s->n_waiting >= s->opts.max_waiting) {
		bool closed = s->closed;

		s->st.refused++;
		pthread_mutex_unlock(&s->lock);
		free(e);
		return closed ? moem_errf(ESHUTDOWN, "the server is shutting down")
			      : moem_errf(EAGAIN, "the queue is full (%u requests wait)",
					  s->opts.max_waiting);
	}
	if (s->wait_tail)
		s->wait_tail->next = e;
	else
		s->wait_head = e;
	s->wait_tail = e;
	s->n_waiting++;
	s->st.submitted++;
	pthread_mutex_unlock(&s->lock);
	wake(s);
	return 0;
}

void moem_sched_cancel(struct moem_sched *s, void *req)
{
	bool found = false;

	pthread_mutex_lock(&s->lock);
	for (struct entry *e = s->wait_head; e && !found; e = e->next)
		if (e->req == req) {
			found = !e->cancel;
			e->cancel = true;
		}
	for (uint32_t i = 0; i < s->n_run && !found; i++)
		if (s->run[i]->req == req) {
			found = !s->run[i]->cancel;
			s->run[i]->cancel = true;
		}
	if (found)
		s->n_cancel++;
	pthread_mutex_unlock(&s->lock);
	if (found)
		wake(s);
}

int moem_sched_set_opts(struct moem_sched *s, const struct moem_sched_opts *o)
{
	int ret = moem_sched_opts_check(o);

	if (ret)
		return ret;
	pthread_mutex_lock(&s->lock);
	s->pending = *o;
	s->opts_changed = true;
	pthread_mutex_unlock(&s->lock);
	wake(s);
	return 0;
}

void moem_sched_get_opts(struct moem_sched *s, struct moem_sched_opts *o)
{
	pthread_mutex_lock(&s->lock);
	*o = s->opts_changed ? s->pending : s->opts;
	pthread_mutex_unlock(&s->lock);
}

void moem_sched_close(struct moem_sched *s)
{
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	pthread_mutex_unlock(&s->lock);
}

bool moem_sched_busy(struct moem_sched *s)
{
	bool busy;

	pthread_mutex_lock(&s->lock);
	busy = s->n_waiting || s->n_run || s->n_cancel || s->opts_changed;
	pthread_mutex_unlock(&s->lock);
	return busy;
}

void moem_sched_get_stats(struct moem_sched *s, struct moem_sched_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	st->waiting = s->n_waiting;
	st->running = s->n_run;
	st->prefilling = 0;
	for (uint32_t i = 0; i < s->n_run; i++)
		st->prefilling += !s->run[i]->decoding;
	pthread_mutex_unlock(&s->lock);
}

/* Under the lock: take cancelled entries off both lists onto *drop. */
static void take_cancelled(struct moem_sched *s, struct entry **drop)
{
	struct entry **pp = &s->wait_head, *prev = NULL;
	uint32_t k = 0;

	while (*pp) {
		struct entry *e = *pp;

		if (e->cancel) {
			*pp = e->next;
			s->n_waiting--;
			e->next = *drop;
			*drop = e;
			continue;
		}
		prev = e;
		pp = &e->next;
	}
	s->wait_tail = prev;
	for (uint32_t i = 0; i < s->n_run; i++) {
		struct entry *e = s->run[i];

		if (e->cancel) {
			e->next = *drop;
			*drop = e;
		} else {
			s->run[k++] = e;
		}
	}
	s->n_run = k;
	s->n_cancel = 0;
}

static int grow_items(struct moem_sched *s, uint32_t n)
{
	struct moem_sched_item *it;
	struct moem_sched_out *o;
	struct entry **ie;
	uint32_t cap;

	if (n <= s->items_cap)
		return 0;
	cap = moem_max(n, s->items_cap * 2);
	it = realloc(s->items, cap * sizeof(*it));
	if (it)
		s->items = it;
	o = realloc(s->outs, cap * sizeof(*o));
	if (o)
		s->outs = o;
	ie = realloc(s->item_entry, cap * sizeof(*ie));
	if (ie)
		s->item_entry = ie;
	if (!it || !o || !ie)
		return -ENOMEM;
	s->items_cap = cap;
	return 0;
}

static int add_running(struct moem_sched *s, struct entry *e)
{
	if (s->n_run == s->run_cap) {
		uint32_t cap = s->run_cap ? s->run_cap * 2 : 16;
		struct entry **r = realloc(s->run, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		s->run = r;
		s->run_cap = cap;
	}
	s->run[s->n_run++] = e;
	return 0;
}

/* Plan a prompt chunk for e within *budget; false if none fits. */
static bool plan_chunk(struct moem_sched *s, struct entry *e, uint32_t *budget, uint32_t *n,
		       struct moem_sched_step_info *info)
{
	uint32_t left = e->prompt_len - e->computed;
	uint32_t c = moem_min(moem_min(left, s->opts.prefill_chunk), *budget);
	struct moem_sched_item *it = &s->items[*n];

	if (!c)
		return false;
	*it = (struct moem_sched_item){
		.seq = e->seq,
		.req = e->req,
		.first = e->computed,
		.n = c,
		.samples = c == left,
	};
	s->item_entry[(*n)++] = e;
	*budget -= c;
	info->prefills++;
	info->prefill_tokens += c;
	return true;
}

/*
 * Admit waiting requests while the budget, the batch bound and the KV
 * budget allow. The lock is dropped around ops->start(); the queue's
 * head is taken off first so no other thread sees it half started.
 */
static void admit(struct moem_sched *s, uint32_t *budget, uint32_t *n,
		  struct moem_sched_step_info *info, struct entry **failed)
{
	for (;;) {
		uint32_t cached;
		struct entry *e;
		int ret;

		pthread_mutex_lock(&s->lock);
		e = s->wait_head;
		if (!e || !*budget || s->n_run >= s->opts.max_running || e->cancel) {
			pthread_mutex_unlock(&s->lock);
			return;
		}
		s->wait_head = e->next;
		if (!s->wait_head)
			s->wait_tail = NULL;
		s->n_waiting--;
		e->next = NULL;
		pthread_mutex_unlock(&s->lock);

		cached = 0;
		ret = s->ops->start(s->be, e->req, e->prompt_len, &e->seq, &cached);
		e->started = !ret;
		e->computed = ret ? 0 : moem_min(cached, e->prompt_len - 1);
		pthread_mutex_lock(&s->lock);
		if ((ret == -ENOSPC || ret == -EMFILE || ret == -EAGAIN) && s->n_run) {
			/* Not now: first in line again, once others have left. */
			e->next = s->wait_head;
			s->wait_head = e;
			if (!s->wait_tail)
				s->wait_tail = e;
			s->n_waiting++;
			s->st.kv_waits += ret != -EAGAIN;
			pthread_mutex_unlock(&s->lock);
			return;
		}
		if (!ret)
			ret = grow_items(s, s->n_run + 1);
		if (!ret)
			ret = add_running(s, e);
		if (ret) {
			/* Refused for good (or -ENOSPC with nothing running: it
			 * would never start). */
			pthread_mutex_unlock(&s->lock);
			if (e->started)
				s->ops->end(s->be, e->seq);
			e->started = false;
			e->err = ret;
			e->next = *failed;
			*failed = e;
			continue;
		}
		pthread_mutex_unlock(&s->lock);
		plan_chunk(s, e, budget, n, info);
	}
}

/* Model thread: file e as gone (it must already be off the lists). */
static void finish(struct moem_sched *s, struct entry *e, enum moem_sched_finish why, int err)
{
	if (e->started)
		s->ops->end(s->be, e->seq);
	pthread_mutex_lock(&s->lock);
	if (why == MOEM_SCHED_CANCEL)
		s->st.cancelled++;
	else if (why == MOEM_SCHED_ERROR)
		s->st.failed++;
	else
		s->st.finished++;
	pthread_mutex_unlock(&s->lock);
	s->sink.done(s->sink.arg, e->req, why, err);
	free(e);
}

/* Under the lock: drop the entries marked leaving from the running list. */
static void compact_running(struct moem_sched *s)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < s->n_run; i++)
		if (!s->run[i]->leaving)
			s->run[k++] = s->run[i];
	s->n_run = k;
}

int moem_sched_step(struct moem_sched *s)
{
	struct moem_sched_step_info info = {0};
	struct entry *drop = NULL, *failed = NULL, *e, *next;
	uint32_t budget, n = 0;
	uint64_t t0;
	int ret;

	/* Boundary: options, cancellations. */
	pthread_mutex_lock(&s->lock);
	if (s->opts_changed) {
		s->opts = s->pending;
		s->opts_changed = false;
	}
	if (s->n_cancel)
		take_cancelled(s, &drop);
	ret = grow_items(s, s->n_run + 1);
	pthread_mutex_unlock(&s->lock);
	for (e = drop; e; e = next) {
		next = e->next;
		finish(s, e, MOEM_SCHED_CANCEL, 0);
	}
	if (ret)
		return ret;

	/* Plan: decodes first (one token each, never starved), then the
	 * prompt chunks of running sequences, then new sequences. The
	 * running list is only changed by this thread: read it unlocked. */
	budget = s->opts.step_tokens;
	for (uint32_t i = 0; i < s->n_run; i++) {
		e = s->run[i];
		if (!e->decoding)
			continue;
		s->items[n] = (struct moem_sched_item){
			.seq = e->seq, .req = e->req, .n = 1, .decode = true, .samples = true};
		s->item_entry[n++] = e;
		budget -= budget ? 1 : 0;
		info.decodes++;
	}
	for (uint32_t i = 0; i < s->n_run && budget; i++)
		if (!s->run[i]->decoding)
			plan_chunk(s, s->run[i], &budget, &n, &info);
	admit(s, &budget, &n, &info, &failed);
	for (e = failed; e; e = next) {
		next = e->next;
		finish(s, e, MOEM_SCHED_ERROR, e->err);
	}
	if (!n)
		return 0;

	info.items = n;
	info.tokens = info.decodes + info.prefill_tokens;
	info.running = s->n_run;
	for (uint32_t i = 0; i < n; i++)
		s->outs[i] = (struct moem_sched_out){.token = -1};
	t0 = moem_now_ns();
	ret = s->ops->step(s->be, s->items, n, s->outs);
	info.step_ns = moem_now_ns() - t0;
	info.ret = ret;

	/* File the results. */
	for (uint32_t i = 0; i < n; i++) {
		const struct moem_sched_item *it = &s->items[i];
		const struct moem_sched_out *o = &s->outs[i];
		enum moem_sched_finish why;

		e = s->item_entry[i];
		if (ret) {
			e->leaving = true;
			e->why = MOEM_SCHED_ERROR;
			continue;
		}
		if (!it->decode)
			e->computed += it->n;
		if (it->samples)
			e->decoding = true;
		/* A stop string wins over the model's reason of the same token. */
		why = o->finish;
		if (o->token >= 0 && s->sink.token(s->sink.arg, e->req, o))
			why = MOEM_SCHED_STOP;
		if (why != MOEM_SCHED_RUNNING) {
			e->leaving = true;
			e->why = why;
		}
	}
	pthread_mutex_lock(&s->lock);
	s->st.steps++;
	s->st.prefill_tokens += info.prefill_tokens;
	s->st.decode_tokens += info.decodes;
	compact_running(s);
	pthread_mutex_unlock(&s->lock);
	/* Off the running list now; a cancel that came during the step
	 * finds nothing (n_cancel is only a hint for moem_sched_busy()). */
	for (uint32_t i = 0; i < n; i++) {
		e = s->item_entry[i];
		if (e->leaving)
			finish(s, e, e->why, ret);
	}
	if (s->sink.stepped)
		s->sink.stepped(s->sink.arg, &info);
	return ret ? ret : 1;
}
