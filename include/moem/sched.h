/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The serving scheduler: continuous batching with chunked prefill, after
 * vLLM's v1 scheduler. Its whole state is a waiting queue with a bound,
 * a running list and a token budget per step:
 *
 *  - requests are submitted from any thread (the HTTP threads) and wait
 *    in FIFO order; a full queue refuses them at once (-EAGAIN: the
 *    server answers 429 with Retry-After);
 *  - at every step boundary, on the one thread that runs the model, the
 *    scheduler drops what was cancelled or finished (their sequences and
 *    KV blocks are freed there), then fills the step: one token for each
 *    running sequence that decodes, then the next prompt chunk of each
 *    sequence still prefilling, then new sequences from the queue while
 *    the budget, the batch bound and the KV budget allow;
 *  - a prompt is prefilled in chunks of at most prefill_chunk tokens, so
 *    a long prompt shares steps with everyone's decode tokens instead of
 *    stalling their streams;
 *  - the model (a decoder, or a fake in tests) is behind an ops table.
 *
 * The scheduler knows requests only as opaque pointers and prompt
 * lengths; what a token means (text, stop strings, streams) is the
 * sink's business. Options can change at any time and apply at the next
 * step boundary; lowering max_running never evicts a running sequence.
 */
#ifndef MOEM_SCHED_H
#define MOEM_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#define MOEM_SCHED_TOP_MAX 20 /* top logprobs per token, at most (OpenAI's bound) */

struct moem_sched_opts {
	uint32_t max_waiting;	/* queued requests at most (1..1000000) */
	uint32_t max_running;	/* sequences in one step's batch at most (1..4096) */
	uint32_t step_tokens;	/* tokens in one step at most, >= max_running */
	uint32_t prefill_chunk; /* prompt tokens of one sequence in one step at most */
};

/* Why a request left. */
enum moem_sched_finish {
	MOEM_SCHED_RUNNING = 0, /* still running */
	MOEM_SCHED_STOP,	/* end of sequence token, stop token or stop string */
	MOEM_SCHED_LENGTH,	/* max tokens, or the context is full */
	MOEM_SCHED_CANCEL,	/* moem_sched_cancel(): the client left */
	MOEM_SCHED_ERROR,	/* the model failed it (the error is given) */
};

/* One piece of a step's work. */
struct moem_sched_item {
	uint64_t seq;	/* the backend's sequence */
	void *req;	/* the request it serves */
	uint32_t first; /* prefill: index of the first prompt token of the chunk */
	uint32_t n;	/* prefill: prompt tokens in the chunk; decode: 1 */
	bool decode;	/* one generated token */
	bool samples;	/* a token comes out: decode, or the prompt's last chunk */
};

/* What an item produced (when it samples). */
struct moem_sched_out {
	int32_t token; /* -1: none this step (a prefill chunk that is not the last) */
	float logprob;
	uint32_t n_top;
	int32_t top_id[MOEM_SCHED_TOP_MAX];
	float top_logprob[MOEM_SCHED_TOP_MAX];
	enum moem_sched_finish finish; /* the model's: STOP (eos, stop id) or LENGTH */
};

struct moem_sched_ops {
	/*
	 * Start a sequence for req (prompt_len tokens): 0, *seq and *cached,
	 * the prompt tokens whose KV the model already holds (a cached
	 * prefix: 0..prompt_len - 1; prefill starts after them); -ENOSPC
	 * or -EMFILE if the KV budget or the model's sequence slots cannot
	 * hold it now, -EAGAIN if it should wait for what a running sequence
	 * computes (it stays first in the queue and nothing behind it
	 * starts: first come, first served; with nothing running it would
	 * never start, and fails); any other -errno fails the request.
	 */
	int (*start)(void *be, void *req, uint32_t prompt_len, uint64_t *seq, uint32_t *cached);
	/*
	 * Run one step over items[0..n): out[i] for items[i]. -errno fails
	 * every request of the step (the scheduler ends their sequences).
	 */
	int (*step)(void *be, const struct moem_sched_item *items, uint32_t n,
		    struct moem_sched_out *out);
	/* Free a sequence and its KV blocks (finished, cancelled or failed). */
	void (*end)(void *be, uint64_t seq);
};

/* What one step did. */
struct moem_sched_step_info {
	uint32_t items, decodes, prefills;
	uint32_t tokens; /* decode tokens + prefill tokens */
	uint32_t prefill_tokens;
	uint32_t running; /* sequences in the batch */
	uint64_t step_ns; /* ops->step */
	int ret;	  /* ops->step's return */
};

struct moem_sched_sink {
	/*
	 * A token for req (out->token >= 0). Return true to end the request
	 * now (a stop string matched): its sequence is ended at once, and
	 * done() follows with MOEM_SCHED_STOP.
	 */
	bool (*token)(void *arg, void *req, const struct moem_sched_out *out);
	/* req left the scheduler for good (err < 0 with MOEM_SCHED_ERROR). */
	void (*done)(void *arg, void *req, enum moem_sched_finish why, int err);
	/* After each step (may be NULL). */
	void (*stepped)(void *arg, const struct moem_sched_step_info *info);
	/* A request was submitted or cancelled: the model thread should run
	 * moem_sched_step() (may be NULL; called without the lock held). */
	void (*wake)(void *arg);
	void *arg;
};

struct moem_sched_stats {
	uint32_t waiting, running, prefilling;
	uint64_t submitted, refused, finished, cancelled, failed;
	uint64_t steps, prefill_tokens, decode_tokens;
	uint64_t kv_waits; /* starts refused with -ENOSPC */
};

struct moem_sched;

/* Check options: -EINVAL with a message naming the bad one. */
int moem_sched_opts_check(const struct moem_sched_opts *o);
/* The defaults: 256 waiting, 64 running, 512 tokens a step, chunks of 256. */
void moem_sched_opts_default(struct moem_sched_opts *o);

int moem_sched_create(const struct moem_sched_opts *o, const struct moem_sched_ops *ops, void *be,
		      const struct moem_sched_sink *sink, struct moem_sched **out);
/* Ends every request (done() with MOEM_SCHED_CANCEL) and frees the scheduler. */
void moem_sched_destroy(struct moem_sched *s);

/*
 * Any thread: queue req with a prompt of prompt_len tokens (>= 1).
 * -EAGAIN when the queue is full, -ESHUTDOWN after moem_sched_close();
 * on success done() is always called for req exactly once later.
 */
int moem_sched_submit(struct moem_sched *s, void *req, uint32_t prompt_len);
/*
 * Any thread: end req at the next step boundary (done() with
 * MOEM_SCHED_CANCEL, unless it finished first). Unknown or finished
 * requests are ignored.
 */
void moem_sched_cancel(struct moem_sched *s, void *req);
/* Any thread: new options, applied at the next step boundary. */
int moem_sched_set_opts(struct moem_sched *s, const struct moem_sched_opts *o);
void moem_sched_get_opts(struct moem_sched *s, struct moem_sched_opts *o);
/* Any thread: refuse new requests from now on (-ESHUTDOWN). */
void moem_sched_close(struct moem_sched *s);

/*
 * The model thread: one step boundary (drop what is cancelled, admit,
 * plan) and, if there is work, one step. Returns 1 if a step ran, 0 if
 * there was nothing to do, -errno if the step failed (its requests are
 * failed and dropped; the scheduler stays usable).
 */
int moem_sched_step(struct moem_sched *s);
/* Any thread: true while requests wait, run or must be dropped. */
bool moem_sched_busy(struct moem_sched *s);
/* Any thread: counters and queue lengths. */
void moem_sched_get_stats(struct moem_sched *s, struct moem_sched_stats *st);

#endif /* MOEM_SCHED_H */
