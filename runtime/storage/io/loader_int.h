/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Inside the loader (loader.h): the shared queue of reads, the file table,
 * the registered memory, and the engine interface both engines implement.
 *
 * A read (struct ld_read) is carved into requests ("pieces") from its head
 * only: the engine takes pieces from the first queued read until it is
 * fully handed out, then pops it. So a read that is partly handed out is
 * always at the head of the queue its engine carves from, which is what
 * lets a failure or a cancel drop the rest of it in O(1).
 */
#ifndef MOEM_LOADER_INT_H
#define MOEM_LOADER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <moem/loader.h>

struct ld_file {
	char *path;
	int fd;
	bool direct;
	bool registered;	       /* io_uring registered file, slot = index */
	uint32_t off_align, mem_align; /* 1 when buffered */
	uint64_t size;
	char why[160];
};

struct ld_read {
	struct ld_read *next; /* queue link */
	struct ld_file *file;
	uint64_t off, len;
	uint8_t *dst;
	uint64_t carved;   /* bytes handed out to requests so far */
	uint32_t inflight; /* requests issued, not yet completed */
	int err;	   /* first error, 0 */
	char *msg;	   /* its message (malloc()ed), or NULL */
	moem_loader_cb cb;
	void *arg;
};

/* A registered fixed-buffer piece; its index in the table is the buf_index. */
struct ld_fixbuf {
	uintptr_t base;
	uint64_t len;
};

/* A region handed to moem_loader_register_memory(). */
struct ld_region {
	uintptr_t base;
	uint64_t len;
	bool fixed; /* registered as fixed buffers */
};

struct ld_engine {
	const char *name;
	/* Set up and start the engine's threads; 0 or -errno with a message. */
	int (*start)(struct moem_loader *ld);
	/* New reads were queued on an empty queue (ld->lock not held). */
	void (*kick)(struct moem_loader *ld);
	/* ld->stopping is set: cancel queued reads, finish in-flight ones,
	 * join the threads and free the engine. */
	void (*stop)(struct moem_loader *ld);
	/* File idx was opened: register it (may fail softly: stats say). */
	void (*add_file)(struct moem_loader *ld, uint32_t idx);
	/* The region list changed (ld->lock held, nothing outstanding):
	 * re-register fixed buffers and rebuild ld->fixbufs. */
	void (*set_memory)(struct moem_loader *ld);
};

extern const struct ld_engine moem_ld_uring_engine;
extern const struct ld_engine moem_ld_pread_engine;

struct moem_loader {
	struct moem_loader_opts opts;
	const struct ld_engine *eng;
	void *priv;	       /* the engine's */
	bool registered_files; /* set by the engine */

	pthread_mutex_t lock;
	pthread_cond_t idle;	     /* outstanding reached 0 */
	struct ld_read *head, *tail; /* queued reads the engine has not taken */
	uint64_t outstanding;	     /* reads accepted, callback not yet returned */
	uint64_t busy_start;
	uint64_t busy_ns;
	bool stopping;

	struct ld_file *files; /* opts.max_files entries */
	uint32_t nr_files;     /* published with release under lock */

	struct ld_region *regions;
	uint32_t nr_regions;
	struct ld_fixbuf *fixbufs; /* sorted by base; read by the engine */
	uint32_t nr_fixbufs;
	uint64_t fixed_bytes;

	/* counters, updated with relaxed atomics */
	uint64_t st_reads, st_requests, st_fixed_requests, st_bytes, st_direct_bytes;
	uint64_t st_errors, st_cancelled;

	char why[384];	      /* under lock */
	char last_error[256]; /* under lock */
};

/* The loader whose thread this is (set by engine threads), for -EDEADLK. */
extern __thread struct moem_loader *moem_ld_current;

/* Append a reason to ld->why ("; "-separated); ld->lock held or single-threaded. */
void moem_ld_why_add(struct moem_loader *ld, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Hand out the next request of rd (the head of its queue): at most
 * req_size bytes, cut at a fixed-buffer piece boundary. Sets *buf to the
 * piece index or -1. rd->carved and rd->inflight advance.
 */
void moem_ld_carve(struct moem_loader *ld, struct ld_read *rd, uint64_t *off, uint32_t *len,
		   uint8_t **dst, int *buf);

/* True when rd has nothing left to carve (done, failed or cancelled). */
static inline bool ld_read_carved(const struct ld_read *rd)
{
	return rd->carved == rd->len;
}

/* Record rd's first error and its message; later ones are dropped. */
void moem_ld_read_fail(struct ld_read *rd, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Account one finished request of rd: res is what the kernel returned
 * for want bytes at file offset off. Returns how many bytes are left to
 * reissue (a short read that is not at end of file), 0 otherwise;
 * counts bytes and fails rd on errors.
 */
uint64_t moem_ld_request_result(struct moem_loader *ld, struct ld_read *rd, uint64_t off,
				uint64_t want, int64_t res);

/* rd has no request in flight and nothing left to carve: run its
 * callback, free it, and let drain know. Call without ld->lock. */
void moem_ld_read_finish(struct moem_loader *ld, struct ld_read *rd);

/* Fixed-buffer piece holding addr, or -1; *room = bytes from addr to its end. */
int moem_ld_fixbuf_find(const struct moem_loader *ld, uintptr_t addr, uint64_t *room);

/* Open, align-probe and describe a file (file.c). */
int moem_ld_file_open(struct moem_loader *ld, const char *path, struct ld_file *f);
void moem_ld_file_close(struct ld_file *f);

#endif /* MOEM_LOADER_INT_H */
