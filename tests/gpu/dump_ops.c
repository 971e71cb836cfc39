// SPDX-License-Identifier: GPL-2.0-only
/*
 * Run the router GEMM, top-k routing and a bf16 expert FFN on a backend
 * (default cuda) at Qwen3-30B-A3B shapes and write inputs and outputs as
 * raw little-endian files into DIR, for tests/gpu/torch_check.py to
 * recompute with PyTorch:
 *   meta.txt                 B H N K I E
 *   x.bf16 [B][H]  gate.bf16 [N][H]  logits.f32 [B][N]
 *   ids.i32 [B][K] w.f32 [B][K]
 *   eE_gate.bf16 [I][H] eE_up.bf16 [I][H] eE_down.bf16 [H][I]  (E experts)
 *   ffn.f32 [B][E][H]        token t through expert e, unscaled
 * Exit 0, 4 (no CUDA device: skip) or 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>

#include "../unit/test_backend_util.h"

#define NB 16
#define NH 2048
#define NN 128
#define NK 8
#define NI 768
#define NE 4

static int write_file(const char *dir, const char *name, const void *p, size_t bytes)
{
	char path[4096];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f)
		return -errno;
	ok = fwrite(p, 1, bytes, f) == bytes;
	return fclose(f) == 0 && ok ? 0 : -EIO;
}

int main(int argc, char **argv)
{
	const char *name = getenv("MOEM_GPU_TEST_BACKEND");
	struct moem_backend *be;
	struct tb_expert ex[NE];
	struct moem_ffn_expert fe[NE];
	struct moem_ffn_assign as[NB * NE];
	uint16_t *x = tb_rand_bf16(1, (size_t)NB * NH, 1.0),
		 *g = tb_rand_bf16(2, (size_t)NN * NH, 0.02);
	float *z = malloc(4 * NB * NN), *w = malloc(4 * NB * NK),
	      *y = malloc(4 * (size_t)NB * NE * NH);
	int32_t *ids = malloc(4 * NB * NK);
	moem_dptr dx, dg, dz, di, dw, dc, dy, blobs[NE];
	char fname[64], meta[128];
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: dump_ops DIR\n");
		return 2;
	}
	/* the CPU backend, when asked for, as the reference: its scalar kernels */
	ret = moem_backend_open(name ? name : "cuda",
				&(struct moem_backend_opts){.isa = MOEM_CPU_ISA_SCALAR}, &be);
	if (ret == -ENODEV) {
		printf("SKIP %s\n", moem_last_error());
		return 4;
	}
	if (ret) {
		fprintf(stderr, "dump_ops: %s\n", moem_strerror(ret));
		return 1;
	}
	dx = tb_put(be, x, 2 * (size_t)NB * NH);
	dg = tb_put(be, g, 2 * (size_t)NN * NH);
	dz = tb_zeros(be, 4 * NB * NN);
	di = tb_zeros(be, 4 * NB * NK);
	dw = tb_zeros(be, 4 * NB * NK);
	dc = tb_zeros(be, 4 * NB);
	dy = tb_zeros(be, 4 * (size_t)NB * NE * NH);
	for (int e = 0; e < NE; e++) {
		tb_expert_make(&ex[e], MOEM_PREC_BF16, NH, NI, 10 + e);
		blobs[e] = tb_put(be, ex[e].blob, ex[e].l.bytes);
		fe[e] = (struct moem_ffn_expert){blobs[e], MOEM_PREC_BF16, (uint32_t)e * NB, NB};
		for (int t = 0; t < NB; t++)
			as[e * NB + t] = (struct moem_ffn_assign){(uint16_t)t, (uint16_t)e};
	}
	{
		struct moem_router_args ra = {NB, NH, NN, dx, dg, dz};
		struct moem_route_args ro = {.mode = MOEM_ROUTE_TOPK,
					     .cfg = {NN, NK, true, 1.0f},
					     .B = NB,
					     .logits = dz,
					     .ids = di,
					     .w = dw,
					     .cnt = dc};
		struct moem_ffn_args fa = {NB, NH, NI, NE, dx, dy, NE, fe, NB * NE, as};

		if ((ret = moem_op_router(be, NULL, &ra)) || (ret = moem_op_route(be, NULL, &ro)) ||
		    (ret = moem_op_ffn(be, NULL, &fa)) || (ret = tb_get(be, z, dz, 4 * NB * NN)) ||
		    (ret = tb_get(be, ids, di, 4 * NB * NK)) ||
		    (ret = tb_get(be, w, dw, 4 * NB * NK)) ||
		    (ret = tb_get(be, y, dy, 4 * (size_t)NB * NE * NH))) {
			fprintf(stderr, "dump_ops: %s\n", moem_strerror(ret));
			return 1;
		}
	}
	snprintf(meta, sizeof(meta), "%d %d %d %d %d %d\n", NB, NH, NN, NK, NI, NE);
	ret = write_file(argv[1], "meta.txt", meta, strlen(meta));
	ret = ret ? ret : write_file(argv[1], "x.bf16", x, 2 * (size_t)NB * NH);
	ret = ret ? ret : write_file(argv[1], "gate.bf16", g, 2 * (size_t)NN * NH);
	ret = ret ? ret : write_file(argv[1], "logits.f32", z, 4 * NB * NN);
	ret = ret ? ret : write_file(argv[1], "ids.i32", ids, 4 * NB * NK);
	ret = ret ? ret : write_file(argv[1], "w.f32", w, 4 * NB * NK);
	ret = ret ? ret : write_file(argv[1], "ffn.f32", y, 4 * (size_t)NB * NE * NH);
	for (int e = 0; !ret && e < NE; e++) {
		static const char *mat[3] = {"gate", "up", "down"};

		for (int m = 0; !ret && m < 3; m++) {
			snprintf(fname, sizeof(fname), "e%d_%s.bf16", e, mat[m]);
			ret = write_file(argv[1], fname, ex[e].w[m], 2 * (size_t)NH * NI);
		}
	}
	if (ret) {
		fprintf(stderr, "dump_ops: writing %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	printf("dump_ops: %s backend (%s): wrote %s\n", moem_backend_name(be),
	       moem_backend_note(be)[0] ? moem_backend_note(be) : "asked for", argv[1]);
	for (int e = 0; e < NE; e++) {
		moem_be_free(be, blobs[e]);
		tb_expert_free(&ex[e]);
	}
	moem_backend_close(be);
	return 0;
}
