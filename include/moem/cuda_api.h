/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CUDA driver API as libmoem uses it: loaded at run time with
 * dlopen("libcuda.so.1"), every entry point resolved with dlsym into one
 * table. No cudart, no CUDA headers at build time, no GPU needed to link:
 * the types and constants below are the driver ABI's (values checked
 * against CUDA 13.0's cuda.h by tests/unit/test_backend_cuda_api.c when
 * cuda.h is installed). Symbols are the versioned names cuda.h maps to
 * (cuMemAlloc -> cuMemAlloc_v2, ...), with older names as fallbacks.
 *
 * The tiers layer builds the HBM arena (VMM) on this table; it checks
 * every CUresult through moem_cuda_check() so that sticky errors mark the
 * backend fatal.
 */
#ifndef MOEM_CUDA_API_H
#define MOEM_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

struct moem_backend;

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_STUB_LIBRARY = 34,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
	CUDA_ERROR_ECC_UNCORRECTABLE = 214,
	CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
	CUDA_ERROR_CONTAINED = 226,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
	CUDA_ERROR_LAUNCH_TIMEOUT = 702,
	CUDA_ERROR_ASSERT = 710,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
	CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
	CUDA_ERROR_MISALIGNED_ADDRESS = 716,
	CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
	CUDA_ERROR_INVALID_PC = 718,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_TENSOR_MEMORY_LEAK = 721,
	CUDA_ERROR_MPS_CLIENT_TERMINATED = 810,
	CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
	CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
	CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
	CUDA_ERROR_EXTERNAL_DEVICE = 911,
	CUDA_ERROR_UNKNOWN = 999,
};

/* CUdevice_attribute values moem reads. */
enum {
	CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
	CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
	CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
	CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
	CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
	CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
};

enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };
enum { CU_STREAM_DEFAULT = 0x0, CU_STREAM_NON_BLOCKING = 0x1 };
enum { CU_EVENT_DEFAULT = 0x0, CU_EVENT_BLOCKING_SYNC = 0x1, CU_EVENT_DISABLE_TIMING = 0x2 };
enum { CU_CTX_SCHED_BLOCKING_SYNC = 0x4 };
#define CU_MEMHOSTREGISTER_PORTABLE  0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_MEM_ATTACH_GLOBAL	     0x1

/* Unified memory advice (cuMemAdvise). */
enum {
	CU_MEM_ADVISE_SET_READ_MOSTLY = 1,
	CU_MEM_ADVISE_UNSET_READ_MOSTLY = 2,
	CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3,
	CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION = 4,
	CU_MEM_ADVISE_SET_ACCESSED_BY = 5,
	CU_MEM_ADVISE_UNSET_ACCESSED_BY = 6,
};

/* Stream capture (a decode step as one CUDA graph). */
enum {
	CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
	CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

/* Virtual memory management (cuMemCreate and friends), for the tiers. */
typedef enum {
	CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
} CUmemAllocationType;

typedef enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
} CUmemAllocationHandleType;

typedef enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
	CU_MEM_LOCATION_TYPE_HOST = 0x2,
} CUmemLocationType;

typedef enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
} CUmemAccess_flags;

typedef enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

typedef struct {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

/* X(field, return-free prototype arguments, symbol, fallback symbol or NULL) */
#define MOEM_CUDA_FUNCS(X)                                                                         \
	X(cuInit, (unsigned int flags), "cuInit", NULL)                                            \
	X(cuDriverGetVersion, (int *v), "cuDriverGetVersion", NULL)                                \
	X(cuGetErrorName, (CUresult e, const char **s), "cuGetErrorName", NULL)                    \
	X(cuGetErrorString, (CUresult e, const char **s), "cuGetErrorString", NULL)                \
	X(cuDeviceGet, (CUdevice * d, int ordinal), "cuDeviceGet", NULL)                           \
	X(cuDeviceGetCount, (int *n), "cuDeviceGetCount", NULL)                                    \
	X(cuDeviceGetName, (char *name, int len, CUdevice d), "cuDeviceGetName", NULL)             \
	X(cuDeviceGetAttribute, (int *v, int attr, CUdevice d), "cuDeviceGetAttribute", NULL)      \
	X(cuDeviceTotalMem, (size_t * bytes, CUdevice d), "cuDeviceTotalMem_v2", NULL)             \
	X(cuDevicePrimaryCtxSetFlags, (CUdevice d, unsigned int flags),                            \
	  "cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags")                           \
	X(cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d), "cuDevicePrimaryCtxRetain", NULL) \
	X(cuDevicePrimaryCtxRelease, (CUdevice d), "cuDevicePrimaryCtxRelease_v2",                 \
	  "cuDevicePrimaryCtxRelease")                                                             \
	X(cuCtxSetCurrent, (CUcontext c), "cuCtxSetCurrent", NULL)                                 \
	X(cuCtxSynchronize, (void), "cuCtxSynchronize", NULL)                                      \
	X(cuModuleLoadData, (CUmodule * m, const void *image), "cuModuleLoadData", NULL)           \
	X(cuModuleUnload, (CUmodule m), "cuModuleUnload", NULL)                                    \
	X(cuModuleGetFunction, (CUfunction * f, CUmodule m, const char *name),                     \
	  "cuModuleGetFunction", NULL)                                                             \
	X(cuModuleGetFunctionCount, (unsigned int *count, CUmodule m), "cuModuleGetFunctionCount", \
	  NULL)                                                                                    \
	X(cuModuleEnumerateFunctions, (CUfunction * fns, unsigned int n, CUmodule m),              \
	  "cuModuleEnumerateFunctions", NULL)                                                      \
	X(cuFuncGetName, (const char **name, CUfunction f), "cuFuncGetName", NULL)                 \
	X(cuFuncSetAttribute, (CUfunction f, int attr, int value), "cuFuncSetAttribute", NULL)     \
	X(cuLaunchKernel,                                                                          \
	  (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,       \
	   unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,         \
	   void **extra),                                                                          \
	  "cuLaunchKernel", NULL)                                                                  \
	X(cuMemAlloc, (CUdeviceptr * p, size_t bytes), "cuMemAlloc_v2", NULL)                      \
	X(cuMemFree, (CUdeviceptr p), "cuMemFree_v2", NULL)                                        \
	X(cuMemAllocHost, (void **p, size_t bytes), "cuMemAllocHost_v2", NULL)                     \
	X(cuMemFreeHost, (void *p), "cuMemFreeHost", NULL)                                         \
	X(cuMemGetInfo, (size_t * free_bytes, size_t * total), "cuMemGetInfo_v2", NULL)            \
	X(cuMemsetD8Async, (CUdeviceptr p, unsigned char v, size_t n, CUstream s),                 \
	  "cuMemsetD8Async", NULL)                                                                 \
	X(cuMemcpyHtoDAsync, (CUdeviceptr dst, const void *src, size_t n, CUstream s),             \
	  "cuMemcpyHtoDAsync_v2", NULL)                                                            \
	X(cuMemcpyDtoHAsync, (void *dst, CUdeviceptr src, size_t n, CUstream s),                   \
	  "cuMemcpyDtoHAsync_v2", NULL)                                                            \
	X(cuMemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),             \
	  "cuMemcpyDtoDAsync_v2", NULL)                                                            \
	X(cuMemHostRegister, (void *p, size_t bytes, unsigned int flags), "cuMemHostRegister_v2",  \
	  NULL)                                                                                    \
	X(cuMemHostUnregister, (void *p), "cuMemHostUnregister", NULL)                             \
	X(cuStreamCreate, (CUstream * s, unsigned int flags), "cuStreamCreate", NULL)              \
	X(cuStreamDestroy, (CUstream s), "cuStreamDestroy_v2", NULL)                               \
	X(cuStreamSynchronize, (CUstream s), "cuStreamSynchronize", NULL)                          \
	X(cuStreamQuery, (CUstream s), "cuStreamQuery", NULL)                                      \
	X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags), "cuStreamWaitEvent",     \
	  NULL)                                                                                    \
	X(cuEventCreate, (CUevent * e, unsigned int flags), "cuEventCreate", NULL)                 \
	X(cuEventDestroy, (CUevent e), "cuEventDestroy_v2", NULL)                                  \
	X(cuEventRecord, (CUevent e, CUstream s), "cuEventRecord", NULL)                           \
	X(cuEventQuery, (CUevent e), "cuEventQuery", NULL)                                         \
	X(cuEventSynchronize, (CUevent e), "cuEventSynchronize", NULL)                             \
	X(cuEventElapsedTime, (float *ms, CUevent a, CUevent b), "cuEventElapsedTime_v2",          \
	  "cuEventElapsedTime")                                                                    \
	X(cuMemAddressReserve,                                                                     \
	  (CUdeviceptr * p, size_t size, size_t align, CUdeviceptr addr,                           \
	   unsigned long long flags),                                                              \
	  "cuMemAddressReserve", NULL)                                                             \
	X(cuMemAddressFree, (CUdeviceptr p, size_t size), "cuMemAddressFree", NULL)                \
	X(cuMemCreate,                                                                             \
	  (CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp *prop,         \
	   unsigned long long flags),                                                              \
	  "cuMemCreate", NULL)                                                                     \
	X(cuMemRelease, (CUmemGenericAllocationHandle h), "cuMemRelease", NULL)                    \
	X(cuMemMap,                                                                                \
	  (CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,                 \
	   unsigned long long flags),                                                              \
	  "cuMemMap", NULL)                                                                        \
	X(cuMemUnmap, (CUdeviceptr p, size_t size), "cuMemUnmap", NULL)                            \
	X(cuMemSetAccess, (CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n),        \
	  "cuMemSetAccess", NULL)                                                                  \
	X(cuMemGetAllocationGranularity,                                                           \
	  (size_t * g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags opt),     \
	  "cuMemGetAllocationGranularity", NULL)                                                   \
	X(cuMemHostGetDevicePointer, (CUdeviceptr * d, void *p, unsigned int flags),               \
	  "cuMemHostGetDevicePointer_v2", NULL)                                                    \
	X(cuMemAllocManaged, (CUdeviceptr * p, size_t bytes, unsigned int flags),                  \
	  "cuMemAllocManaged", NULL)                                                               \
	X(cuMemAdvise, (CUdeviceptr p, size_t bytes, int advice, CUmemLocation loc),               \
	  "cuMemAdvise_v2", NULL)                                                                  \
	X(cuMemPrefetchAsync,                                                                      \
	  (CUdeviceptr p, size_t bytes, CUmemLocation loc, unsigned int flags, CUstream s),        \
	  "cuMemPrefetchAsync_v2", NULL)                                                           \
	X(cuStreamBeginCapture, (CUstream s, int mode), "cuStreamBeginCapture_v2", NULL)           \
	X(cuStreamEndCapture, (CUstream s, CUgraph * g), "cuStreamEndCapture", NULL)               \
	X(cuGraphInstantiate, (CUgraphExec * e, CUgraph g, unsigned long long flags),              \
	  "cuGraphInstantiateWithFlags", NULL)                                                     \
	X(cuGraphLaunch, (CUgraphExec e, CUstream s), "cuGraphLaunch", NULL)                       \
	X(cuGraphExecDestroy, (CUgraphExec e), "cuGraphExecDestroy", NULL)                         \
	X(cuGraphDestroy, (CUgraph g), "cuGraphDestroy", NULL)

#define MOEM_CUDA_FIELD(name, args, sym, fallback) CUresult(*name) args;

struct moem_cuda_api {
	MOEM_CUDA_FUNCS(MOEM_CUDA_FIELD)
};

/*
 * Load libcuda.so.1 and resolve the table (once per process; later calls
 * return the same table). -ENODEV with a message ("libcuda.so.1 not
 * found: ...", "libcuda.so.1 lacks cuMemCreate") when it cannot.
 */
int moem_cuda_api_load(const struct moem_cuda_api **out);

/* "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)". */
const char *moem_cuda_strerror(CUresult r, char *buf, size_t len);

/*
 * True for errors after which the context is unusable and the process
 * must be restarted (illegal address, launch failure, hardware stack
 * error, illegal or misaligned instruction, ECC, assert, ...).
 */
int moem_cuda_is_sticky(CUresult r);

/*
 * Check one driver call made for be: 0 on CUDA_SUCCESS; otherwise record
 * "<what>: <name> (<string>)" as the thread's error message, mark be
 * fatal for a sticky error, and return -errno (-ENOMEM for out of memory,
 * -EAGAIN for not ready, -EIO for sticky errors, -EINVAL otherwise). be
 * may be NULL (no backend to mark yet).
 */
int moem_cuda_check(struct moem_backend *be, CUresult r, const char *what);

/*
 * The CUDA backend's driver table, device and primary context, for code
 * (the tiers) that calls the driver directly. -EINVAL for a non-CUDA
 * backend. Calls from a new host thread must first make ctx current
 * (cuCtxSetCurrent); the backend's own entry points do it themselves.
 */
int moem_cuda_backend_handles(struct moem_backend *be, const struct moem_cuda_api **api,
			      CUdevice *dev, CUcontext *ctx);

/*
 * The tier device (tierdev.h) of an open CUDA backend: the HBM arena on
 * VMM, a dedicated copy stream, compute marks on the backend's default
 * stream (runtime/compute/cuda/tierdev.c). -EINVAL for a backend that is
 * not CUDA.
 */
struct moem_tierdev;
int moem_tierdev_cuda_create(struct moem_backend *be, struct moem_tierdev **out);

#endif /* MOEM_CUDA_API_H */
