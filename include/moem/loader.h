/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The loader: reads byte ranges of files into memory, asynchronously, and
 * calls back when each range is in place. It knows nothing of packs or
 * experts: the store hands it (file, offset, length, destination) of
 * 4 KiB-aligned blobs, the tiers layer marks expert versions DRAM-ready
 * from its callbacks.
 *
 * Two engines behind one interface:
 *
 *  io_uring  one ring owned by a loader thread that keeps queue_depth
 *            requests of req_size bytes in flight; files are registered
 *            (IOSQE_FIXED_FILE) and memory handed to
 *            moem_loader_register_memory() is registered as fixed buffers
 *            in <= 1 GiB pieces, so a read landing there is READ_FIXED.
 *  pread     a pool of threads issuing pread(2), for when io_uring is
 *            absent or refused (ENOSYS, kernel.io_uring_disabled, seccomp).
 *
 * Files are opened O_DIRECT unless the file system refuses it (EINVAL at
 * open or at a first probing read, e.g. ramfs) or the options say not to;
 * such files are read through the page cache. The stats say which engine,
 * which I/O mode and why (moem_loader_format_stats()).
 *
 * Threading: every function may be called from any thread, except that
 * moem_loader_destroy() must not race with other calls on the same loader.
 * Callbacks run on a thread the loader owns (the io_uring thread, or a
 * pread worker), never on the caller's; they may call moem_loader_read()
 * but must not block for long (they hold up other completions) and must
 * not call moem_loader_drain() or moem_loader_destroy().
 */
#ifndef MOEM_LOADER_H
#define MOEM_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum moem_loader_mode {
	MOEM_LOADER_AUTO = 0, /* io_uring, else the pread pool (the stats say why) */
	MOEM_LOADER_URING,    /* io_uring or fail at create */
	MOEM_LOADER_PREAD,    /* the pread thread pool */
	MOEM_LOADER_BUFFERED, /* the pread thread pool, never O_DIRECT */
	MOEM_LOADER_MODE_NR
};

enum moem_loader_engine {
	MOEM_LOADER_ENGINE_URING = 0,
	MOEM_LOADER_ENGINE_PREAD,
};

/* Defaults and limits of the options. */
#define MOEM_LOADER_QD_DEFAULT	    32
#define MOEM_LOADER_QD_MAX	    4096
#define MOEM_LOADER_REQ_DEFAULT	    (1U << 20)
#define MOEM_LOADER_REQ_MIN	    4096U
#define MOEM_LOADER_REQ_MAX	    (64U << 20)
#define MOEM_LOADER_THREADS_DEFAULT 8
#define MOEM_LOADER_THREADS_MAX	    256
#define MOEM_LOADER_FILES_DEFAULT   64
#define MOEM_LOADER_FILES_MAX	    65536
#define MOEM_LOADER_PIECE_MAX	    (1ULL << 30) /* the kernel's cap per fixed buffer */

/* Zero-initialised options are the defaults. */
struct moem_loader_opts {
	enum moem_loader_mode mode;
	uint32_t queue_depth;	  /* requests in flight (io_uring); 1..4096, default 32 */
	uint32_t req_size;	  /* bytes per request; multiple of 4 KiB, 4 KiB..64 MiB,
				 * default 1 MiB */
	uint32_t threads;	  /* pread pool threads; 1..256, default 8 */
	uint32_t max_files;	  /* files that can be added; 1..65536, default 64 */
	uint64_t piece_max;	  /* fixed-buffer piece size; multiple of 4 KiB, at most
				 * (and by default) 1 GiB; tests use less */
	bool no_direct;		  /* never open O_DIRECT */
	bool no_fixed_buffers;	  /* do not register memory as fixed buffers */
	bool no_registered_files; /* do not register file descriptors */
};

/* What a loader did and how. Counters are cumulative since create. */
struct moem_loader_stats {
	enum moem_loader_engine engine;
	uint32_t queue_depth, req_size, threads;
	bool registered_files; /* files are io_uring registered files */
	bool fixed_buffers;    /* some memory is registered as fixed buffers */
	uint32_t fixed_pieces; /* registered buffers (pieces) */
	uint64_t fixed_bytes;  /* bytes they cover */
	uint32_t files, direct_files;
	uint64_t reads;		 /* moem_loader_read()s completed (callback ran) */
	uint64_t requests;	 /* I/O requests issued, retries of short reads included */
	uint64_t fixed_requests; /* of those, READ_FIXED into a registered piece */
	uint64_t bytes;		 /* bytes read */
	uint64_t direct_bytes;	 /* of those, read with O_DIRECT */
	uint64_t errors;	 /* reads completed with an error other than -ECANCELED */
	uint64_t cancelled;	 /* reads completed with -ECANCELED (destroy) */
	uint64_t busy_ns;	 /* time with at least one read outstanding */
	char path[128];		 /* "io_uring + fixed buffers + registered file, O_DIRECT" */
	char why[384];		 /* fallbacks and refusals, "; "-separated, or "" */
	char last_error[256];	 /* message of the latest failed read, or "" */
};

/* One added file, as the loader opened it. */
struct moem_loader_file_info {
	char path[256];
	uint64_t size;	    /* at add time */
	bool direct;	    /* opened O_DIRECT */
	uint32_t off_align; /* offset and length multiple a read needs (1 if buffered) */
	uint32_t mem_align; /* destination address multiple a read needs (1 if buffered) */
	char why[160];	    /* why buffered, or "" */
};

/*
 * Completion: err is 0 when all len bytes are in place, else -errno: -EIO
 * for a short read (end of file), the read's own error, or -ECANCELED when
 * the loader was destroyed first. On failure moem_last_error() on the
 * callback's thread names the file and offset, and the destination's
 * contents are undefined.
 */
typedef void (*moem_loader_cb)(void *arg, int err);

struct moem_loader;

/*
 * Create a loader. Returns 0 and *out, or -EINVAL (bad option, with a
 * message), -ENOMEM, or in mode URING the error io_uring setup gave.
 * In mode AUTO a refused io_uring is not an error: the pread pool serves
 * and the stats' why says what io_uring answered.
 */
int moem_loader_create(const struct moem_loader_opts *opts, struct moem_loader **out);

/*
 * Finish every read and free the loader. Reads not yet issued are not
 * issued: their callbacks run with -ECANCELED; requests already in flight
 * complete first (their reads then report -ECANCELED if cut short, else
 * their result). When this returns every callback has returned, the files
 * are closed and registered memory is unpinned (the kernel's asynchronous
 * ring teardown holds neither). NULL is a no-op.
 */
void moem_loader_destroy(struct moem_loader *ld);

/*
 * Open path for reading and register it; *idx is the file's index for
 * moem_loader_read(). O_DIRECT unless refused (see above). Returns 0, or
 * -errno with a message naming the path: -ENOENT/-EACCES (open), -EINVAL
 * (not a regular file or block device), -ENOSPC (max_files reached).
 */
int moem_loader_add_file(struct moem_loader *ld, const char *path, uint32_t *idx);
int moem_loader_file_info(struct moem_loader *ld, uint32_t idx, struct moem_loader_file_info *fi);

/*
 * Hand the loader memory that reads will land in (the staging pool). With
 * io_uring it is registered as fixed buffers in pieces of at most
 * piece_max bytes; a request whose destination lies inside one piece is
 * issued as READ_FIXED (requests are cut at piece boundaries), any other as
 * a plain READ. If the kernel refuses (EOPNOTSUPP for memory it cannot pin
 * long-term, ENOMEM under RLIMIT_MEMLOCK) this still returns 0: reads use
 * plain READ and the stats' why says what the kernel answered. Several
 * regions may be added; each must be 4 KiB aligned, non-empty, and not
 * overlap another. The memory must stay mapped until the loader is
 * destroyed. Returns -EINVAL or -EEXIST (overlap) with a message, or -EBUSY
 * while reads are outstanding (registration is a setup step).
 */
int moem_loader_register_memory(struct moem_loader *ld, void *base, uint64_t len);

/*
 * Read len bytes of file idx at off into dst, asynchronously; cb(arg, err)
 * runs exactly once when the whole range is in place or has failed. The
 * read is issued as requests of at most req_size bytes, queue_depth of
 * them in flight across all reads, in submission order. For an O_DIRECT
 * file off and len must be multiples of the file's off_align and dst of
 * its mem_align (moem_loader_file_info(); 512 or 4096 on most disks):
 * unaligned reads are refused, not silently buffered, since a pack's blobs
 * are always aligned and anything else is a caller bug.
 *
 * Returns 0 (cb will run) or -errno without calling cb: -EBADF (no such
 * file index), -EINVAL (len 0, NULL dst, unaligned direct read),
 * -EOVERFLOW (off + len or dst + len wraps), -ESHUTDOWN (being destroyed),
 * -ENOMEM.
 */
int moem_loader_read(struct moem_loader *ld, uint32_t idx, uint64_t off, uint64_t len, void *dst,
		     moem_loader_cb cb, void *arg);

/*
 * Wait until every read issued before or during the call has completed and
 * its callback returned. Returns 0, or -EDEADLK when called from a
 * callback.
 */
int moem_loader_drain(struct moem_loader *ld);

void moem_loader_get_stats(struct moem_loader *ld, struct moem_loader_stats *st);

/*
 * Format stats for people: the path, the why, and the counters with the
 * throughput over busy time, several lines. Returns buf.
 */
char *moem_loader_format_stats(const struct moem_loader_stats *st, char *buf, size_t len);

const char *moem_loader_mode_name(enum moem_loader_mode m);
int moem_loader_mode_parse(const char *s, enum moem_loader_mode *out);

/*
 * Split [base, base + len) into consecutive pieces of at most piece_max
 * bytes (the last one shorter), as fixed-buffer registration does: fills
 * up to max iovecs and returns how many pieces the range needs (more than
 * max means iov was too small), or -EINVAL for len 0, piece_max 0 or a
 * range that wraps the address space. base need not be mapped.
 */
int moem_loader_plan_pieces(const void *base, uint64_t len, uint64_t piece_max, struct iovec *iov,
			    unsigned int max);

#endif /* MOEM_LOADER_H */
