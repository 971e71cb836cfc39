// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA driver ABI as include/moem/cuda_api.h declares it, checked
 * against the toolkit's cuda.h when one is installed (constants, and that
 * every symbol we dlsym is the name cuda.h maps the call to); and the
 * result helper: sticky errors make a backend fatal, everything after that
 * is refused with -EIO. Needs no GPU.
 */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>

#include "kselftest_harness.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(n + 1);
	if (buf && fread(buf, 1, n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = 0;
	fclose(f);
	return buf;
}

static const char *cuda_h(void)
{
	const char *p = getenv("MOEM_CUDA_H");

	return p ? p : "/usr/local/cuda/include/cuda.h";
}

/* "NAME = value" (enum) or "#define NAME value" somewhere in text. */
static int has_value(const char *text, const char *name, long v)
{
	char pat[256];
	regex_t re;
	int found;

	snprintf(pat, sizeof(pat),
		 "(^|[^A-Za-z0-9_])%s[[:space:]]*(=[[:space:]]*|[[:space:]]+)"
		 "(0x0*%lx|%ld)([^0-9A-Fa-fx]|$)",
		 name, v, v);
	if (regcomp(&re, pat, REG_EXTENDED | REG_NEWLINE))
		return 0;
	found = regexec(&re, text, 0, NULL, 0) == 0;
	regfree(&re);
	return found;
}

#define CONST(x)              \
	{                     \
#x, (long)(x) \
	}

TEST(constants_match_cuda_h)
{
	static const struct {
		const char *name;
		long v;
	} c[] = {
		CONST(CUDA_SUCCESS),
		CONST(CUDA_ERROR_OUT_OF_MEMORY),
		CONST(CUDA_ERROR_NO_DEVICE),
		CONST(CUDA_ERROR_NOT_READY),
		CONST(CUDA_ERROR_ILLEGAL_ADDRESS),
		CONST(CUDA_ERROR_LAUNCH_FAILED),
		CONST(CUDA_ERROR_HARDWARE_STACK_ERROR),
		CONST(CUDA_ERROR_ILLEGAL_INSTRUCTION),
		CONST(CUDA_ERROR_MISALIGNED_ADDRESS),
		CONST(CUDA_ERROR_INVALID_ADDRESS_SPACE),
		CONST(CUDA_ERROR_INVALID_PC),
		CONST(CUDA_ERROR_ASSERT),
		CONST(CUDA_ERROR_ECC_UNCORRECTABLE),
		CONST(CUDA_ERROR_CONTAINED),
		CONST(CUDA_ERROR_LAUNCH_TIMEOUT),
		CONST(CUDA_ERROR_TENSOR_MEMORY_LEAK),
		CONST(CUDA_ERROR_NO_BINARY_FOR_GPU),
		CONST(CUDA_ERROR_STUB_LIBRARY),
		CONST(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
		CONST(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
		CONST(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
		CONST(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
		CONST(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
		CONST(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
		CONST(CU_STREAM_NON_BLOCKING),
		CONST(CU_EVENT_DISABLE_TIMING),
		CONST(CU_MEMHOSTREGISTER_PORTABLE),
		CONST(CU_MEM_ALLOCATION_TYPE_PINNED),
		CONST(CU_MEM_LOCATION_TYPE_DEVICE),
		CONST(CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
		CONST(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
		CONST(CU_MEM_HANDLE_TYPE_NONE),
		CONST(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
		CONST(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
		CONST(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
		CONST(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS),
		CONST(CU_EVENT_BLOCKING_SYNC),
		CONST(CU_MEMHOSTREGISTER_DEVICEMAP),
		CONST(CU_MEM_ATTACH_GLOBAL),
		CONST(CU_MEM_ADVISE_SET_READ_MOSTLY),
		CONST(CU_MEM_ADVISE_SET_PREFERRED_LOCATION),
		CONST(CU_MEM_ADVISE_SET_ACCESSED_BY),
		CONST(CU_MEM_LOCATION_TYPE_HOST),
		CONST(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
		CONST(CU_STREAM_CAPTURE_MODE_RELAXED),
	};
	char *text = slurp(cuda_h());

	if (!text)
		SKIP(return, "no %s (set MOEM_CUDA_H): nothing to compare with", cuda_h());
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		EXPECT_TRUE(has_value(text, c[i].name, c[i].v))
		TH_LOG("%s = %ld not found in %s", c[i].name, c[i].v, cuda_h());
	}
	/* Struct layouts copied from cuda.h (x86-64, LP64). */
	EXPECT_EQ(32u, sizeof(CUmemAllocationProp));
	EXPECT_EQ(12u, sizeof(CUmemAccessDesc));
	EXPECT_EQ(8u, sizeof(CUmemLocation)); /* passed by value to cuMemAdvise_v2 */
	free(text);
}

#define SYMNAME(field, args, sym, fallback) {#field, sym},

TEST(symbols_are_the_ones_cuda_h_maps_to)
{
	static const struct {
		const char *call, *sym;
	} s[] = {MOEM_CUDA_FUNCS(SYMNAME)};
	char *text = slurp(cuda_h());

	if (!text)
		SKIP(return, "no %s (set MOEM_CUDA_H): nothing to compare with", cuda_h());
	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		char pat[256];
		regmatch_t m[3];
		bool mapped = false;
		regex_t re;

		snprintf(pat, sizeof(pat),
			 "#define[[:space:]]+%s[[:space:]]+(__CUDA_API_PT[SDZ]+\\()?(cu[A-Za-z0-9_]"
			 "+)",
			 s[i].call);
		ASSERT_EQ(0, regcomp(&re, pat, REG_EXTENDED | REG_NEWLINE));
		/* Every #define of the call must name our symbol (PTDS wrappers aside). */
		for (const char *p = text; !regexec(&re, p, 3, m, 0); p += m[0].rm_eo) {
			int len = (int)(m[2].rm_eo - m[2].rm_so);

			EXPECT_TRUE(len == (int)strlen(s[i].sym) &&
				    !strncmp(p + m[2].rm_so, s[i].sym, len))
			TH_LOG("cuda.h maps %s to %.*s, we use %s", s[i].call, len, p + m[2].rm_so,
			       s[i].sym);
			mapped = true;
		}
		regfree(&re);
		if (!mapped) {
			snprintf(pat, sizeof(pat), "CUresult CUDAAPI %s(", s[i].sym);
			EXPECT_NE(NULL, strstr(text, pat)) TH_LOG("%s not declared", s[i].sym);
		}
	}
	free(text);
}

TEST(sticky_errors_make_the_backend_fatal)
{
	struct moem_backend *be;
	moem_dptr d;

	EXPECT_TRUE(moem_cuda_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
	EXPECT_TRUE(moem_cuda_is_sticky(CUDA_ERROR_LAUNCH_FAILED));
	EXPECT_TRUE(moem_cuda_is_sticky(CUDA_ERROR_MISALIGNED_ADDRESS));
	EXPECT_FALSE(moem_cuda_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
	EXPECT_FALSE(moem_cuda_is_sticky(CUDA_ERROR_NOT_READY));

	/* The helper works on any backend handle; a CPU one needs no GPU. */
	ASSERT_EQ(0, moem_backend_open("cpu", NULL, &be));
	EXPECT_EQ(0, moem_cuda_check(be, CUDA_SUCCESS, "nothing"));
	EXPECT_EQ(-ENOMEM, moem_cuda_check(be, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"));
	EXPECT_EQ(-EAGAIN, moem_cuda_check(be, CUDA_ERROR_NOT_READY, "cuEventQuery"));
	EXPECT_FALSE(moem_backend_fatal(be));
	EXPECT_EQ(0, moem_be_alloc(be, 64, &d));
	EXPECT_EQ(-EIO, moem_cuda_check(be, CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "cuStreamSynchronize"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "fatal"));
	EXPECT_TRUE(moem_backend_fatal(be));
	/* The first sticky error is kept; later calls are refused. */
	moem_cuda_check(be, CUDA_ERROR_LAUNCH_FAILED, "later");
	EXPECT_NE(NULL, strstr(moem_backend_fatal_msg(be), "cuStreamSynchronize"));
	EXPECT_EQ(-EIO, moem_be_memset(be, d, 0, 64, NULL));
	EXPECT_EQ(-EIO, moem_be_sync(be));
	EXPECT_NE(NULL, strstr(moem_last_error(), "unusable after a fatal device error"));
	moem_be_free(be, d);
	moem_backend_close(be);
}

TEST_HARNESS_MAIN
