// SPDX-License-Identifier: GPL-2.0-only
/*
 * Graphs on the backend (backend.h, "Graphs"; runtime/compute/cuda/graph.c):
 *  - a captured grouped FFN (host-planned: its descriptors would go
 *    through the ring) replays bitwise what plain launches give, for the
 *    input as it is at each replay, with plain FFN calls of another plan
 *    in between (the graph keeps its own descriptors);
 *  - a capture whose op would grow the stream's scratch fails, with a
 *    message, running nothing, and leaves the graph epoch alone; the
 *    plain call that then grows it changes the epoch;
 *  - the CPU backend has no graphs and says so.
 */
#include <errno.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/quant.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "gpu_main.h"

#define H 128
#define I 64
#define B 4

FIXTURE(gr)
{
	struct moem_backend *be;
	struct tb_expert ex[2];
	moem_dptr blob[2], x, out;
	struct moem_ffn_expert fe[2];
	struct moem_ffn_assign as[2 * B];
	uint32_t na;
};

FIXTURE_SETUP(gr)
{
	const char *name = getenv("MOEM_GPU_TEST_BACKEND");
	uint16_t *x = tb_rand_bf16(5, (size_t)B * H, 1.0);

	memset(self, 0, sizeof(*self));
	if (name && strcmp(name, "cuda"))
		SKIP(return, "graphs need the CUDA backend (MOEM_GPU_TEST_BACKEND=%s)", name);
	ASSERT_EQ(0, moem_backend_open("cuda", NULL, &self->be));
	ASSERT_TRUE(moem_be_has_graphs(self->be));
	for (int e = 0; e < 2; e++) {
		ASSERT_EQ(0, tb_expert_make(&self->ex[e], MOEM_PREC_BF16, H, I, 20 + e));
		self->blob[e] = tb_put(self->be, self->ex[e].blob, self->ex[e].l.bytes);
		ASSERT_NE(0, self->blob[e]);
	}
	/* expert 0: every token in slot 0; expert 1: tokens 1 and 3 in slot 1 */
	self->fe[0] = (struct moem_ffn_expert){self->blob[0], MOEM_PREC_BF16, 0, B};
	for (uint32_t t = 0; t < B; t++)
		self->as[self->na++] = (struct moem_ffn_assign){(uint16_t)t, 0};
	self->fe[1] = (struct moem_ffn_expert){self->blob[1], MOEM_PREC_BF16, self->na, 2};
	self->as[self->na++] = (struct moem_ffn_assign){1, 1};
	self->as[self->na++] = (struct moem_ffn_assign){3, 1};
	self->x = tb_put(self->be, x, 2 * (size_t)B * H);
	self->out = tb_zeros(self->be, 4 * (size_t)B * 2 * H);
	ASSERT_TRUE(self->x && self->out);
	free(x);
}

FIXTURE_TEARDOWN(gr)
{
	if (!self->be)
		return;
	moem_be_sync(self->be);
	for (int e = 0; e < 2; e++) {
		moem_be_free(self->be, self->blob[e]);
		tb_expert_free(&self->ex[e]);
	}
	moem_be_free(self->be, self->x);
	moem_be_free(self->be, self->out);
	moem_backend_close(self->be);
}

static int ffn(FIXTURE_DATA(gr) * self, uint32_t n_experts)
{
	struct moem_ffn_args a = {B,	     H,	       I,
				  2,	     self->x,  self->out,
				  n_experts, self->fe, n_experts == 2 ? self->na : B,
				  self->as};

	return moem_op_ffn(self->be, NULL, &a);
}

/* The output after a plain call or a graph launch. */
static int result(FIXTURE_DATA(gr) * self, float *y)
{
	return tb_get(self->be, y, self->out, 4 * (size_t)B * 2 * H);
}

TEST_F(gr, captured_ffn_replays_its_own_descriptors)
{
	const size_t n = (size_t)B * 2 * H;
	float *ref = malloc(4 * n), *y = malloc(4 * n);
	uint16_t *x2 = tb_rand_bf16(6, (size_t)B * H, 1.0);
	struct moem_graph *g = NULL;

	if (!self->be) /* the setup skipped: the harness runs the body anyway */
		SKIP(goto out, "no CUDA backend");
	ASSERT_EQ(0, ffn(self, 2)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, result(self, ref));
	ASSERT_EQ(0, moem_be_memset(self->be, self->out, 0, 4 * n, NULL));
	ASSERT_EQ(0, moem_be_capture_begin(self->be, NULL));
	ASSERT_EQ(0, ffn(self, 2)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_be_capture_end(self->be, NULL, &g)) TH_LOG("%s", moem_last_error());
	ASSERT_NE(NULL, g);
	/* captured, not run */
	ASSERT_EQ(0, result(self, y));
	EXPECT_EQ(0.0f, y[0]);
	ASSERT_EQ(0, moem_be_graph_launch(self->be, g, NULL));
	ASSERT_EQ(0, result(self, y));
	EXPECT_EQ(0, memcmp(ref, y, 4 * n));
	/* a plain call of another plan (expert 0 alone) between replays, and a
	 * new input: the replay reads the input as it is now */
	ASSERT_EQ(0, ffn(self, 1));
	ASSERT_EQ(0, moem_be_htod(self->be, self->x, x2, 2 * (size_t)B * H, NULL));
	ASSERT_EQ(0, ffn(self, 2));
	ASSERT_EQ(0, result(self, ref));
	ASSERT_EQ(0, ffn(self, 1));
	ASSERT_EQ(0, moem_be_memset(self->be, self->out, 0, 4 * n, NULL));
	ASSERT_EQ(0, moem_be_graph_launch(self->be, g, NULL));
	ASSERT_EQ(0, result(self, y));
	EXPECT_EQ(0, memcmp(ref, y, 4 * n));
	moem_be_graph_destroy(self->be, g);
out:
	free(ref);
	free(y);
	free(x2);
}

TEST_F(gr, scratch_growth_inside_a_capture_fails_it)
{
	const size_t n = (size_t)B * 2 * H;
	struct moem_graph *g = (struct moem_graph *)1;
	uint64_t ep = self->be ? moem_be_graph_epoch(self->be) : 0;
	float *y = malloc(4 * n);

	if (!self->be) /* the setup skipped: the harness runs the body anyway */
		SKIP(goto out, "no CUDA backend");
	/* the stream's first FFN: its scratch must grow, which a capture cannot */
	ASSERT_EQ(0, moem_be_memset(self->be, self->out, 0, 4 * n, NULL));
	ASSERT_EQ(0, moem_be_capture_begin(self->be, NULL));
	EXPECT_NE(0, ffn(self, 2));
	EXPECT_NE(0, moem_be_capture_end(self->be, NULL, &g));
	EXPECT_NE(NULL, strstr(moem_last_error(), "capture")) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(NULL, g);
	EXPECT_EQ(ep, moem_be_graph_epoch(self->be));
	ASSERT_EQ(0, result(self, y));
	EXPECT_EQ(0.0f, y[0]); /* nothing ran */
	/* plainly it grows, and graphs captured before are stale */
	ASSERT_EQ(0, ffn(self, 2));
	EXPECT_NE(ep, moem_be_graph_epoch(self->be));
out:
	free(y);
}

TEST(cpu_backend_has_no_graphs)
{
	struct moem_backend *be;

	ASSERT_EQ(0, moem_backend_open("cpu", NULL, &be));
	EXPECT_FALSE(moem_be_has_graphs(be));
	EXPECT_EQ(-EOPNOTSUPP, moem_be_capture_begin(be, NULL));
	EXPECT_NE(NULL, strstr(moem_last_error(), "no graphs"));
	moem_backend_close(be);
}

GPU_TEST_MAIN
