// SPDX-License-Identifier: GPL-2.0-only
/*
 * A fake libcuda.so.1 for the kernel emulator: the driver entry points
 * libmoem dlsym()s, over host memory, running the kernels compiled for
 * the host (MOEM_KERNEL_EMU) when they are launched. With
 * LD_LIBRARY_PATH pointing here the CUDA backend and tests/gpu run
 * unchanged: launchers, descriptor ring, kernels, comparisons. Everything
 * is synchronous; device allocations end at a guard page so overreads
 * fault; a fault inside a kernel makes the context sticky-broken
 * (CUDA_ERROR_ILLEGAL_ADDRESS from then on), as on a GPU.
 */
#include <chrono>
#include <map>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu.h"
#include "emu.h"
#include "../../../cuda/kparams.h"
#include "../../../cuda/decode_kparams.h"

#define CUAPI extern "C" __attribute__((visibility("default"))) int

enum {
	OK = 0,
	E_INVALID_VALUE = 1,
	E_OUT_OF_MEMORY = 2,
	E_NOT_FOUND = 500,
	E_NOT_READY = 600,
	E_ILLEGAL_ADDRESS = 700,
	E_NOT_SUPPORTED = 801,
};

static int sticky;
static std::map<uint64_t, size_t> allocs;

#define STICKY()                                                                                   \
	do {                                                                                       \
		if (sticky)                                                                        \
			return sticky;                                                             \
	} while (0)

/* ---- kernels ------------------------------------------------------------ */

struct kernel {
	const char *name;
	void (*run)(const void *);
};

#define DECL(name, type) extern "C" void name(const type);
#define ENTRY(name, type) { #name, [](const void *p) { name(*(const type *)p); } },

#define FFN(X, prec, nt)                                                                           \
	X(moem_ffn_gateup_##prec##_n##nt, moem_kffn_params)                                        \
	X(moem_ffn_down_##prec##_n##nt, moem_kffn_params)
#define FFN_NT(X, prec) FFN(X, prec, 1) FFN(X, prec, 2) FFN(X, prec, 4) FFN(X, prec, 8)
#define KERNELS(X)                                                                                 \
	X(moem_rmsnorm, moem_krmsnorm_params)                                                      \
	X(moem_route, moem_kroute_params)                                                          \
	X(moem_combine, moem_kcombine_params)                                                      \
	X(moem_histogram, moem_khist_params)                                                       \
	X(moem_quantize_q8, moem_kquant_params)                                                    \
	X(moem_quantize_q4, moem_kquant_params)                                                    \
	X(moem_quantize_q2, moem_kquant_params)                                                    \
	X(moem_router_n1, moem_kgemm_params)                                                       \
	X(moem_router_n2, moem_kgemm_params)                                                       \
	X(moem_router_n4, moem_kgemm_params)                                                       \
	X(moem_router_n8, moem_kgemm_params)                                                       \
	FFN_NT(X, bf16) FFN_NT(X, q8) FFN_NT(X, q4) FFN_NT(X, q2) DECODE_KERNELS(X)
/* The full-decode kernels (cuda/decode_kparams.h). */
#define DECODE_KERNELS(X)                                                                          \
	X(moem_embed, moem_kembed_params)                                                          \
	X(moem_matmul, moem_kmatmul_params)                                                        \
	X(moem_rownorm, moem_krownorm_params)                                                      \
	X(moem_convert, moem_kconvert_params)                                                      \
	X(moem_convert_seq, moem_kconvert_params)                                                  \
	X(moem_rope, moem_krope_params)                                                            \
	X(moem_head_matmul, moem_khead_mm_params)                                                  \
	X(moem_kv_store, moem_kkv_store_params)                                                    \
	X(moem_attn_part, moem_kattn_params)                                                       \
	X(moem_attn_merge, moem_kattn_params)

KERNELS(DECL)

static const struct kernel kernels[] = { KERNELS(ENTRY) };

/* ---- driver API ----------------------------------------------------------- */

CUAPI cuInit(unsigned int)
{
	return OK;
}

CUAPI cuDriverGetVersion(int *v)
{
	*v = 13000;
	return OK;
}

CUAPI cuGetErrorName(int e, const char **s)
{
	switch (e) {
	case OK:
		*s = "CUDA_SUCCESS";
		break;
	case E_OUT_OF_MEMORY:
		*s = "CUDA_ERROR_OUT_OF_MEMORY";
		break;
	case E_NOT_FOUND:
		*s = "CUDA_ERROR_NOT_FOUND";
		break;
	case E_NOT_READY:
		*s = "CUDA_ERROR_NOT_READY";
		break;
	case E_ILLEGAL_ADDRESS:
		*s = "CUDA_ERROR_ILLEGAL_ADDRESS";
		break;
	case E_NOT_SUPPORTED:
		*s = "CUDA_ERROR_NOT_SUPPORTED";
		break;
	default:
		*s = "CUDA_ERROR_INVALID_VALUE";
		break;
	}
	return OK;
}

CUAPI cuGetErrorString(int e, const char **s)
{
	*s = e == E_ILLEGAL_ADDRESS ? "an illegal memory access was encountered (emulated)"
				    : "moem kernel emulator";
	return OK;
}

CUAPI cuDeviceGet(int *d, int ordinal)
{
	if (ordinal != 0)
		return 101;
	*d = 0;
	return OK;
}

CUAPI cuDeviceGetCount(int *n)
{
	*n = 1;
	return OK;
}

CUAPI cuDeviceGetName(char *name, int len, int)
{
	snprintf(name, len, "moem kernel emulator");
	return OK;
}

CUAPI cuDeviceGetAttribute(int *v, int attr, int)
{
	switch (attr) {
	case 75: /* compute capability */
		*v = 9;
		break;
	case 76:
		*v = 0;
		break;
	case 16: /* SMs */
		*v = 1;
		break;
	default:
		*v = 0;
		break;
	}
	return OK;
}

CUAPI cuDeviceTotalMem_v2(size_t *bytes, int)
{
	*bytes = 8ull << 30;
	return OK;
}

CUAPI cuDevicePrimaryCtxRetain(void **ctx, int)
{
	static int the_ctx;

	*ctx = &the_ctx;
	return OK;
}

CUAPI cuDevicePrimaryCtxRelease_v2(int)
{
	return OK;
}

CUAPI cuCtxSetCurrent(void *)
{
	return OK;
}

CUAPI cuCtxSynchronize(void)
{
	STICKY();
	return OK;
}

CUAPI cuModuleLoadData(void **m, const void *)
{
	static int the_module;

	STICKY();
	*m = &the_module;
	return OK;
}

CUAPI cuModuleUnload(void *)
{
	return OK;
}

CUAPI cuModuleGetFunction(const void **f, void *, const char *name)
{
	for (const struct kernel &k : kernels)
		if (!strcmp(k.name, name)) {
			*f = &k;
			return OK;
		}
	return E_NOT_FOUND;
}

CUAPI cuFuncSetAttribute(void *, int, int)
{
	return OK;
}

/*
 * For tests of fatal-error handling (moemd's exit status):
 * MOEM_EMU_FAULT_LAUNCH=N makes the N-th kernel launch fault, as a kernel
 * touching an illegal address would.
 */
static long fault_launch(void)
{
	static long at = -1, launches;

	if (at < 0) {
		const char *s = getenv("MOEM_EMU_FAULT_LAUNCH");

		at = s ? atol(s) : 0;
	}
	return at > 0 && ++launches == at ? launches : 0;
}

CUAPI cuLaunchKernel(const struct kernel *f, unsigned int gx, unsigned int gy, unsigned int gz,
		     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, void *,
		     void **params, void **)
{
	long nth;
	int r;

	STICKY();
	nth = fault_launch();
	if (nth) {
		fprintf(stderr, "emu: launch %ld (%s) faulted (MOEM_EMU_FAULT_LAUNCH)\n", nth, f->name);
		sticky = E_ILLEGAL_ADDRESS;
		return OK;
	}
	if (gz != 1 || !gx || !gy || gy > 65535)
		return E_INVALID_VALUE;
	r = emu_launch(f->run, params[0], dim3{ gx, gy, gz }, dim3{ bx, by, bz }, smem);
	if (r < 0)
		return E_INVALID_VALUE;
	if (r > 0) {
		fprintf(stderr, "emu: %s faulted (illegal address)\n", f->name);
		sticky = E_ILLEGAL_ADDRESS; /* reported by the next call, like a real fault */
	}
	return OK;
}

CUAPI cuMemAlloc_v2(uint64_t *p, size_t bytes)
{
	void *m;

	STICKY();
	m = emu_guarded_alloc(bytes, 256);
	if (!m)
		return E_OUT_OF_MEMORY;
	*p = (uint64_t)(uintptr_t)m;
	allocs[*p] = bytes;
	return OK;
}

CUAPI cuMemFree_v2(uint64_t p)
{
	auto it = allocs.find(p);

	if (it == allocs.end())
		return E_INVALID_VALUE;
	emu_guarded_free((void *)(uintptr_t)p);
	allocs.erase(it);
	STICKY();
	return OK;
}

CUAPI cuMemAllocHost_v2(void **p, size_t bytes)
{
	*p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
	return *p ? OK : E_OUT_OF_MEMORY;
}

CUAPI cuMemFreeHost(void *p)
{
	free(p);
	return OK;
}

CUAPI cuMemGetInfo_v2(size_t *fr, size_t *total)
{
	size_t used = 0;

	STICKY();
	for (auto &a : allocs)
		used += a.second;
	*total = 8ull << 30;
	*fr = *total > used ? *total - used : 0;
	return OK;
}

CUAPI cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *)
{
	STICKY();
	memset((void *)(uintptr_t)p, v, n);
	return OK;
}

CUAPI cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *)
{
	STICKY();
	memmove((void *)(uintptr_t)dst, src, n);
	return OK;
}

CUAPI cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *)
{
	STICKY();
	memmove(dst, (const void *)(uintptr_t)src, n);
	return OK;
}

CUAPI cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *)
{
	STICKY();
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return OK;
}

CUAPI cuMemHostRegister_v2(void *, size_t, unsigned int)
{
	STICKY();
	return OK;
}

CUAPI cuMemHostUnregister(void *)
{
	STICKY();
	return OK;
}

CUAPI cuStreamCreate(void **s, unsigned int)
{
	static int streams;

	STICKY();
	*s = (void *)(uintptr_t)++streams;
	return OK;
}

CUAPI cuStreamDestroy_v2(void *)
{
	return OK;
}

CUAPI cuStreamSynchronize(void *)
{
	STICKY();
	return OK;
}

CUAPI cuStreamQuery(void *)
{
	STICKY();
	return OK;
}

CUAPI cuStreamWaitEvent(void *, void *, unsigned int)
{
	STICKY();
	return OK;
}

CUAPI cuEventCreate(void **e, unsigned int)
{
	STICKY();
	*e = calloc(1, sizeof(double));
	return *e ? OK : E_OUT_OF_MEMORY;
}

CUAPI cuEventDestroy_v2(void *e)
{
	free(e);
	return OK;
}

CUAPI cuEventRecord(void *e, void *)
{
	STICKY();
	*(double *)e = std::chrono::duration<double, std::milli>(
			       std::chrono::steady_clock::now().time_since_epoch())
			       .count();
	return OK;
}

CUAPI cuEventQuery(void *)
{
	STICKY();
	return OK;
}

CUAPI cuEventSynchronize(void *)
{
	STICKY();
	return OK;
}

CUAPI cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
	STICKY();
	*ms = (float)(*(double *)b - *(double *)a);
	return OK;
}

/*
 * Virtual memory management, emulated on host address space: a
 * reservation is PROT_NONE, a mapped range becomes read-write (fresh
 * zeroed pages), an unmapped one is released and faults again, so an
 * access outside the mapped arena crashes like an illegal address would.
 * Physical handles only count: the tiers never map one twice.
 */
static std::map<unsigned long long, size_t> vmm_handles;
static unsigned long long vmm_next_handle = 1;

CUAPI cuMemAddressReserve(uint64_t *p, size_t size, size_t, uint64_t, unsigned long long)
{
	void *m;

	STICKY();
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
	STICKY();
	*h = vmm_next_handle++;
	vmm_handles[*h] = size;
	return OK;
}

CUAPI cuMemRelease(unsigned long long h)
{
	return vmm_handles.erase(h) ? OK : E_INVALID_VALUE;
}

CUAPI cuMemMap(uint64_t p, size_t size, size_t, unsigned long long h, unsigned long long)
{
	STICKY();
	if (!vmm_handles.count(h) || vmm_handles[h] != size)
		return E_INVALID_VALUE;
	return mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE) ? E_INVALID_VALUE : OK;
}

CUAPI cuMemUnmap(uint64_t p, size_t size)
{
	madvise((void *)(uintptr_t)p, size, MADV_DONTNEED);
	return mprotect((void *)(uintptr_t)p, size, PROT_NONE) ? E_INVALID_VALUE : OK;
}

CUAPI cuMemSetAccess(uint64_t, size_t, const void *, size_t)
{
	STICKY();
	return OK;
}

CUAPI cuMemGetAllocationGranularity(size_t *g, const void *, int)
{
	*g = 2u << 20;
	return OK;
}
