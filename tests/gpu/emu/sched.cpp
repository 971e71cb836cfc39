// SPDX-License-Identifier: GPL-2.0-only
/*
 * The kernel emulator's scheduler: a block's threads are fibers on one OS
 * thread (x86-64 context switch below), run round-robin; barriers
 * (__syncthreads, __syncwarp, warp collectives) park a fiber until every
 * live member arrived. Exited threads leave their barriers, as on the
 * GPU. A pass in which no fiber makes progress is a deadlock (e.g. a
 * __syncthreads under divergent control flow) and aborts with a message.
 *
 * Kernels run on the stream threads (stream.cpp), one at a time (the
 * fibers and shared memory are global). A fault inside a kernel is caught
 * and ends it: SIGSEGV/SIGBUS as CUDA_ERROR_ILLEGAL_ADDRESS, SIGILL (the
 * alignment check's trap, -fsanitize=alignment) as
 * CUDA_ERROR_MISALIGNED_ADDRESS; a fault on a managed page first asks
 * mem.cpp, which migrates the page and lets the access go on. Faults on
 * other threads go to the handler that was there before (a host bug
 * still crashes).
 */
#include <mutex>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "emu.h"

dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;

#define STACK_BYTES (256u << 10)
#define MAX_THREADS 1024

struct fiber {
	void *sp;
	dim3 tid;
	int done;
};

struct barrier {
	int members, arrived;
	unsigned int gen;
};

static struct fiber fibers[MAX_THREADS];
static uint8_t *stacks;
static void *sched_sp;
static struct fiber *cur;
static int nfib;
static unsigned long progress;
static struct barrier block_bar, warp_bar[MAX_THREADS / 32];
static uint64_t warp_slots[MAX_THREADS / 32][32];
static struct emu_mma_frag warp_frags[MAX_THREADS / 32][32];
static uint8_t *dyn_smem;
static const struct emu_kernel *kernel;
static void *const *kernel_args;
static sigjmp_buf fault_jmp;
static std::mutex kernel_lock;
static pthread_t kernel_thread;
static volatile sig_atomic_t in_kernel;
static struct sigaction old_act[3];
static const int fault_sigs[3] = { SIGSEGV, SIGBUS, SIGILL };

extern "C" void emu_switch(void **save, void *to);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "	pushq %rbp\n"
    "	pushq %rbx\n"
    "	pushq %r12\n"
    "	pushq %r13\n"
    "	pushq %r14\n"
    "	pushq %r15\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	popq %r15\n"
    "	popq %r14\n"
    "	popq %r13\n"
    "	popq %r12\n"
    "	popq %rbx\n"
    "	popq %rbp\n"
    "	ret\n"
    ".size emu_switch, .-emu_switch\n");

static void yield(void)
{
	emu_switch(&cur->sp, sched_sp);
	__asm__ __volatile__("" ::: "memory"); /* others ran: reload everything */
}

static void bar_wait(struct barrier *b)
{
	unsigned int g = b->gen;

	progress++;
	if (++b->arrived == b->members) {
		b->arrived = 0;
		b->gen++;
		return;
	}
	while (b->gen == g)
		yield();
}

static void bar_leave(struct barrier *b)
{
	b->members--;
	if (b->arrived && b->arrived == b->members) {
		b->arrived = 0;
		b->gen++;
	}
}

void emu_syncthreads(void)
{
	bar_wait(&block_bar);
}

void emu_syncwarp(void)
{
	bar_wait(&warp_bar[cur->tid.x / 32]);
}

uint8_t *emu_dyn_smem(void)
{
	return dyn_smem;
}

uint64_t *emu_warp_slots(void)
{
	return warp_slots[cur->tid.x / 32];
}

struct emu_mma_frag *emu_warp_frags(void)
{
	return warp_frags[cur->tid.x / 32];
}

static void fiber_main(void)
{
	kernel->invoke(kernel->fn, kernel_args);
	bar_leave(&block_bar);
	bar_leave(&warp_bar[cur->tid.x / 32]);
	cur->done = 1;
	progress++;
	for (;;)
		yield();
}

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
	int i = sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : 2;

	if (sig != SIGILL && emu_managed_fault(si->si_addr))
		return; /* the page is there now: retry the access */
	if (emu_in_kernel_thread())
		siglongjmp(fault_jmp, sig);
	/* Not ours: the previous handler, or the default action. */
	if (old_act[i].sa_flags & SA_SIGINFO) {
		old_act[i].sa_sigaction(sig, si, uc);
	} else if (old_act[i].sa_handler != SIG_DFL && old_act[i].sa_handler != SIG_IGN) {
		old_act[i].sa_handler(sig);
	} else {
		signal(sig, SIG_DFL);
		raise(sig);
	}
}

static void install_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	for (int i = 0; i < 3; i++)
		sigaction(fault_sigs[i], &sa, &old_act[i]);
}

/* A buffer whose end touches a PROT_NONE page: overruns fault. */
void *emu_guarded_alloc(size_t bytes, size_t align)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = (bytes + align - 1) / align * align;
	size_t map = (len + 2 * pg - 1) / pg * pg + pg;
	uint8_t *base = (uint8_t *)mmap(NULL, map, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (base == MAP_FAILED)
		return NULL;
	mprotect(base + map - pg, pg, PROT_NONE);
	/* remember the mapping just before the buffer */
	uint8_t *p = base + map - pg - len;
	if (p - base < 16) {
		munmap(base, map);
		return NULL;
	}
	((size_t *)p)[-1] = map;
	((void **)p)[-2] = base;
	return p;
}

void emu_guarded_free(void *p)
{
	if (p)
		munmap(((void **)p)[-2], ((size_t *)p)[-1]);
}

static void run_grid(const struct emu_kernel *k, dim3 grid, unsigned int nthreads, void *dsm,
		     size_t smem)
{
	for (unsigned int by = 0; by < grid.y; by++)
		for (unsigned int bx = 0; bx < grid.x; bx++) {
			emu_blockIdx = dim3{ bx, by, 0 };
			if (dsm)
				memset(dsm, 0xcd, smem); /* stale shared memory is garbage */
			dyn_smem = (uint8_t *)dsm;
			nfib = (int)nthreads;
			block_bar = barrier{ nfib, 0, 0 };
			for (int w = 0; w < (nfib + 31) / 32; w++)
				warp_bar[w] = barrier{ min(32, nfib - 32 * w), 0, 0 };
			for (int i = 0; i < nfib; i++) {
				uint64_t *top = (uint64_t *)(stacks + (size_t)(i + 1) * STACK_BYTES);

				*--top = 0;
				*--top = (uint64_t)(uintptr_t)fiber_main;
				for (int r = 0; r < 6; r++)
					*--top = 0;
				fibers[i] = fiber{ top, dim3{ (unsigned int)i, 0, 0 }, 0 };
			}
			for (;;) {
				unsigned long before = progress;
				int live = 0;

				for (int i = 0; i < nfib; i++) {
					if (fibers[i].done)
						continue;
					live++;
					cur = &fibers[i];
					emu_threadIdx = cur->tid;
					emu_switch(&sched_sp, cur->sp);
				}
				if (!live)
					break;
				if (progress == before) {
					fprintf(stderr,
						"emu: deadlock in block (%u, %u) of %s: a barrier "
						"under divergent control flow?\n",
						bx, by, k->name);
					abort();
				}
			}
		}
}

int emu_run_kernel(const struct emu_kernel *k, void *const *args, dim3 grid, dim3 block,
		   size_t smem)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	std::lock_guard<std::mutex> g(kernel_lock);
	volatile int result = OK;
	void *dsm = NULL;

	pthread_once(&once, install_handler);
	if (!stacks) {
		stacks = (uint8_t *)mmap(NULL, (size_t)STACK_BYTES * MAX_THREADS,
					 PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (stacks == MAP_FAILED)
			abort();
		for (int i = 0; i < MAX_THREADS; i++) /* a guard page under each stack */
			mprotect(stacks + (size_t)i * STACK_BYTES, 4096, PROT_NONE);
	}
	if (smem) {
		dsm = emu_guarded_alloc(smem, 16);
		if (!dsm)
			abort();
	}
	kernel = k;
	kernel_args = args;
	emu_blockDim = block;
	emu_gridDim = grid;
	kernel_thread = pthread_self();
	emu_managed_kernel_view(true);
	switch (sigsetjmp(fault_jmp, 1)) {
	case 0:
		in_kernel = 1;
		run_grid(k, grid, block.x * block.y * block.z, dsm, smem);
		break;
	case SIGILL:
		result = E_MISALIGNED_ADDRESS;
		break;
	default:
		result = E_ILLEGAL_ADDRESS;
		break;
	}
	in_kernel = 0;
	emu_managed_kernel_view(false);
	emu_guarded_free(dsm);
	return result;
}

bool emu_in_kernel_thread(void)
{
	return in_kernel && pthread_equal(pthread_self(), kernel_thread);
}
