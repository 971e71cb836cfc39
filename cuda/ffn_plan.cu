// SPDX-License-Identifier: GPL-2.0-only
/*
 * The grouped FFN's plan on the device (kparams.h, moem_kffn_plan_params):
 * the host plans from router ids it has to copy back and wait for; this
 * kernel plans from the ids where they are, so a MoE layer needs no host
 * round trip. The launches that follow are sized for the most experts a
 * layer can route, per bucket; each expert runs in the kernel variant the
 * host plan would pick, so both plans give the same bits. One thread does
 * the work: a decode layer has at most
 * B * k = 4096 routed pairs and N <= 1024 experts, a few microseconds
 * against the FFN it feeds, and a serial pass gives the host plan's
 * order exactly (the FFN results do not depend on it, but a reader can
 * compare the two).
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(MOEM_K_PLAN_THREADS)
	moem_ffn_plan(const moem_kffn_plan_params p)
{
	const int32_t *ids = reinterpret_cast<const int32_t *>(p.ids);
	const uint32_t *cnt = reinterpret_cast<const uint32_t *>(p.cnt);
	const moem_kres_entry *tab = reinterpret_cast<const moem_kres_entry *>(p.table);
	moem_kffn_desc *desc = reinterpret_cast<moem_kffn_desc *>(p.desc);
	uint32_t *assign = reinterpret_cast<uint32_t *>(p.assign);
	uint32_t *work = reinterpret_cast<uint32_t *>(p.work);
	uint32_t *status = reinterpret_cast<uint32_t *>(p.status);
	uint32_t fill[16] = {}, off = 0;

	if (threadIdx.x)
		return;
	for (uint32_t e = 0; e < p.N; e++)
		work[e] = 0;
	for (uint32_t t = 0; t < p.B; t++)
		for (uint32_t j = 0; j < cnt[t] && j < p.k; j++) {
			const int32_t x = ids[(size_t)t * p.k + j];

			if (x >= 0 && (uint32_t)x < p.N)
				work[x]++;
		}
	for (uint32_t e = 0; e < p.N; e++) {
		const uint32_t n = work[e];
		const moem_kres_entry r = tab[e];

		if (!n)
			continue;
		/* n-tile class as the host's: 8, 16, 32, 64 tokens */
		const uint32_t c = n <= 8 ? 0 : n <= 16 ? 1 : n <= 32 ? 2 : 3, b = r.prec * 4 + c;

		work[e] = off;
		if (r.blob && r.prec <= 3 && c < p.n_class && (p.prec_mask >> r.prec & 1) &&
		    fill[b] < p.D)
			desc[b * p.D + fill[b]++] = moem_kffn_desc{ r.blob, off, n, off, 0 };
		else if (!*status)
			*status = 1 + e;
		off += n; /* its pairs keep their place either way */
	}
	for (uint32_t t = 0; t < p.B; t++)
		for (uint32_t j = 0; j < cnt[t] && j < p.k; j++) {
			const int32_t x = ids[(size_t)t * p.k + j];

			if (x >= 0 && (uint32_t)x < p.N)
				assign[work[x]++] = t | j << 16;
		}
	for (uint32_t b = 0; b < 16; b++)
		if ((p.prec_mask >> (b / 4) & 1) && b % 4 < p.n_class)
			for (uint32_t i = fill[b]; i < p.D; i++)
				desc[b * p.D + i] = moem_kffn_desc{ 0, 0, 0, 0, 0 };
}
