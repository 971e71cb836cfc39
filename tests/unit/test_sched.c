// SPDX-License-Identifier: GPL-2.0-only
/*
 * The serving scheduler (sched.h) against a fake model: sequences
 * generate a fixed token pattern, reserve prompt + max tokens of KV
 * when they start and give it back when they end. Checked: the token
 * budget and chunk bound of every step, decodes never starved by a long
 * prompt, join and leave at step boundaries, the queue bound, FIFO under
 * a full KV budget, cancellation freeing KV, live option changes, a
 * failing step, stop from the sink, and many threads submitting and
 * cancelling while the model thread steps.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/sched.h>

#include "kselftest_harness.h"

#define MAXR 512

struct freq {
	uint32_t id, prompt, max_tokens;
	uint32_t got;	  /* tokens delivered */
	uint32_t stop_at; /* the sink ends it after this many (0: never) */
	uint32_t prefilled;
	uint32_t cached;    /* prompt tokens f_start says the model holds */
	struct freq *after; /* f_start says -EAGAIN until its prompt is prefilled */
	int done;	    /* done() calls */
	enum moem_sched_finish why;
	int err;
	bool started;
	uint64_t first_step, last_step;
};

struct fseq {
	struct freq *r;
	uint32_t generated;
};

struct fake {
	uint64_t kv_total, kv_used;
	uint32_t starts, ends;
	uint64_t step_no;
	int fail_step;		  /* the step number that fails (0: none) */
	struct moem_sched_opts o; /* what the checks compare with */
	uint32_t max_step_tokens, max_items;
	uint32_t bad; /* invariant violations */
	uint32_t steps_with_prefill, steps_with_decode_and_prefill;
	pthread_mutex_t lock; /* done() from the model thread, read by others */
	uint32_t done_count;
};

static int f_start(void *be, void *req, uint32_t prompt_len, uint64_t *seq, uint32_t *cached)
{
	struct fake *f = be;
	struct freq *r = req;
	struct fseq *s;
	uint64_t need = (uint64_t)prompt_len + r->max_tokens;

	if (r->after && r->after->prefilled < r->after->prompt)
		return -EAGAIN;
	if (need > f->kv_total)
		return -E2BIG;
	if (f->kv_used + need > f->kv_total)
		return -ENOSPC;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->r = r;
	r->started = true;
	f->kv_used += need;
	f->starts++;
	*seq = (uintptr_t)s;
	*cached = r->cached;
	/* what the scheduler may skip: at least the last token is computed */
	r->prefilled = r->cached < prompt_len ? r->cached : prompt_len - 1;
	return 0;
}

static int f_step(void *be, const struct moem_sched_item *it, uint32_t n,
		  struct moem_sched_out *out)
{
	struct fake *f = be;
	uint32_t tokens = 0;
	bool prefill = false, decode = false;

	f->step_no++;
	if (f->fail_step && f->step_no == (uint64_t)f->fail_step)
		return -EIO;
	for (uint32_t i = 0; i < n; i++) {
		struct fseq *s = (struct fseq *)(uintptr_t)it[i].seq;
		struct freq *r = s->r;

		if (r != it[i].req)
			f->bad++;
		tokens += it[i].n;
		if (it[i].decode) {
			decode = true;
			if (it[i].n != 1 || r->prefilled != r->prompt)
				f->bad++;
		} else {
			prefill = true;
			/* Chunks in order, none past the prompt, none too big. */
			if (it[i].first != r->prefilled || it[i].n > f->o.prefill_chunk ||
			    it[i].first + it[i].n > r->prompt)
				f->bad++;
			r->prefilled += it[i].n;
			if (it[i].samples != (r->prefilled == r->prompt))
				f->bad++;
		}
		if (!r->first_step)
			r->first_step = f->step_no;
		r->last_step = f->step_no;
		if (!it[i].samples)
			continue;
		out[i].token = (int32_t)((r->id * 7 + s->generated) % 1000);
		out[i].logprob = -0.5f;
		s->generated++;
		if (s->generated >= r->max_tokens)
			out[i].finish = MOEM_SCHED_LENGTH;
	}
	if (tokens > f->max_step_tokens)
		f->max_step_tokens = tokens;
	if (n > f->max_items)
		f->max_items = n;
	f->steps_with_prefill += prefill;
	f->steps_with_decode_and_prefill += prefill && decode;
	return 0;
}

static void f_end(void *be, uint64_t seq)
{
	struct fake *f = be;
	struct fseq *s = (struct fseq *)(uintptr_t)seq;

	f->kv_used -= (uint64_t)s->r->prompt + s->r->max_tokens;
	f->ends++;
	free(s);
}

static bool k_token(void *arg, void *req, const struct moem_sched_out *o)
{
	struct freq *r = req;

	(void)arg;
	(void)o;
	r->got++;
	return r->stop_at && r->got >= r->stop_at;
}

static void k_done(void *arg, void *req, enum moem_sched_finish why, int err)
{
	struct fake *f = arg;
	struct freq *r = req;

	r->done++;
	r->why = why;
	r->err = err;
	pthread_mutex_lock(&f->lock);
	f->done_count++;
	pthread_mutex_unlock(&f->lock);
}

static const struct moem_sched_ops fops = {
	.start = f_start,
	.step = f_step,
	.end = f_end,
};

static struct moem_sched *mk(struct __test_metadata *_metadata, struct fake *f, uint32_t waiting,
			     uint32_t running, uint32_t step_tokens, uint32_t chunk, uint64_t kv)
{
	struct moem_sched_sink sink = {.token = k_token, .done = k_done, .arg = f};
	struct moem_sched *s = NULL;

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	f->kv_total = kv;
	f->o = (struct moem_sched_opts){waiting, running, step_tokens, chunk};
	EXPECT_EQ(0, moem_sched_create(&f->o, &fops, f, &sink, &s));
	return s;
}

static int run_until_idle(struct moem_sched *s, int max_steps)
{
	int steps = 0, r;

	for (int i = 0; moem_sched_busy(s) && i < max_steps; i++) {
		r = moem_sched_step(s);
		if (r < 0)
			return r;
		steps += r;
	}
	return steps;
}

TEST(options_checked)
{
	struct moem_sched_opts o;

	moem_sched_opts_default(&o);
	EXPECT_EQ(0, moem_sched_opts_check(&o));
	o.step_tokens = o.max_running - 1;
	EXPECT_EQ(-EINVAL, moem_sched_opts_check(&o));
	moem_sched_opts_default(&o);
	o.prefill_chunk = o.step_tokens + 1;
	EXPECT_EQ(-EINVAL, moem_sched_opts_check(&o));
	moem_sched_opts_default(&o);
	o.max_waiting = 0;
	EXPECT_EQ(-EINVAL, moem_sched_opts_check(&o));
	moem_sched_opts_default(&o);
	o.max_running = 0;
	EXPECT_EQ(-EINVAL, moem_sched_opts_check(&o));
}

TEST(one_request_prefill_in_chunks_then_decode)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 4, 16, 8, 1000);
	struct freq r = {.id = 1, .prompt = 20, .max_tokens = 5};

	ASSERT_EQ(0, moem_sched_submit(s, &r, r.prompt));
	/* 20 prompt tokens in chunks of 8: 3 steps (the last samples), then 4 decodes. */
	EXPECT_EQ(7, run_until_idle(s, 100));
	EXPECT_EQ(1, r.done);
	EXPECT_EQ(MOEM_SCHED_LENGTH, r.why);
	EXPECT_EQ(5u, r.got);
	EXPECT_EQ(20u, r.prefilled);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	EXPECT_EQ(f.starts, f.ends);
	moem_sched_destroy(s);
}

/*
 * A prompt whose beginning the model holds (a cached prefix) is prefilled
 * from there; a claim of the whole prompt still leaves its last token to
 * compute, as the token after it is sampled from that position.
 */
TEST(cached_prefix_is_not_prefilled)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 4, 16, 8, 1000);
	struct freq a = {.id = 1, .prompt = 20, .max_tokens = 5, .cached = 16};
	struct freq b = {.id = 2, .prompt = 20, .max_tokens = 1, .cached = 20};
	struct moem_sched_stats st;

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	/* 4 prompt tokens in one step (it samples), then 4 decodes */
	EXPECT_EQ(5, run_until_idle(s, 100));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(4u, st.prefill_tokens);
	ASSERT_EQ(0, moem_sched_submit(s, &b, b.prompt));
	EXPECT_EQ(1, run_until_idle(s, 100));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(5u, st.prefill_tokens);
	EXPECT_EQ(5u, a.got);
	EXPECT_EQ(1u, b.got);
	EXPECT_EQ(20u, a.prefilled);
	EXPECT_EQ(20u, b.prefilled);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	moem_sched_destroy(s);
}

/*
 * A request that waits for another's prefill (-EAGAIN: the other choices
 * of n > 1, which take the first's prompt from the prefix cache) starts
 * in the step after it, ahead of what came later, without counting as a
 * KV wait; with nothing running it fails.
 */
TEST(eagain_waits_for_a_running_prefill)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 4, 16, 8, 1000);
	struct freq a = {.id = 1, .prompt = 20, .max_tokens = 3};
	struct freq b = {.id = 2, .prompt = 20, .max_tokens = 3, .after = &a};
	struct freq c = {.id = 3, .prompt = 4, .max_tokens = 2};
	struct freq lone = {.id = 4, .prompt = 4, .max_tokens = 2, .after = &b};
	struct moem_sched_stats st;

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &b, b.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &c, c.prompt));
	run_until_idle(s, 100);
	/* a prefills in steps 1-3 (chunks of 8); b starts in step 4, c after it */
	EXPECT_EQ(1u, a.first_step);
	EXPECT_EQ(4u, b.first_step);
	EXPECT_GE(c.first_step, b.first_step);
	EXPECT_EQ(3u, a.got);
	EXPECT_EQ(3u, b.got);
	EXPECT_EQ(2u, c.got);
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(0u, st.kv_waits);
	EXPECT_EQ(0u, f.bad);
	/* b's prompt is done now, but one that waits with nothing running fails */
	b.prefilled = 0;
	ASSERT_EQ(0, moem_sched_submit(s, &lone, lone.prompt));
	run_until_idle(s, 100);
	EXPECT_EQ(1, lone.done);
	EXPECT_EQ(MOEM_SCHED_ERROR, lone.why);
	EXPECT_EQ(-EAGAIN, lone.err);
	EXPECT_EQ(f.starts, f.ends);
	moem_sched_destroy(s);
}

TEST(long_prompt_does_not_stall_decodes)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 8, 32, 16, 100000);
	struct freq a[4], big = {.id = 99, .prompt = 1000, .max_tokens = 3};
	struct moem_sched_stats st;

	for (int i = 0; i < 4; i++) {
		a[i] = (struct freq){.id = (uint32_t)i, .prompt = 4, .max_tokens = 200};
		ASSERT_EQ(0, moem_sched_submit(s, &a[i], a[i].prompt));
	}
	/* The short ones prefill in one step and decode from the next. */
	ASSERT_EQ(1, moem_sched_step(s));
	ASSERT_EQ(0, moem_sched_submit(s, &big, big.prompt));
	while (big.prefilled < big.prompt) {
		uint32_t before[4];

		for (int i = 0; i < 4; i++)
			before[i] = a[i].got;
		ASSERT_EQ(1, moem_sched_step(s));
		/* Every step of the long prefill also decoded each stream. */
		for (int i = 0; i < 4; i++)
			ASSERT_EQ(before[i] + 1, a[i].got);
	}
	/* 1000 tokens, at most 32 - 4 a step: at least 36 steps of prefill. */
	EXPECT_GE(f.steps_with_decode_and_prefill, 36u);
	EXPECT_LE(f.max_step_tokens, 32u);
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(5u, st.running);
	EXPECT_GE(run_until_idle(s, 10000), 1);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(200u, a[i].got);
	EXPECT_EQ(3u, big.got);
	moem_sched_destroy(s);
}

TEST(join_and_leave_at_step_boundaries)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 64, 4, 64, 64, 100000);
	struct freq r[10];
	struct moem_sched_stats st;

	for (int i = 0; i < 10; i++) {
		r[i] = (struct freq){.id = (uint32_t)i, .prompt = 3, .max_tokens = 2 + (uint32_t)i};
		ASSERT_EQ(0, moem_sched_submit(s, &r[i], r[i].prompt));
	}
	ASSERT_EQ(1, moem_sched_step(s));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(4u, st.running); /* the batch bound */
	EXPECT_EQ(6u, st.waiting);
	EXPECT_GE(run_until_idle(s, 1000), 1);
	for (int i = 0; i < 10; i++) {
		EXPECT_EQ(1, r[i].done);
		EXPECT_EQ(2u + (uint32_t)i, r[i].got);
	}
	/* Later arrivals started as earlier ones left, in order. */
	for (int i = 4; i < 10; i++)
		EXPECT_GT(r[i].first_step, 1u);
	EXPECT_LE(f.max_items, 4u);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	moem_sched_destroy(s);
}

TEST(queue_bound_refuses)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 3, 1, 4, 4, 100000);
	struct freq r[5] = {0};
	struct moem_sched_stats st;

	for (int i = 0; i < 3; i++) {
		r[i].prompt = 2;
		r[i].max_tokens = 2;
		ASSERT_EQ(0, moem_sched_submit(s, &r[i], 2));
	}
	EXPECT_EQ(-EAGAIN, moem_sched_submit(s, &r[3], 2));
	EXPECT_EQ(-EINVAL, moem_sched_submit(s, &r[3], 0));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(1u, st.refused);
	/* One starts: a place frees in the queue. */
	ASSERT_EQ(1, moem_sched_step(s));
	r[3].prompt = 2;
	r[3].max_tokens = 2;
	EXPECT_EQ(0, moem_sched_submit(s, &r[3], 2));
	moem_sched_close(s);
	EXPECT_EQ(-ESHUTDOWN, moem_sched_submit(s, &r[4], 2));
	EXPECT_GE(run_until_idle(s, 100), 1);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(1, r[i].done);
	EXPECT_EQ(0, r[4].done);
	moem_sched_destroy(s);
}

TEST(kv_full_waits_in_order_and_too_big_fails)
{
	struct fake f;
	/* KV for one request of 10 + 10 at a time. */
	struct moem_sched *s = mk(_metadata, &f, 8, 8, 64, 64, 25);
	struct freq a = {.id = 1, .prompt = 10, .max_tokens = 10};
	struct freq b = {.id = 2, .prompt = 10, .max_tokens = 10};
	struct freq tiny = {.id = 3, .prompt = 1, .max_tokens = 1};
	struct freq huge = {.id = 4, .prompt = 30, .max_tokens = 1};
	struct moem_sched_stats st;

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &b, b.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &tiny, tiny.prompt));
	ASSERT_EQ(1, moem_sched_step(s));
	/* b does not fit; tiny would, but waits behind b (first come, first served). */
	EXPECT_TRUE(a.started);
	EXPECT_FALSE(b.started);
	EXPECT_FALSE(tiny.started);
	moem_sched_get_stats(s, &st);
	EXPECT_GE(st.kv_waits, 1u);
	EXPECT_GE(run_until_idle(s, 1000), 1);
	EXPECT_EQ(10u, a.got);
	EXPECT_EQ(10u, b.got);
	EXPECT_EQ(1u, tiny.got);
	EXPECT_GT(b.first_step, a.last_step - 1);
	/* A request the whole KV budget cannot hold fails with the model's error. */
	ASSERT_EQ(0, moem_sched_submit(s, &huge, huge.prompt));
	EXPECT_EQ(0, run_until_idle(s, 10));
	EXPECT_EQ(1, huge.done);
	EXPECT_EQ(MOEM_SCHED_ERROR, huge.why);
	EXPECT_EQ(-E2BIG, huge.err);
	EXPECT_EQ(0u, f.kv_used);
	moem_sched_destroy(s);
}

TEST(cancel_frees_at_the_next_boundary)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 8, 64, 8, 100000);
	struct freq run = {.id = 1, .prompt = 4, .max_tokens = 1000};
	struct freq queued = {.id = 2, .prompt = 4, .max_tokens = 1000};
	struct freq other = {.id = 3, .prompt = 4, .max_tokens = 5};
	struct moem_sched_stats st;

	ASSERT_EQ(0, moem_sched_submit(s, &run, run.prompt));
	ASSERT_EQ(1, moem_sched_step(s));
	ASSERT_EQ(1, moem_sched_step(s));
	EXPECT_EQ(2u, run.got);
	EXPECT_GT(f.kv_used, 0u);
	moem_sched_cancel(s, &run);
	EXPECT_TRUE(moem_sched_busy(s));
	EXPECT_EQ(0, run.done); /* not before the boundary */
	EXPECT_EQ(0, moem_sched_step(s));
	EXPECT_EQ(1, run.done);
	EXPECT_EQ(MOEM_SCHED_CANCEL, run.why);
	EXPECT_EQ(0u, f.kv_used);
	EXPECT_EQ(2u, run.got);

	/* A queued request leaves without ever starting; the others go on. */
	moem_sched_opts_default(&f.o);
	ASSERT_EQ(0, moem_sched_submit(s, &queued, queued.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &other, other.prompt));
	moem_sched_cancel(s, &queued);
	moem_sched_cancel(s, &queued); /* twice: once is enough */
	EXPECT_GE(run_until_idle(s, 100), 1);
	EXPECT_EQ(1, queued.done);
	EXPECT_EQ(MOEM_SCHED_CANCEL, queued.why);
	EXPECT_FALSE(queued.started);
	EXPECT_EQ(5u, other.got);
	EXPECT_EQ(MOEM_SCHED_LENGTH, other.why);
	moem_sched_cancel(s, &other); /* finished: ignored */
	EXPECT_FALSE(moem_sched_busy(s));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(2u, st.cancelled);
	EXPECT_EQ(1u, st.finished);
	EXPECT_EQ(0u, f.kv_used);
	EXPECT_EQ(f.starts, f.ends);
	moem_sched_destroy(s);
}

TEST(options_change_between_steps)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 64, 8, 64, 64, 100000);
	struct moem_sched_opts o = {64, 2, 16, 4};
	struct moem_sched_stats st;
	struct freq r[8];

	for (int i = 0; i < 8; i++) {
		r[i] = (struct freq){.id = (uint32_t)i, .prompt = 12, .max_tokens = 30};
		ASSERT_EQ(0, moem_sched_submit(s, &r[i], r[i].prompt));
	}
	ASSERT_EQ(1, moem_sched_step(s));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(6u, st.running); /* 64 tokens: five prompts of 12 and 4 of a sixth */
	/* Fewer sequences and smaller chunks from the next step on; the
	 * running ones stay, no new one starts until fewer than 2 run. */
	o.max_waiting = 64;
	EXPECT_EQ(-EINVAL, moem_sched_set_opts(s, &(struct moem_sched_opts){64, 8, 4, 4}));
	ASSERT_EQ(0, moem_sched_set_opts(s, &o));
	f.o = o;
	f.max_step_tokens = 0;
	ASSERT_EQ(1, moem_sched_step(s));
	moem_sched_get_stats(s, &st);
	EXPECT_EQ(6u, st.running);
	EXPECT_GE(run_until_idle(s, 10000), 1);
	EXPECT_LE(f.max_step_tokens, 16u);
	for (int i = 0; i < 8; i++)
		EXPECT_EQ(30u, r[i].got);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	moem_sched_destroy(s);
}

TEST(failed_step_fails_its_requests_only)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 8, 64, 64, 100000);
	struct freq a = {.id = 1, .prompt = 4, .max_tokens = 10};
	struct freq b = {.id = 2, .prompt = 4, .max_tokens = 10};

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	f.fail_step = 2;
	ASSERT_EQ(1, moem_sched_step(s));
	EXPECT_EQ(-EIO, moem_sched_step(s));
	EXPECT_EQ(1, a.done);
	EXPECT_EQ(MOEM_SCHED_ERROR, a.why);
	EXPECT_EQ(-EIO, a.err);
	EXPECT_EQ(0u, f.kv_used);
	/* The scheduler goes on with the next request. */
	ASSERT_EQ(0, moem_sched_submit(s, &b, b.prompt));
	EXPECT_GE(run_until_idle(s, 100), 1);
	EXPECT_EQ(MOEM_SCHED_LENGTH, b.why);
	EXPECT_EQ(10u, b.got);
	moem_sched_destroy(s);
}

TEST(sink_stop_ends_the_sequence)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 8, 64, 64, 100000);
	struct freq a = {.id = 1, .prompt = 4, .max_tokens = 100, .stop_at = 3};

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	EXPECT_EQ(3, run_until_idle(s, 100));
	EXPECT_EQ(1, a.done);
	EXPECT_EQ(MOEM_SCHED_STOP, a.why);
	EXPECT_EQ(3u, a.got);
	EXPECT_EQ(0u, f.kv_used);
	moem_sched_destroy(s);
}

TEST(destroy_ends_everything)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 8, 1, 64, 64, 100000);
	struct freq a = {.id = 1, .prompt = 4, .max_tokens = 100};
	struct freq b = {.id = 2, .prompt = 4, .max_tokens = 100};

	ASSERT_EQ(0, moem_sched_submit(s, &a, a.prompt));
	ASSERT_EQ(0, moem_sched_submit(s, &b, b.prompt));
	ASSERT_EQ(1, moem_sched_step(s));
	moem_sched_destroy(s);
	EXPECT_EQ(1, a.done);
	EXPECT_EQ(1, b.done);
	EXPECT_EQ(MOEM_SCHED_CANCEL, a.why);
	EXPECT_EQ(MOEM_SCHED_CANCEL, b.why);
	EXPECT_EQ(0u, f.kv_used);
}

/* Many threads submit and cancel while one thread steps. */
struct stress {
	struct moem_sched *s;
	struct fake *f;
	struct freq *r;
	uint32_t first, count;
	uint32_t refused;
};

static void *submitter(void *arg)
{
	struct stress *st = arg;

	for (uint32_t i = st->first; i < st->first + st->count; i++) {
		struct freq *r = &st->r[i];

		if (moem_sched_submit(st->s, r, r->prompt)) {
			st->refused++;
			r->done = -1; /* never queued */
			continue;
		}
		if (i % 3 == 0)
			moem_sched_cancel(st->s, r);
	}
	return NULL;
}

TEST(threads_submit_and_cancel_while_stepping)
{
	struct fake f;
	struct moem_sched *s = mk(_metadata, &f, 64, 16, 64, 16, 1u << 20);
	static struct freq r[MAXR];
	struct stress st[4];
	pthread_t th[4];
	uint32_t expect = 0, refused = 0;
	int guard = 0;

	for (uint32_t i = 0; i < MAXR; i++)
		r[i] = (struct freq){.id = i, .prompt = 1 + i % 40, .max_tokens = 1 + i % 17};
	for (int t = 0; t < 4; t++) {
		st[t] = (struct stress){s, &f, r, (uint32_t)t * (MAXR / 4), MAXR / 4, 0};
		ASSERT_EQ(0, pthread_create(&th[t], NULL, submitter, &st[t]));
	}
	/* Step until every submitter is done and everything has left. */
	for (int t = 0; t < 4; t++) {
		while (pthread_tryjoin_np(th[t], NULL) == EBUSY)
			ASSERT_GE(moem_sched_step(s), 0);
	}
	while (moem_sched_busy(s) && guard++ < 100000)
		ASSERT_GE(moem_sched_step(s), 0);
	for (int t = 0; t < 4; t++)
		refused += st[t].refused;
	for (uint32_t i = 0; i < MAXR; i++) {
		if (r[i].done == -1)
			continue;
		expect++;
		ASSERT_EQ(1, r[i].done) TH_LOG("request %u", i);
		if (r[i].why == MOEM_SCHED_LENGTH) {
			EXPECT_EQ(r[i].max_tokens, r[i].got);
		} else {
			ASSERT_EQ(MOEM_SCHED_CANCEL, r[i].why);
		}
	}
	EXPECT_EQ(expect + refused, (uint32_t)MAXR);
	EXPECT_EQ(expect, f.done_count);
	EXPECT_EQ(0u, f.bad);
	EXPECT_EQ(0u, f.kv_used);
	EXPECT_EQ(f.starts, f.ends);
	moem_sched_destroy(s);
}

TEST_HARNESS_MAIN
