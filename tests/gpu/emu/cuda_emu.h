/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CUDA on the host, for checking the kernels' logic without a GPU: this
 * header is force-included (-include) when the .cu files are compiled as C++
 * with -DMOEM_KERNEL_EMU. Every thread of a block is a fiber (sched.cpp);
 * __syncthreads, __syncwarp and the warp collectives (shuffles, mma.sync)
 * are barriers between them. mma.sync follows the PTX ISA's fragment
 * layout for m16n8k16 exactly, so a kernel that feeds it the wrong
 * registers computes wrong numbers here too. Not modelled: timing, the
 * memory model (every op is sequentially consistent), tensor-core
 * rounding (fp32 adds in k order).
 *
 * Kernels find their way to the fake driver without a list: __global__
 * marks them (used) and __launch_bounds__ records the bound in a section
 * name, the build reads both off the preprocessed source
 * (tests/gpu/emu/kernels.sh) and registers each kernel (EMU_KERNEL below)
 * with its parameter types, so launches check the block size against the
 * bound. The vector types have CUDA's alignment and the kernels are built
 * with -fsanitize=alignment trapping: a misaligned vector (or scalar)
 * access stops the kernel as CUDA_ERROR_MISALIGNED_ADDRESS would.
 */
#ifndef MOEM_CUDA_EMU_H
#define MOEM_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <utility>

#include <moem/half.h>

#define EMU_STR(x)  #x
#define EMU_XSTR(x) EMU_STR(x)

#define __device__
#define __host__
#define __global__	       __attribute__((used))
#define __forceinline__	       inline
#define EMU_LB(n, ...)	       __attribute__((section(".text.emu_lb." EMU_XSTR(n))))
#define __launch_bounds__(...) EMU_LB(__VA_ARGS__, 0)
#define __shared__	       static
#define __align__(n)	       __attribute__((aligned(n)))

struct dim3 {
	unsigned int x, y, z;
};
/* CUDA's vector types and their alignment (vector_types.h). */
struct alignas(8) uint2 {
	unsigned int x, y;
};
struct alignas(16) uint4 {
	unsigned int x, y, z, w;
};
struct alignas(8) int2 {
	int x, y;
};
struct alignas(16) int4 {
	int x, y, z, w;
};
struct alignas(8) float2 {
	float x, y;
};
struct alignas(16) float4 {
	float x, y, z, w;
};
struct alignas(16) double2 {
	double x, y;
};

extern dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
#define threadIdx emu_threadIdx
#define blockIdx  emu_blockIdx
#define blockDim  emu_blockDim
#define gridDim	  emu_gridDim

/* sched.cpp */
void emu_syncthreads(void);
void emu_syncwarp(void);
uint8_t *emu_dyn_smem(void);
uint64_t *emu_warp_slots(void); /* 32 exchange slots of the calling warp */

struct emu_mma_frag {
	uint32_t a[4], b[2];
	float c[4];
};
struct emu_mma_frag *emu_warp_frags(void); /* 32 fragments of the calling warp */

/*
 * Barriers are compiler memory barriers too (shared arrays are function
 * statics here, which the optimiser could otherwise keep in registers
 * across an opaque call).
 */
#define EMU_FENCE() __asm__ __volatile__("" ::: "memory")
#define __syncthreads()            \
	do {                       \
		EMU_FENCE();       \
		emu_syncthreads(); \
		EMU_FENCE();       \
	} while (0)
#define __syncwarp(...)         \
	do {                    \
		EMU_FENCE();    \
		emu_syncwarp(); \
		EMU_FENCE();    \
	} while (0)
#define MOEM_DYN_SMEM(name) uint8_t *name = emu_dyn_smem()

template <class T> static inline T min(T a, T b)
{
	return a < b ? a : b;
}

template <class T> static inline T max(T a, T b)
{
	return a > b ? a : b;
}

template <class T> static inline T __ldg(const T *p)
{
	return *p;
}

static inline float __uint_as_float(uint32_t u)
{
	return moem_bits_f32(u);
}

static inline uint32_t __float_as_uint(float f)
{
	return moem_f32_bits(f);
}

struct __half {
	uint16_t x;
};
struct __nv_bfloat16 {
	uint16_t x;
};

static inline __half __ushort_as_half(uint16_t h)
{
	return __half{h};
}

static inline uint16_t __half_as_ushort(__half h)
{
	return h.x;
}

static inline float __half2float(__half h)
{
	return moem_f16_to_f32(h.x);
}

static inline __half __float2half_rn(float f)
{
	return __half{moem_f32_to_f16(f)};
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
	return __nv_bfloat16{moem_f32_to_bf16(f)};
}

static inline float __bfloat162float(__nv_bfloat16 b)
{
	return moem_bf16_to_f32(b.x);
}

static inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b)
{
	return b.x;
}

/* Compiled with -ffp-contract=off: each is exactly one IEEE operation. */
static inline float __fadd_rn(float a, float b)
{
	return a + b;
}
static inline float __fsub_rn(float a, float b)
{
	return a - b;
}
static inline float __fmul_rn(float a, float b)
{
	return a * b;
}
static inline float __fdiv_rn(float a, float b)
{
	return a / b;
}
static inline float __fsqrt_rn(float a)
{
	return sqrtf(a);
}
static inline double __dadd_rn(double a, double b)
{
	return a + b;
}
static inline double __dmul_rn(double a, double b)
{
	return a * b;
}
static inline double __ddiv_rn(double a, double b)
{
	return a / b;
}

/* Fibers never run concurrently: plain read-modify-write is atomic. */
template <class T> static inline T atomicAdd(T *p, T v)
{
	T old = *p;

	*p = old + v;
	return old;
}

static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v)
{
	unsigned long long old = *p;

	if (v < old)
		*p = v;
	return old;
}

template <class T> static inline T emu_exchange(T v, int src)
{
	uint64_t *slot = emu_warp_slots(), u = 0;
	int lane = threadIdx.x & 31;
	T r;

	memcpy(&u, &v, sizeof(T));
	slot[lane] = u;
	emu_syncwarp();
	memcpy(&r, &slot[src], sizeof(T));
	emu_syncwarp();
	return r;
}

template <class T> static inline T __shfl_xor_sync(unsigned int, T v, int off, int width = 32)
{
	(void)width;
	return emu_exchange(v, (int)(threadIdx.x & 31) ^ off);
}

template <class T>
static inline T __shfl_down_sync(unsigned int, T v, unsigned int off, int width = 32)
{
	int lane = threadIdx.x & 31;

	return emu_exchange(v, (lane % width) + (int)off < width ? lane + (int)off : lane);
}

template <class T> static inline T __shfl_sync(unsigned int, T v, int src, int width = 32)
{
	int lane = threadIdx.x & 31;

	return emu_exchange(v, (lane / width) * width + src % width);
}

/* The helpers common.cuh implements with inline PTX. */
static inline uint4 ld_stream(const uint4 *p)
{
	return *p;
}

static inline uint2 ld_stream(const uint2 *p)
{
	return *p;
}

static inline uint32_t bf16x2_minus128(uint32_t v)
{
	uint32_t lo = moem_f32_to_bf16(moem_bf16_to_f32(v & 0xffffu) - 128.0f);
	uint32_t hi = moem_f32_to_bf16(moem_bf16_to_f32(v >> 16) - 128.0f);

	return lo | hi << 16;
}

static inline uint32_t pack_bf16x2(float lo, float hi)
{
	return moem_f32_to_bf16(lo) | (uint32_t)moem_f32_to_bf16(hi) << 16;
}

/*
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with the PTX ISA
 * fragment layout (groupID = lane >> 2, threadID_in_group = lane % 4):
 *   A: a0,a1 (row g, k 2t..2t+1)  a2,a3 (row g+8, same k)
 *      a4,a5 (row g, k 2t+8..)    a6,a7 (row g+8, k 2t+8..)
 *   B: b0,b1 (k 2t..2t+1, col g)  b2,b3 (k 2t+8.., col g)
 *   C: c0,c1 (row g, col 2t..2t+1) c2,c3 (row g+8, same cols)
 */
static inline void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
			    uint32_t b0, uint32_t b1)
{
	struct emu_mma_frag *f = emu_warp_frags();
	int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	float out[4];

	f[lane] = emu_mma_frag{{a0, a1, a2, a3}, {b0, b1}, {c[0], c[1], c[2], c[3]}};
	emu_syncwarp();
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
		float acc = f[lane].c[i];

		for (int k = 0; k < 16; k++) {
			const struct emu_mma_frag *fa = &f[(row & 7) * 4 + ((k & 7) >> 1)];
			const struct emu_mma_frag *fb = &f[col * 4 + ((k & 7) >> 1)];
			uint32_t ar = fa->a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
			uint32_t br = fb->b[k >= 8 ? 1 : 0];
			float av = moem_bf16_to_f32((uint16_t)(ar >> (16 * (k & 1))));
			float bv = moem_bf16_to_f32((uint16_t)(br >> (16 * (k & 1))));

			acc += av * bv;
		}
		out[i] = acc;
	}
	emu_syncwarp();
	for (int i = 0; i < 4; i++)
		c[i] = out[i];
}

/*
 * Kernel registration: kernels.sh appends EMU_KERNEL(name, bound) for each
 * kernel to a copy of its .cu file; the fake driver finds them by name.
 */
struct emu_kernel {
	const char *name;
	void (*fn)(void);
	void (*invoke)(void (*fn)(void), void *const *args);
	unsigned int nargs, max_threads;
	size_t size[16], align[16];
};
void emu_register_kernel(const struct emu_kernel *k); /* driver.cpp */

template <class... A> struct emu_invoker {
	template <size_t... I>
	static void call(void (*f)(A...), void *const *args, std::index_sequence<I...>)
	{
		f(*static_cast<std::remove_cvref_t<A> *>(args[I])...);
	}
	static void invoke(void (*f)(void), void *const *args)
	{
		call(reinterpret_cast<void (*)(A...)>(f), args, std::index_sequence_for<A...>{});
	}
};

struct emu_reg {
	template <class... A> emu_reg(const char *name, void (*f)(A...), unsigned int bound)
	{
		static_assert(sizeof...(A) <= 16, "at most 16 kernel parameters");
		struct emu_kernel k = {name,
				       reinterpret_cast<void (*)(void)>(f),
				       &emu_invoker<A...>::invoke,
				       sizeof...(A),
				       bound ? bound : 1024,
				       {sizeof(std::remove_cvref_t<A>)...},
				       {alignof(std::remove_cvref_t<A>)...}};

		emu_register_kernel(&k);
	}
};

#define EMU_KERNEL(name, bound) static emu_reg emu_reg_##name(#name, &name, bound);

#endif /* MOEM_CUDA_EMU_H */
