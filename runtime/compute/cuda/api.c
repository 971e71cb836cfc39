// SPDX-License-Identifier: GPL-2.0-only
/*
 * libcuda.so.1 through dlopen (cuda_api.h): the driver table, error
 * names, and the one helper every driver call's result goes through.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <moem/cuda_api.h>
#include <moem/error.h>

#include "../backend/backend_int.h"

static struct moem_cuda_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static int api_ret;
static char api_msg[256];

struct sym {
	const char *name, *fallback;
	size_t off;
};

#define MOEM_CUDA_SYM(field, args, s, fb) {s, fb, offsetof(struct moem_cuda_api, field)},

static const struct sym syms[] = {MOEM_CUDA_FUNCS(MOEM_CUDA_SYM)};

static void api_load_once(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		const char *e = dlerror();

		snprintf(api_msg, sizeof(api_msg), "libcuda.so.1 not found (%s)",
			 e ? e : "dlopen failed");
		api_ret = -ENODEV;
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(lib, syms[i].name);

		if (!f && syms[i].fallback)
			f = dlsym(lib, syms[i].fallback);
		if (!f) {
			snprintf(api_msg, sizeof(api_msg), "libcuda.so.1 lacks %s (driver too old)",
				 syms[i].name);
			api_ret = -ENODEV;
			dlclose(lib);
			return;
		}
		memcpy((char *)&api + syms[i].off, &f, sizeof(f));
	}
	/* The library stays loaded for the life of the process, like cudart does. */
}

int moem_cuda_api_load(const struct moem_cuda_api **out)
{
	pthread_once(&api_once, api_load_once);
	if (api_ret)
		return moem_errf(-api_ret, "%s", api_msg);
	*out = &api;
	return 0;
}

const char *moem_cuda_strerror(CUresult r, char *buf, size_t len)
{
	const char *name = NULL, *str = NULL;

	if (api.cuGetErrorName)
		api.cuGetErrorName(r, &name);
	if (api.cuGetErrorString)
		api.cuGetErrorString(r, &str);
	if (name)
		snprintf(buf, len, "%s (%s)", name, str ? str : "?");
	else
		snprintf(buf, len, "CUresult %d", r);
	return buf;
}

int moem_cuda_is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_NVLINK_UNCORRECTABLE:
	case CUDA_ERROR_CONTAINED:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
	case CUDA_ERROR_EXTERNAL_DEVICE:
		return 1;
	default:
		return 0;
	}
}

int moem_cuda_check(struct moem_backend *be, CUresult r, const char *what)
{
	char es[160], msg[256];

	if (moem_likely(r == CUDA_SUCCESS))
		return 0;
	moem_cuda_strerror(r, es, sizeof(es));
	snprintf(msg, sizeof(msg), "%s: %s", what, es);
	if (moem_cuda_is_sticky(r)) {
		if (be)
			moem_backend_set_fatal(be, msg);
		return moem_errf(EIO, "%s (fatal: the process must restart)", msg);
	}
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return moem_errf(ENOMEM, "%s", msg);
	case CUDA_ERROR_NOT_READY:
		return moem_errf(EAGAIN, "%s", msg);
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
		return moem_errf(ENODEV, "%s", msg);
	default:
		return moem_errf(EINVAL, "%s", msg);
	}
}
