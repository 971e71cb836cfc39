// SPDX-License-Identifier: GPL-2.0-only
/*
 * The embedded modules and the kernel table: every kernel is looked up by
 * its stable extern "C" name; a missing one fails the open, so a build
 * whose fatbins do not match this table cannot run half-loaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "cuda_int.h"

static const char *const fixed_names[K_ROUTER] = {
	[K_RMSNORM] = "moem_rmsnorm",	   [K_ROUTE] = "moem_route",
	[K_COMBINE] = "moem_combine",	   [K_HIST] = "moem_histogram",
	[K_QUANT_Q8] = "moem_quantize_q8", [K_QUANT_Q4] = "moem_quantize_q4",
	[K_QUANT_Q2] = "moem_quantize_q2", [K_FFN_PLAN] = "moem_ffn_plan",
};

static const char *const prec_names[4] = {"bf16", "q8", "q4", "q2"};

static const char *const decode_names[K_NR - K_DECODE] = {
	[K_EMBED - K_DECODE] = "moem_embed",
	[K_MATMUL - K_DECODE] = "moem_matmul",
	[K_MATMUL_Q8 - K_DECODE] = "moem_matmul_q8",
	[K_MATMUL_Q4 - K_DECODE] = "moem_matmul_q4",
	[K_MATMUL_Q2 - K_DECODE] = "moem_matmul_q2",
	[K_ROWNORM - K_DECODE] = "moem_rownorm",
	[K_CONVERT - K_DECODE] = "moem_convert",
	[K_CONVERT_SEQ - K_DECODE] = "moem_convert_seq",
	[K_ROPE - K_DECODE] = "moem_rope",
	[K_HEAD_MM - K_DECODE] = "moem_head_matmul",
	[K_KV_STORE - K_DECODE] = "moem_kv_store",
	[K_ATTN_PART - K_DECODE] = "moem_attn_part",
	[K_ATTN_MERGE - K_DECODE] = "moem_attn_merge",
};

const char *moem_cuda_kernel_name(enum cuda_kernel k, char *buf, size_t len)
{
	static const int nt[4] = {1, 2, 4, 8};

	if (k < K_ROUTER)
		snprintf(buf, len, "%s", fixed_names[k]);
	else if (k < K_FFN_GATEUP)
		snprintf(buf, len, "moem_router_n%d", nt[k - K_ROUTER]);
	else if (k >= K_DECODE)
		snprintf(buf, len, "%s", decode_names[k - K_DECODE]);
	else if (k >= K_FFN_VAR)
		snprintf(buf, len, "moem_ffn_%s_%s_n%d_r%u",
			 (k - K_FFN_VAR) / 16 ? "down" : "gateup",
			 prec_names[(k - K_FFN_VAR) % 16 / 4], nt[(k - K_FFN_VAR) % 4 / 2],
			 moem_k_ffn_var_rt((k - K_FFN_VAR) % 4 / 2, (k - K_FFN_VAR) % 2));
	else if (k < K_FFN_DOWN)
		snprintf(buf, len, "moem_ffn_gateup_%s_n%d", prec_names[(k - K_FFN_GATEUP) / 4],
			 nt[(k - K_FFN_GATEUP) % 4]);
	else
		snprintf(buf, len, "moem_ffn_down_%s_n%d", prec_names[(k - K_FFN_DOWN) / 4],
			 nt[(k - K_FFN_DOWN) % 4]);
	return buf;
}

void moem_cuda_kernels_unload(struct cuda_backend *cb)
{
	for (uint32_t i = 0; i < cb->n_mods; i++)
		ck_unwind(cb, cb->api->cuModuleUnload(cb->mods[i]), "cuModuleUnload");
	free(cb->mods);
	cb->mods = NULL;
	cb->n_mods = 0;
	memset(cb->fn, 0, sizeof(cb->fn));
}

/* cb->fn[k] for every kernel of mod whose name is names[k]. */
static int module_kernels(struct cuda_backend *cb, CUmodule mod, const char (*names)[64])
{
	const struct moem_cuda_api *api = cb->api;
	unsigned int nf = 0;
	CUfunction *fns;
	int ret;

	ret = ck(cb, api->cuModuleGetFunctionCount(&nf, mod), "cuModuleGetFunctionCount");
	if (ret)
		return ret;
	fns = calloc(nf ? nf : 1, sizeof(*fns));
	if (!fns)
		return -ENOMEM;
	ret = ck(cb, api->cuModuleEnumerateFunctions(fns, nf, mod), "cuModuleEnumerateFunctions");
	for (unsigned int f = 0; f < nf && !ret; f++) {
		const char *fname = NULL;

		ret = ck(cb, api->cuFuncGetName(&fname, fns[f]), "cuFuncGetName");
		for (int k = 0; k < K_NR && !ret && fname; k++)
			if (!strcmp(fname, names[k]))
				cb->fn[k] = fns[f];
	}
	free(fns);
	return ret;
}

int moem_cuda_kernels_load(struct cuda_backend *cb)
{
	const struct moem_cuda_api *api = cb->api;
	char what[128], names[K_NR][64];
	uint32_t n = 0;
	int ret;

	while (moem_cuda_fatbins[n].name)
		n++;
	cb->mods = calloc(n ? n : 1, sizeof(*cb->mods));
	if (!cb->mods)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "cuModuleLoadData(%s)", moem_cuda_fatbins[i].name);
		ret = ck(cb, api->cuModuleLoadData(&cb->mods[i], moem_cuda_fatbins[i].start), what);
		if (ret)
			goto err;
		cb->n_mods++;
	}
	/*
	 * Each module lists its own kernels (cuModuleEnumerateFunctions):
	 * asking every module for every name would make the driver record a
	 * CUDA_ERROR_NOT_FOUND per miss, hundreds per open, each an error to
	 * compute-sanitizer.
	 */
	for (int k = 0; k < K_NR; k++)
		moem_cuda_kernel_name(k, names[k], sizeof(names[k]));
	for (uint32_t i = 0; i < cb->n_mods; i++) {
		ret = module_kernels(cb, cb->mods[i], names);
		if (ret)
			goto err;
	}
	for (int k = 0; k < K_NR; k++) {
		if (!cb->fn[k]) {
			ret = moem_errf(ENOENT,
					"cuda backend: kernel %s not found in the embedded "
					"fatbins (stale build?)",
					names[k]);
			goto err;
		}
	}
	return 0;

err:
	moem_cuda_kernels_unload(cb);
	return ret;
}

int moem_cuda_launch(struct cuda_backend *cb, enum cuda_kernel k, uint32_t gx, uint32_t gy,
		     uint32_t block, uint32_t smem, struct cuda_stream *cs, void *params)
{
	void *args[1] = {params};
	CUresult r;
	char name[64];

	r = cb->api->cuLaunchKernel(cb->fn[k], gx, gy, 1, block, 1, 1, smem, cs->s, args, NULL);
	if (moem_likely(r == CUDA_SUCCESS))
		return 0;
	moem_cuda_kernel_name(k, name, sizeof(name));
	return ck(cb, r, name);
}
