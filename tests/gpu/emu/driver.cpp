// SPDX-License-Identifier: GPL-2.0-only
/*
 * A fake libcuda.so.1 for the kernel emulator: the driver entry points
 * libmoem dlsym()s, over host memory, running the kernels compiled for
 * the host (MOEM_KERNEL_EMU) when they are launched. With
 * LD_LIBRARY_PATH pointing here the CUDA backend and tests/gpu run
 * unchanged: launchers, descriptor ring, kernels, comparisons.
 *
 * This file: the device, context and modules, and kernel launches, which
 * are checked as the driver checks them (grid and block limits, the
 * kernel's __launch_bounds__, dynamic shared memory above 48 KiB only
 * after cuFuncSetAttribute) and then queued on their stream (stream.cpp)
 * with a copy of their parameters. A fault inside a kernel makes the
 * context sticky-broken (CUDA_ERROR_ILLEGAL_ADDRESS or
 * CUDA_ERROR_MISALIGNED_ADDRESS from then on), as on a GPU. Memory is in
 * mem.cpp.
 */
#include <map>
#include <memory>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "emu.h"

std::atomic<int> emu_sticky;

#define STICKY()                                                                                   \
	do {                                                                                       \
		if (emu_sticky)                                                                    \
			return emu_sticky;                                                         \
	} while (0)

/* ---- kernels: registered by the kernel objects (EMU_KERNEL) ------------ */

struct kfunc {
	struct emu_kernel k;
	int max_dyn_smem;
};

/* Built by static constructors: never destroyed (streams may run at exit). */
static std::map<std::string, kfunc *> &registry(void)
{
	static auto *m = new std::map<std::string, kfunc *>();

	return *m;
}

void emu_register_kernel(const struct emu_kernel *k)
{
	registry()[k->name] = new kfunc{ *k, 48 << 10 };
}

/* ---- driver API ----------------------------------------------------------- */

/* As the real driver: CUDA_VISIBLE_DEVICES="" (or a negative id) hides the device. */
CUAPI cuInit(unsigned int)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");

	return v && (!*v || *v == '-') ? E_NO_DEVICE : OK;
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
	case E_MISALIGNED_ADDRESS:
		*s = "CUDA_ERROR_MISALIGNED_ADDRESS";
		break;
	case E_LAUNCH_OUT_OF_RESOURCES:
		*s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
		break;
	case E_INVALID_HANDLE:
		*s = "CUDA_ERROR_INVALID_HANDLE";
		break;
	case E_HOST_MEMORY_ALREADY_REGISTERED:
		*s = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
		break;
	case E_HOST_MEMORY_NOT_REGISTERED:
		*s = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
		break;
	case E_STREAM_CAPTURE_UNSUPPORTED:
		*s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
		break;
	case E_STREAM_CAPTURE_INVALIDATED:
		*s = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
		break;
	case E_NOT_SUPPORTED:
		*s = "CUDA_ERROR_NOT_SUPPORTED";
		break;
	case E_NO_DEVICE:
		*s = "CUDA_ERROR_NO_DEVICE";
		break;
	default:
		*s = "CUDA_ERROR_INVALID_VALUE";
		break;
	}
	return OK;
}

CUAPI cuGetErrorString(int e, const char **s)
{
	*s = e == E_ILLEGAL_ADDRESS	   ? "an illegal memory access was encountered (emulated)"
	     : e == E_MISALIGNED_ADDRESS ? "misaligned address (emulated)"
	     : e == E_LAUNCH_OUT_OF_RESOURCES
		     ? "too many resources requested for launch (emulated)"
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
	case 16: /* SMs: an H100's, or MOEM_EMU_SMS (choices that depend on it) */
		*v = getenv("MOEM_EMU_SMS") ? atoi(getenv("MOEM_EMU_SMS")) : 132;
		if (*v < 1)
			*v = 1;
		break;
	case 41: /* unified addressing */
	case 83: /* concurrent managed access */
	case 89: /* managed memory */
	case 102: /* virtual memory management */
		*v = 1;
		break;
	case 97: /* max dynamic shared memory per block, opt-in (sm_90) */
		*v = 227 << 10;
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

CUAPI cuDevicePrimaryCtxSetFlags_v2(int, unsigned int flags)
{
	/* Scheduling flags only; the emulator's waits always block. */
	return flags & ~0x7u ? E_INVALID_VALUE : OK;
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
	auto it = registry().find(name);

	if (it == registry().end())
		return E_NOT_FOUND;
	*f = it->second;
	return OK;
}

/* The one module holds every registered kernel. */
CUAPI cuModuleGetFunctionCount(unsigned int *count, void *)
{
	STICKY();
	*count = (unsigned int)registry().size();
	return OK;
}

CUAPI cuModuleEnumerateFunctions(const void **fns, unsigned int n, void *)
{
	unsigned int i = 0;

	STICKY();
	if (!fns)
		return E_INVALID_VALUE;
	for (auto &e : registry()) {
		if (i == n)
			break; /* at most n, as the driver */
		fns[i++] = e.second;
	}
	return OK;
}

CUAPI cuFuncGetName(const char **name, const kfunc *f)
{
	if (!f || !name)
		return E_INVALID_VALUE;
	*name = f->k.name;
	return OK;
}

/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (8): up to sm_90's 227 KiB. */
CUAPI cuFuncSetAttribute(kfunc *f, int attr, int value)
{
	if (!f)
		return E_INVALID_HANDLE;
	if (attr == 8) {
		if (value < 0 || value > (227 << 10))
			return E_INVALID_VALUE;
		f->max_dyn_smem = value > (48 << 10) ? value : 48 << 10;
	}
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

CUAPI cuLaunchKernel(kfunc *f, unsigned int gx, unsigned int gy, unsigned int gz,
		     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, void *s,
		     void **params, void **extra)
{
	const struct emu_kernel *k = f ? &f->k : NULL;
	std::shared_ptr<std::vector<uint8_t>> buf;
	std::vector<size_t> off;
	size_t at = 0;
	long nth;

	STICKY();
	if (!k)
		return E_INVALID_HANDLE;
	if (extra || (k->nargs && !params))
		return E_INVALID_VALUE;
	/* The driver's limits (sm_90), then the kernel's own. */
	if (!gx || !gy || !gz || gy > 65535 || gz > 65535 || gx > 0x7fffffffu || !bx || !by ||
	    !bz || bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024)
		return E_INVALID_VALUE;
	if (bx * by * bz > k->max_threads) {
		fprintf(stderr, "emu: %s launched with %u threads, __launch_bounds__(%u)\n",
			k->name, bx * by * bz, k->max_threads);
		return E_LAUNCH_OUT_OF_RESOURCES;
	}
	if ((int)smem > f->max_dyn_smem) {
		fprintf(stderr, "emu: %s: %u bytes of dynamic shared memory, %d allowed%s\n",
			k->name, smem, f->max_dyn_smem,
			f->max_dyn_smem <= (48 << 10) ? " (more needs cuFuncSetAttribute)" : "");
		return E_INVALID_VALUE;
	}
	if (by != 1 || bz != 1 || gz != 1) {
		fprintf(stderr, "emu: %s: the emulator runs 1-D blocks and 2-D grids only\n",
			k->name);
		return E_NOT_SUPPORTED;
	}
	/* The parameters as they are now: the kernel runs later. */
	for (unsigned int i = 0; i < k->nargs; i++) {
		at = (at + k->align[i] - 1) / k->align[i] * k->align[i];
		off.push_back(at);
		at += k->size[i];
	}
	buf = std::make_shared<std::vector<uint8_t>>(at + 16);
	for (unsigned int i = 0; i < k->nargs; i++)
		memcpy(buf->data() + off[i], params[i], k->size[i]);
	/* a capture's launches count when a graph of them runs */
	if (!emu_capturing((emu_stream *)s))
		emu_count_launch(k->name, false);
	nth = fault_launch();
	return emu_enqueue_kernel(
		(emu_stream *)s,
		[k, buf, off, gx, gy, bx, smem, nth] {
			void *args[16];
			int r;

			if (nth) {
				fprintf(stderr, "emu: launch %ld (%s) faulted (MOEM_EMU_FAULT_LAUNCH)\n",
					nth, k->name);
				emu_sticky = E_ILLEGAL_ADDRESS;
				return;
			}
			for (unsigned int i = 0; i < k->nargs; i++)
				args[i] = buf->data() + off[i];
			r = emu_run_kernel(k, args, dim3{ gx, gy, 1 }, dim3{ bx, 1, 1 }, smem);
			if (r) {
				fprintf(stderr, "emu: %s faulted (%s)\n", k->name,
					r == E_MISALIGNED_ADDRESS ? "misaligned address"
								  : "illegal address");
				/* reported by the next call, like a real fault */
				int zero = 0;

				emu_sticky.compare_exchange_strong(zero, r);
			}
		},
		k->name);
}

