/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The device underneath the HBM tier: a reservable, growable virtual
 * address range (CUDA VMM), one copy engine fed host -> device pieces in
 * FIFO order, and the compute timeline the engine's kernels run on.
 *
 * Two implementations share this interface and the tier state machine
 * above it:
 *  - cuda: cuMemAddressReserve + cuMemCreate/cuMemMap/cuMemSetAccess per
 *    chunk (once, when the budget grows), a dedicated copy stream, events;
 *  - emu:  host memory (an mmap(PROT_NONE) reservation, chunks made
 *    accessible on map and released on unmap), a copy thread that takes
 *    max(memcpy time, bytes / modelled bandwidth) per piece, and a compute
 *    timeline that completes when marked (the CPU backend is synchronous).
 *
 * Sequence numbers order completions: a copy piece or a compute mark gets
 * the next number of its timeline, and *_done() returns the highest number
 * known complete; numbers complete in order.
 */
#ifndef MOEM_TIERDEV_H
#define MOEM_TIERDEV_H

#include <stdbool.h>
#include <stdint.h>

typedef uint64_t moem_dptr;

struct moem_backend; /* moem_tierdev_uvm_create() only: the tiers never call it */
struct moem_tierdev;

struct moem_tierdev_ops {
	const char *name;
	/* Granularity of map/unmap (cuMemGetAllocationGranularity; 2 MiB). */
	uint64_t (*granularity)(struct moem_tierdev *d);
	/* Reserve VA for bytes (a granularity multiple); nothing is backed. */
	int (*reserve)(struct moem_tierdev *d, uint64_t bytes, moem_dptr *base);
	void (*unreserve)(struct moem_tierdev *d, moem_dptr base, uint64_t bytes);
	/* Back [addr, addr + bytes) with device memory, readable and writable
	 * by the device, or release it. Called only when the budget moves. */
	int (*map)(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes);
	int (*unmap)(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes);
	/* Register host memory as a copy source (pinned for DMA). */
	int (*host_register)(struct moem_tierdev *d, void *p, uint64_t bytes);
	void (*host_unregister)(struct moem_tierdev *d, void *p);
	/*
	 * Queue a host -> device copy on the copy engine. It starts only after
	 * the compute timeline reached wait_compute (0: no wait): that is how
	 * a copy into a recycled slot waits for the slot's last reader.
	 * Returns the piece's copy sequence number.
	 */
	int (*copy)(struct moem_tierdev *d, moem_dptr dst, const void *src, uint64_t bytes,
		    uint64_t wait_compute, uint64_t *seq);
	uint64_t (*copy_done)(struct moem_tierdev *d);
	/* Block until copy seq completed (or failed: -EIO). */
	int (*copy_wait)(struct moem_tierdev *d, uint64_t seq);
	/* Device time the piece took, once done (for the bandwidth estimate). */
	uint64_t (*copy_ns)(struct moem_tierdev *d, uint64_t seq);
	/* Mark the compute timeline after the work issued so far. */
	uint64_t (*compute_mark)(struct moem_tierdev *d);
	uint64_t (*compute_done)(struct moem_tierdev *d);
	int (*compute_wait)(struct moem_tierdev *d, uint64_t seq);
	/* Host address to read device memory at addr (emu), or NULL (cuda). */
	void *(*host_view)(struct moem_tierdev *d, moem_dptr addr);
	void (*destroy)(struct moem_tierdev *d);
};

struct moem_tierdev {
	const struct moem_tierdev_ops *ops;
};

struct moem_emu_opts {
	double link_gbps;     /* modelled host -> device bandwidth, GB/s (default 25) */
	double link_lat_us;   /* per-piece latency (10 us when opts are NULL) */
	uint64_t granularity; /* default 2 MiB */
	/* Compute marks complete only through moem_tierdev_emu_finish(), as
	 * if kernels were still running on a GPU (tests of the WAR rules). */
	bool manual_compute;
};

/* The emulated device (host memory, modelled link). */
int moem_tierdev_emu_create(const struct moem_emu_opts *o, struct moem_tierdev **out);
/* manual_compute: complete the compute timeline up to seq. */
void moem_tierdev_emu_finish(struct moem_tierdev *d, uint64_t seq);

/*
 * The CUDA implementation is the CUDA backend's (moem_tierdev_cuda_create(),
 * cuda_api.h): whoever opens the tiers hands them a device.
 */

/*
 * The UVM device of an open CUDA backend (the "uvm" HBM mode): every
 * version in one managed allocation (cuMemAllocManaged, read-mostly),
 * filled by host copies, paged onto the GPU by the driver on first touch.
 * Give the tiers a budget of the whole arena (nothing is evicted by
 * moem) and the real HBM budget to moem_tierdev_uvm_set_budget(): a
 * balloon of device memory leaves managed pages exactly that much. -ENODEV
 * with a message where the device has no concurrent managed access.
 */
/*
 * The balloon leaves the budget plus this much free: the buffers the
 * backend allocates later (descriptor rings, scratch) must not fail, and
 * managed pages may use what those leave.
 */
#define MOEM_UVM_HEADROOM (32ULL << 20)

struct moem_uvm_stats {
	uint64_t budget;	 /* bytes of device memory for managed pages */
	uint64_t balloon;	 /* bytes taken to hold them to it */
	uint64_t prefetches;	 /* cuMemPrefetchAsync calls */
	uint64_t prefetch_bytes; /* bytes they asked for */
};
int moem_tierdev_uvm_create(struct moem_backend *be, struct moem_tierdev **out);
int moem_tierdev_uvm_set_budget(struct moem_tierdev *d, uint64_t hbm);
/* Ask the driver to move [addr, addr + bytes) onto the GPU, asynchronously. */
int moem_tierdev_uvm_prefetch(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes);
bool moem_tierdev_is_uvm(const struct moem_tierdev *d);
void moem_tierdev_uvm_stats(struct moem_tierdev *d, struct moem_uvm_stats *st);

#endif /* MOEM_TIERDEV_H */
