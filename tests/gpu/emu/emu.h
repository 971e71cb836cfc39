/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Inside the kernel emulator: between its scheduler (sched.cpp), its
 * streams (stream.cpp), its memory (mem.cpp) and the driver entry points
 * (driver.cpp).
 */
#ifndef MOEM_EMU_H
#define MOEM_EMU_H

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <functional>

/* CUresult values the emulator returns. */
enum {
	OK = 0,
	E_INVALID_VALUE = 1,
	E_OUT_OF_MEMORY = 2,
	E_NO_DEVICE = 100,
	E_INVALID_HANDLE = 400,
	E_ILLEGAL_STATE = 401,
	E_NOT_FOUND = 500,
	E_NOT_READY = 600,
	E_ILLEGAL_ADDRESS = 700,
	E_LAUNCH_OUT_OF_RESOURCES = 701,
	E_HOST_MEMORY_ALREADY_REGISTERED = 712,
	E_HOST_MEMORY_NOT_REGISTERED = 713,
	E_MISALIGNED_ADDRESS = 716,
	E_NOT_SUPPORTED = 801,
	E_STREAM_CAPTURE_UNSUPPORTED = 900,
	E_STREAM_CAPTURE_INVALIDATED = 901,
	E_STREAM_CAPTURE_WRONG_THREAD = 908,
};

#define CUAPI extern "C" __attribute__((visibility("default"))) int

/* The context's sticky error (0 while healthy), as on a GPU. */
extern std::atomic<int> emu_sticky;

/* sched.cpp: run kernel k over grid x block on the calling thread (one
 * kernel at a time). 0, E_ILLEGAL_ADDRESS or E_MISALIGNED_ADDRESS. */
int emu_run_kernel(const struct emu_kernel *k, void *const *args, dim3 grid, dim3 block,
		   size_t smem);
/* Is the calling thread running a kernel (for the fault handler)? */
bool emu_in_kernel_thread(void);
/* bytes at an align-aligned address whose end touches an inaccessible page. */
void *emu_guarded_alloc(size_t bytes, size_t align);
void emu_guarded_free(void *p);
/* sched.cpp's SIGSEGV handler asks this first (mem.cpp, managed memory):
 * 1 if the fault at addr was a managed page now made accessible. */
int emu_managed_fault(void *addr);

/* mem.cpp */
enum emu_mem { EMU_DEVICE = 1, EMU_PINNED = 2, EMU_MANAGED = 4, EMU_ANY_DEVICE = 5 };
/* Is [p, p + n) inside memory of one of the kinds (a mask)? */
bool emu_mem_is(uint64_t p, size_t n, int kinds);
/* Managed memory: the device (a copy) is about to touch [p, p + n). */
void emu_managed_device_touch(uint64_t p, size_t n);
/* While a kernel runs, host-resident managed pages fault (sched.cpp). */
void emu_managed_kernel_view(bool on);

/* stream.cpp */
struct emu_stream;
/*
 * Queue op on stream s (NULL: the legacy default stream), or record it
 * into the graph s is capturing; *seq (may be NULL) is its ticket for
 * emu_wait_seq(). is_copy: a copy or memset, which the stream thread
 * starts MOEM_EMU_LAG_US (default 200) after it is due, so that a host
 * that reads or reuses a buffer without waiting sees the wrong bytes.
 */
int emu_enqueue(emu_stream *s, std::function<void()> op, bool is_copy, uint64_t *seq);
void emu_wait_seq(emu_stream *s, uint64_t seq);
/* Wait until everything queued on every stream so far has run. */
void emu_drain_all(void);
/* A kernel: as emu_enqueue; a capture keeps its name for the counts. */
int emu_enqueue_kernel(emu_stream *s, std::function<void()> op, const char *kernel);
bool emu_capturing(emu_stream *s);
/*
 * A call the driver calls potentially unsafe during a capture (it may
 * allocate or synchronise): E_STREAM_CAPTURE_UNSUPPORTED, invalidating
 * the capture, if the calling thread began one not relaxed, or any
 * thread a global one; else OK.
 */
int emu_capture_unsafe(void);
/* A call a capture does not allow: ends the capture as invalidated. */
int emu_capture_refuse(emu_stream *s);
/* Count a host synchronisation of the given kind, a launch of the named
 * kernel, plain or by a graph (MOEM_EMU_STATS, MOEM_EMU_STEP_KERNEL). */
void emu_count_sync(const char *kind);
void emu_count_launch(const char *name, bool graph);

#endif /* MOEM_EMU_H */
