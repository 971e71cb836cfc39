// SPDX-License-Identifier: GPL-2.0-only
/*
 * The kernel emulator's memory: device allocations (ending at a guard
 * page, so overreads fault), pinned host memory (cuMemAllocHost,
 * cuMemHostRegister), the VMM calls over host address space, managed
 * memory with a model of the driver's paging, and the copies and memsets
 * that go on streams.
 *
 * Every range is recorded with its kind, so a copy is checked before it
 * is queued (a device range that is not allocated or mapped is
 * CUDA_ERROR_INVALID_VALUE, as on a GPU) and takes the driver's
 * semantics for its host side: from or to pinned memory it is
 * asynchronous, reading or writing the host buffer when the stream gets
 * there; from pageable memory the source is taken at the call; to
 * pageable memory the call returns once the copy is done (a host
 * synchronisation).
 *
 * Managed memory (cuMemAllocManaged): 64 KiB pages, each resident on the
 * host or on the device. While a kernel runs, host-resident pages are
 * inaccessible: the kernel's first touch of one faults, the fault handler
 * migrates it (a GPU page fault, 64 KiB host to device) and, when the
 * device's free memory is exhausted (oversubscription), evicts the least
 * recently used device page (written back unless the range is
 * read-mostly). cuMemPrefetchAsync migrates ahead of use, cuMemAdvise is
 * recorded. The counters are what a UVM benchmark reports; the real
 * driver's come from CUPTI.
 */
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "cuda_emu.h"
#include "emu.h"

/* The device's memory: 8 GiB, or MOEM_EMU_MEM_MIB (tests of what a full
 * device refuses). */
static uint64_t total_bytes(void)
{
	static uint64_t t;

	if (!t) {
		const char *v = getenv("MOEM_EMU_MEM_MIB");

		t = v && atoll(v) > 0 ? (uint64_t)atoll(v) << 20 : 8ull << 30;
	}
	return t;
}
#define TOTAL_BYTES total_bytes()
#define GRAN	    (2ull << 20) /* VMM granularity */
#define MPAGE	    (64ull << 10) /* managed page */

struct range {
	size_t size;
	int kind;
};

static std::mutex mem_lock;
static std::map<uint64_t, range> ranges; /* by start; never overlapping */
static uint64_t dev_used;		 /* cuMemAlloc + VMM mapped bytes */

static void add_range(uint64_t p, size_t n, int kind)
{
	std::lock_guard<std::mutex> g(mem_lock);

	ranges[p] = range{ n, kind };
	if (kind == EMU_DEVICE)
		dev_used += n;
}

static bool del_range(uint64_t p, int kind, size_t *n)
{
	std::lock_guard<std::mutex> g(mem_lock);
	auto it = ranges.find(p);

	if (it == ranges.end() || it->second.kind != kind)
		return false;
	if (n)
		*n = it->second.size;
	if (kind == EMU_DEVICE)
		dev_used -= it->second.size;
	ranges.erase(it);
	return true;
}

bool emu_mem_is(uint64_t p, size_t n, int kinds)
{
	std::lock_guard<std::mutex> g(mem_lock);
	uint64_t at = p, end = p + n;
	auto it = ranges.upper_bound(p);

	if (n == 0 || end < p || it == ranges.begin())
		return false;
	--it;
	/* consecutive ranges (pieces of one registration, VMM chunks) */
	while (it != ranges.end() && it->first <= at && at < it->first + it->second.size) {
		if (!(it->second.kind & kinds))
			return false;
		at = it->first + it->second.size;
		if (at >= end)
			return true;
		++it;
	}
	return false;
}

/* ---- managed memory ------------------------------------------------------- */

struct managed {
	uint64_t base;
	size_t size;
	std::vector<uint8_t> on_dev;
	std::vector<uint64_t> used; /* LRU clock of each page */
	bool read_mostly;
};

static std::vector<managed *> mranges; /* guarded by mstate_lock (mstate_lock, a spin lock: the fault handler takes it) */
static std::atomic_flag mstate_lock = ATOMIC_FLAG_INIT;
static uint64_t mclock, mdev_bytes;
static std::atomic<uint64_t> uvm_faults, uvm_htod, uvm_dtoh, uvm_evictions, uvm_prefetch;
static bool kernel_view; /* host-resident pages are PROT_NONE */

struct mguard {
	mguard()
	{
		while (mstate_lock.test_and_set(std::memory_order_acquire))
			;
	}
	~mguard()
	{
		mstate_lock.clear(std::memory_order_release);
	}
};

static managed *mfind(uint64_t a)
{
	for (managed *m : mranges)
		if (a >= m->base && a < m->base + m->size)
			return m;
	return NULL;
}

static uint64_t free_bytes(void)
{
	uint64_t used = dev_used + mdev_bytes; /* read without mem_lock: a snapshot */

	return used < TOTAL_BYTES ? TOTAL_BYTES - used : 0;
}

/* Make room for one page on the device; mstate_lock held. */
static void evict_one(void)
{
	managed *vm = NULL;
	size_t vi = 0;
	uint64_t best = UINT64_MAX;

	for (managed *m : mranges)
		for (size_t i = 0; i < m->on_dev.size(); i++)
			if (m->on_dev[i] && m->used[i] < best) {
				best = m->used[i];
				vm = m;
				vi = i;
			}
	if (!vm)
		return;
	vm->on_dev[vi] = 0;
	mdev_bytes -= MPAGE;
	uvm_evictions++;
	if (!vm->read_mostly)
		uvm_dtoh += MPAGE;
	if (kernel_view)
		mprotect((void *)(vm->base + vi * MPAGE), MPAGE, PROT_NONE);
}

/* Page i of m to the device; mstate_lock held. */
static void to_device(managed *m, size_t i)
{
	if (m->on_dev[i]) {
		m->used[i] = ++mclock;
		return;
	}
	while (free_bytes() < MPAGE && mdev_bytes)
		evict_one();
	m->on_dev[i] = 1;
	m->used[i] = ++mclock;
	mdev_bytes += MPAGE;
	uvm_htod += MPAGE;
	mprotect((void *)(m->base + i * MPAGE), MPAGE, PROT_READ | PROT_WRITE);
}

int emu_managed_fault(void *addr)
{
	uint64_t a = (uint64_t)(uintptr_t)addr;
	mguard g;
	managed *m = mfind(a);

	if (!m)
		return 0;
	if (emu_in_kernel_thread()) {
		uvm_faults++;
		to_device(m, (a - m->base) / MPAGE);
	} else {
		/* the host, while a kernel runs: let it through */
		mprotect((void *)(m->base + (a - m->base) / MPAGE * MPAGE), MPAGE,
			 PROT_READ | PROT_WRITE);
	}
	return 1;
}

/* Around every kernel (sched.cpp): host-resident pages fault for it. */
void emu_managed_kernel_view(bool on)
{
	mguard g;

	kernel_view = on;
	for (managed *m : mranges)
		for (size_t i = 0, j; i < m->on_dev.size(); i = j) {
			for (j = i + 1; j < m->on_dev.size() && m->on_dev[j] == m->on_dev[i]; j++)
				;
			if (!m->on_dev[i])
				mprotect((void *)(m->base + i * MPAGE), (j - i) * MPAGE,
					 on ? PROT_NONE : PROT_READ | PROT_WRITE);
		}
}

/* Device memory for an allocation: managed pages give way, as in UVM. */
static bool reserve_device(uint64_t bytes)
{
	mguard g;

	while (free_bytes() < bytes && mdev_bytes)
		evict_one();
	return free_bytes() >= bytes;
}

void emu_managed_device_touch(uint64_t p, size_t n)
{
	mguard g;
	managed *m = mfind(p);

	if (!m || !n)
		return;
	for (size_t i = (p - m->base) / MPAGE; i <= (p + n - 1 - m->base) / MPAGE; i++)
		to_device(m, i);
}

CUAPI cuMemAllocManaged(uint64_t *p, size_t bytes, unsigned int)
{
	size_t len = (bytes + MPAGE - 1) / MPAGE * MPAGE;
	managed *m;
	void *a;

	if (emu_sticky)
		return emu_sticky;
	if (!bytes)
		return E_INVALID_VALUE;
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (a == MAP_FAILED)
		return E_OUT_OF_MEMORY;
	m = new managed{ (uint64_t)(uintptr_t)a, len, std::vector<uint8_t>(len / MPAGE),
			 std::vector<uint64_t>(len / MPAGE), false };
	{
		mguard g;

		mranges.push_back(m);
	}
	add_range(m->base, len, EMU_MANAGED);
	*p = m->base;
	return OK;
}

static int managed_free(uint64_t p)
{
	managed *m = NULL;

	{
		mguard g;

		for (size_t i = 0; i < mranges.size(); i++)
			if (mranges[i]->base == p) {
				m = mranges[i];
				mranges.erase(mranges.begin() + i);
				break;
			}
		if (m)
			for (uint8_t d : m->on_dev)
				mdev_bytes -= d ? MPAGE : 0;
	}
	if (!m)
		return E_INVALID_VALUE;
	del_range(p, EMU_MANAGED, NULL);
	munmap((void *)(uintptr_t)m->base, m->size);
	delete m;
	return OK;
}

/* A CUmemLocation, passed by value: type 1 device, 2 host. */
struct emu_loc {
	int type, id;
};

/* CUmem_advise: 1 set read mostly, 2 unset; 3/4 preferred location; 5/6 accessed by. */
CUAPI cuMemAdvise_v2(uint64_t p, size_t n, int advice, emu_loc)
{
	mguard g;
	managed *m = mfind(p);

	if (!m || p + n > m->base + m->size)
		return E_INVALID_VALUE;
	if (advice == 1 || advice == 2)
		m->read_mostly = advice == 1;
	return OK;
}

/* To the device (a device location) or back to the host. */
CUAPI cuMemPrefetchAsync_v2(uint64_t p, size_t n, emu_loc loc, unsigned int, void *stream)
{
	int dev = loc.type == 1 ? loc.id : -1;

	if (emu_sticky)
		return emu_sticky;
	if (!emu_mem_is(p, n, EMU_MANAGED) || (loc.type == 1 && loc.id != 0))
		return E_INVALID_VALUE;
	return emu_enqueue((emu_stream *)stream,
			   [p, n, dev] {
				   mguard g;
				   managed *m = mfind(p);

				   if (!m)
					   return;
				   for (size_t i = (p - m->base) / MPAGE;
					i <= (p + n - 1 - m->base) / MPAGE; i++) {
					   if (dev >= 0) {
						   uvm_prefetch += m->on_dev[i] ? 0 : MPAGE;
						   to_device(m, i);
					   } else if (m->on_dev[i]) {
						   m->on_dev[i] = 0;
						   mdev_bytes -= MPAGE;
						   uvm_dtoh += m->read_mostly ? 0 : MPAGE;
					   }
				   }
			   },
			   true, NULL);
}

/*
 * Not a driver entry point: the emulator's paging counters, for the UVM
 * tier's statistics (a real GPU gives them through CUPTI). out: GPU page
 * faults, bytes host to device (faults and prefetches), bytes device to
 * host (write-backs), evictions, bytes prefetched.
 */
extern "C" __attribute__((visibility("default"))) void moemEmuUvmCounters(uint64_t out[5])
{
	out[0] = uvm_faults;
	out[1] = uvm_htod;
	out[2] = uvm_dtoh;
	out[3] = uvm_evictions;
	out[4] = uvm_prefetch;
}

/* ---- device and host allocations ------------------------------------------ */

CUAPI cuMemAlloc_v2(uint64_t *p, size_t bytes)
{
	void *m;

	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	if (emu_sticky)
		return emu_sticky;
	if (!bytes)
		return E_INVALID_VALUE;
	if (!reserve_device(bytes))
		return E_OUT_OF_MEMORY;
	m = emu_guarded_alloc(bytes, 256);
	if (!m)
		return E_OUT_OF_MEMORY;
	*p = (uint64_t)(uintptr_t)m;
	add_range(*p, bytes, EMU_DEVICE);
	return OK;
}

CUAPI cuMemFree_v2(uint64_t p)
{
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	/* cuMemFree waits for the device: nothing queued may still use p. */
	emu_count_sync("implicit");
	emu_drain_all();
	if (managed_free(p) == OK)
		return emu_sticky;
	if (!del_range(p, EMU_DEVICE, NULL))
		return E_INVALID_VALUE;
	emu_guarded_free((void *)(uintptr_t)p);
	return emu_sticky;
}

CUAPI cuMemAllocHost_v2(void **p, size_t bytes)
{
	size_t len = (bytes + 4095) & ~(size_t)4095;

	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	if (emu_sticky)
		return emu_sticky;
	*p = aligned_alloc(4096, len ? len : 4096);
	if (!*p)
		return E_OUT_OF_MEMORY;
	add_range((uint64_t)(uintptr_t)*p, len ? len : 4096, EMU_PINNED);
	return OK;
}

CUAPI cuMemFreeHost(void *p)
{
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	emu_count_sync("implicit");
	emu_drain_all();
	if (!del_range((uint64_t)(uintptr_t)p, EMU_PINNED, NULL))
		return E_INVALID_VALUE;
	free(p);
	return OK;
}

CUAPI cuMemHostRegister_v2(void *p, size_t bytes, unsigned int)
{
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	if (emu_sticky)
		return emu_sticky;
	if (!p || !bytes)
		return E_INVALID_VALUE;
	{
		std::lock_guard<std::mutex> g(mem_lock);
		auto it = ranges.upper_bound((uint64_t)(uintptr_t)p + bytes - 1);

		if (it != ranges.begin()) {
			--it;
			if (it->first + it->second.size > (uint64_t)(uintptr_t)p)
				return E_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	add_range((uint64_t)(uintptr_t)p, bytes, EMU_PINNED);
	return OK;
}

CUAPI cuMemHostUnregister(void *p)
{
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	emu_count_sync("implicit");
	emu_drain_all();
	if (!del_range((uint64_t)(uintptr_t)p, EMU_PINNED, NULL))
		return E_HOST_MEMORY_NOT_REGISTERED;
	return emu_sticky;
}

/* Unified addressing: a pinned host buffer's device address is its own. */
CUAPI cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned int flags)
{
	if (emu_sticky)
		return emu_sticky;
	if (flags || !emu_mem_is((uint64_t)(uintptr_t)p, 1, EMU_PINNED))
		return E_INVALID_VALUE;
	*d = (uint64_t)(uintptr_t)p;
	return OK;
}

CUAPI cuMemGetInfo_v2(size_t *fr, size_t *total)
{
	if (emu_sticky)
		return emu_sticky;
	*total = TOTAL_BYTES;
	*fr = free_bytes();
	return OK;
}

/* ---- copies and memsets ------------------------------------------------------ */

static bool pinned(const void *p, size_t n)
{
	return emu_mem_is((uint64_t)(uintptr_t)p, n, EMU_PINNED | EMU_MANAGED);
}

/*
 * A host range of an async copy that is partly pinned: it touches a
 * registration (cuMemHostRegister, cuMemAllocHost) without lying inside
 * one. Stricter than the driver, which documents nothing here: on an H200
 * (driver 580) a copy whose source spanned two registrations never
 * completed. The emulator refuses it, so such copies are found here.
 */
static bool straddles(const void *p, size_t n)
{
	std::lock_guard<std::mutex> g(mem_lock);
	uint64_t a = (uint64_t)(uintptr_t)p, end = a + n;
	auto it = ranges.upper_bound(a);

	if (it != ranges.begin()) {
		auto prev = std::prev(it);

		if (prev->first + prev->second.size > a && (prev->second.kind & EMU_PINNED))
			return end > prev->first + prev->second.size;
	}
	/* starts outside any registration: does one begin inside the range? */
	for (; it != ranges.end() && it->first < end; ++it)
		if (it->second.kind & EMU_PINNED)
			return true;
	return false;
}

static int refuse_straddle(const char *call, const void *p, size_t n)
{
	fprintf(stderr, "emu: %s: host range %p + %zu is partly pinned (it crosses a "
		"cuMemHostRegister boundary)\n", call, p, n);
	return E_INVALID_VALUE;
}

CUAPI cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *s)
{
	if (emu_sticky)
		return emu_sticky;
	if (!n)
		return OK;
	if (!emu_mem_is(p, n, EMU_ANY_DEVICE))
		return E_INVALID_VALUE;
	return emu_enqueue((emu_stream *)s,
			   [p, v, n] {
				   emu_managed_device_touch(p, n);
				   memset((void *)(uintptr_t)p, v, n);
			   },
			   true, NULL);
}

CUAPI cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *s)
{
	if (emu_sticky)
		return emu_sticky;
	if (!n)
		return OK;
	if (!emu_mem_is(dst, n, EMU_ANY_DEVICE))
		return E_INVALID_VALUE;
	if (straddles(src, n))
		return refuse_straddle("cuMemcpyHtoDAsync", src, n);
	if (pinned(src, n))
		return emu_enqueue((emu_stream *)s,
				   [dst, src, n] {
					   emu_managed_device_touch(dst, n);
					   memmove((void *)(uintptr_t)dst, src, n);
				   },
				   true, NULL);
	/* Pageable: the driver stages the source now; the copy lands later. */
	if (emu_capturing((emu_stream *)s))
		return emu_capture_refuse((emu_stream *)s);
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	{
		auto buf = std::make_shared<std::vector<uint8_t>>((const uint8_t *)src,
								  (const uint8_t *)src + n);

		return emu_enqueue((emu_stream *)s,
				   [dst, buf] {
					   emu_managed_device_touch(dst, buf->size());
					   memcpy((void *)(uintptr_t)dst, buf->data(), buf->size());
				   },
				   true, NULL);
	}
}

CUAPI cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *s)
{
	uint64_t seq;
	int r;

	if (emu_sticky)
		return emu_sticky;
	if (!n)
		return OK;
	if (!emu_mem_is(src, n, EMU_ANY_DEVICE))
		return E_INVALID_VALUE;
	if (straddles(dst, n))
		return refuse_straddle("cuMemcpyDtoHAsync", dst, n);
	if (pinned(dst, n))
		return emu_enqueue((emu_stream *)s,
				   [dst, src, n] { memmove(dst, (const void *)(uintptr_t)src, n); },
				   true, NULL);
	/* Pageable: returns once the copy is done. */
	if (emu_capturing((emu_stream *)s))
		return emu_capture_refuse((emu_stream *)s);
	if (emu_capture_unsafe())
		return E_STREAM_CAPTURE_UNSUPPORTED;
	r = emu_enqueue((emu_stream *)s,
			[dst, src, n] { memmove(dst, (const void *)(uintptr_t)src, n); }, true,
			&seq);
	if (r)
		return r;
	emu_count_sync("pageable_dtoh");
	emu_wait_seq((emu_stream *)s, seq);
	return emu_sticky;
}

CUAPI cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *s)
{
	if (emu_sticky)
		return emu_sticky;
	if (!n)
		return OK;
	if (!emu_mem_is(dst, n, EMU_ANY_DEVICE) || !emu_mem_is(src, n, EMU_ANY_DEVICE))
		return E_INVALID_VALUE;
	return emu_enqueue((emu_stream *)s,
			   [dst, src, n] {
				   emu_managed_device_touch(src, n);
				   emu_managed_device_touch(dst, n);
				   memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
			   },
			   true, NULL);
}

/* ---- virtual memory management ---------------------------------------------- */

/*
 * A reservation is PROT_NONE host address space; a mapped chunk becomes
 * read-write (fresh zeroed pages) and device memory for the checks; an
 * unmapped one is released and faults again. Physical handles only
 * count: the tiers never map one twice.
 */
static std::mutex vmm_lock;
static std::map<unsigned long long, size_t> vmm_handles;
static unsigned long long vmm_next_handle = 1;

CUAPI cuMemAddressReserve(uint64_t *p, size_t size, size_t, uint64_t, unsigned long long)
{
	void *m;

	if (emu_sticky)
		return emu_sticky;
	if (!size || size % GRAN)
		return E_INVALID_VALUE;
	m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return E_OUT_OF_MEMORY;
	*p = (uint64_t)(uintptr_t)m;
	return OK;
}

CUAPI cuMemAddressFree(uint64_t p, size_t size)
{
	return munmap((void *)(uintptr_t)p, size) ? E_INVALID_VALUE : OK;
}

CUAPI cuMemCreate(unsigned long long *h, size_t size, const void *, unsigned long long)
{
	std::lock_guard<std::mutex> g(vmm_lock);

	if (emu_sticky)
		return emu_sticky;
	if (!size || size % GRAN)
		return E_INVALID_VALUE;
	if (!reserve_device(size))
		return E_OUT_OF_MEMORY;
	*h = vmm_next_handle++;
	vmm_handles[*h] = size;
	return OK;
}

CUAPI cuMemRelease(unsigned long long h)
{
	std::lock_guard<std::mutex> g(vmm_lock);

	return vmm_handles.erase(h) ? OK : E_INVALID_VALUE;
}

CUAPI cuMemMap(uint64_t p, size_t size, size_t, unsigned long long h, unsigned long long)
{
	if (emu_sticky)
		return emu_sticky;
	{
		std::lock_guard<std::mutex> g(vmm_lock);

		if (!vmm_handles.count(h) || vmm_handles[h] != size)
			return E_INVALID_VALUE;
	}
	if (mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE))
		return E_INVALID_VALUE;
	add_range(p, size, EMU_DEVICE);
	return OK;
}

CUAPI cuMemUnmap(uint64_t p, size_t size)
{
	size_t n;

	if (!del_range(p, EMU_DEVICE, &n) || n != size)
		return E_INVALID_VALUE;
	madvise((void *)(uintptr_t)p, size, MADV_DONTNEED);
	return mprotect((void *)(uintptr_t)p, size, PROT_NONE) ? E_INVALID_VALUE : OK;
}

CUAPI cuMemSetAccess(uint64_t p, size_t size, const void *, size_t)
{
	if (emu_sticky)
		return emu_sticky;
	return emu_mem_is(p, size, EMU_DEVICE) ? OK : E_INVALID_VALUE;
}

CUAPI cuMemGetAllocationGranularity(size_t *g, const void *, int)
{
	*g = GRAN;
	return OK;
}
