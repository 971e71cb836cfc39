// SPDX-License-Identifier: GPL-2.0-only
/*
 * Backend selection, memory, streams and events on the CPU backend, and
 * every op refusing bad arguments with a message and without touching
 * its outputs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>

#include "kselftest_harness.h"
#include "test_backend_util.h"

TEST(selection)
{
	struct moem_backend_opts o = {.threads = 300};
	struct moem_backend_info info;
	struct moem_backend *be;
	int ret;

	EXPECT_EQ(-EINVAL, moem_backend_open("tpu", NULL, &be));
	EXPECT_NE(NULL, strstr(moem_last_error(), "unknown backend 'tpu'"));
	EXPECT_EQ(-EINVAL, moem_backend_open("cpu", &o, &be));
	o.threads = 0;
	o.device = -1;
	EXPECT_EQ(-EINVAL, moem_backend_open("auto", &o, &be));

	ASSERT_EQ(0, moem_backend_open("cpu", NULL, &be));
	EXPECT_STREQ("cpu", moem_backend_name(be));
	EXPECT_STREQ("", moem_backend_note(be));
	moem_backend_get_info(be, &info);
	EXPECT_GE(info.threads, 1u);
	EXPECT_FALSE(moem_backend_fatal(be));
	moem_backend_close(be);

	/* auto: CUDA when there is a device and kernels, else CPU and why. */
	ASSERT_EQ(0, moem_backend_open("auto", NULL, &be));
	if (moem_backend_kind(be) == MOEM_BACKEND_CPU) {
		TH_LOG("auto: %s", moem_backend_note(be));
		EXPECT_NE(NULL, strstr(moem_backend_note(be), ": using the CPU backend"));
		moem_backend_close(be);
		ret = moem_backend_open("cuda", NULL, &be);
		EXPECT_EQ(-ENODEV, ret);
		EXPECT_TRUE(strstr(moem_last_error(), "no CUDA device") ||
			    strstr(moem_last_error(), "built without CUDA kernels"));
	} else {
		moem_backend_close(be);
	}
}

TEST(memory_streams_events)
{
	struct moem_backend *be;
	struct moem_stream *s;
	struct moem_event *a, *b, *never;
	char in[1000], out[1000];
	moem_dptr d1, d2;
	uint64_t fr, tot;
	float ms;

	for (int i = 0; i < 1000; i++)
		in[i] = (char)(i * 7);
	ASSERT_EQ(0, moem_backend_open("cpu", NULL, &be));
	EXPECT_EQ(-EINVAL, moem_be_alloc(be, 0, &d1));
	ASSERT_EQ(0, moem_be_alloc(be, 1000, &d1));
	ASSERT_EQ(0, moem_be_alloc(be, 1000, &d2));
	EXPECT_EQ(0u, d1 % MOEM_BE_ALIGN);
	ASSERT_EQ(0, moem_be_stream_create(be, &s));
	ASSERT_EQ(0, moem_be_event_create(be, &a));
	ASSERT_EQ(0, moem_be_event_create(be, &b));
	ASSERT_EQ(0, moem_be_event_create(be, &never));
	ASSERT_EQ(0, moem_be_host_register(be, in, sizeof(in)));
	ASSERT_EQ(0, moem_be_event_record(be, a, s));
	ASSERT_EQ(0, moem_be_htod(be, d1, in, 1000, s));
	ASSERT_EQ(0, moem_be_dtod(be, d2, d1, 1000, s));
	ASSERT_EQ(0, moem_be_memset(be, d2 + 10, 0x5a, 20, s));
	ASSERT_EQ(0, moem_be_dtoh(be, out, d2, 1000, s));
	ASSERT_EQ(0, moem_be_event_record(be, b, s));
	ASSERT_EQ(0, moem_be_stream_wait(be, NULL, b));
	ASSERT_EQ(0, moem_be_stream_sync(be, s));
	ASSERT_EQ(0, moem_be_event_query(be, b));
	ASSERT_EQ(0, moem_be_event_sync(be, b));
	ASSERT_EQ(0, moem_be_event_elapsed(be, a, b, &ms));
	EXPECT_GE(ms, 0.0f);
	EXPECT_EQ(-EINVAL, moem_be_event_elapsed(be, a, never, &ms));
	EXPECT_EQ(0, memcmp(in, out, 10));
	for (int i = 10; i < 30; i++)
		EXPECT_EQ(0x5a, out[i]);
	EXPECT_EQ(0, memcmp(in + 30, out + 30, 970));
	/* the CPU backend's device memory is written in place through its host address */
	ASSERT_NE(NULL, moem_be_host_ptr(be, d1));
	memset(moem_be_host_ptr(be, d1), 0x33, 1000);
	ASSERT_EQ(0, moem_be_dtoh(be, out, d1, 1000, NULL));
	for (int i = 0; i < 1000; i++)
		ASSERT_EQ(0x33, out[i]);
	EXPECT_EQ(-EINVAL, moem_be_memset(be, d1, 256, 1, NULL));
	EXPECT_EQ(-EINVAL, moem_be_htod(be, 0, in, 1, NULL));
	EXPECT_EQ(0, moem_be_htod(be, 0, in, 0, NULL)); /* nothing to do */
	ASSERT_EQ(0, moem_be_mem_info(be, &fr, &tot));
	EXPECT_GT(tot, 0u);
	ASSERT_EQ(0, moem_be_host_unregister(be, in));
	ASSERT_EQ(0, moem_be_sync(be));
	moem_be_event_destroy(be, a);
	moem_be_event_destroy(be, b);
	moem_be_event_destroy(be, never);
	moem_be_stream_destroy(be, s);
	moem_be_free(be, d1);
	moem_be_free(be, d2);
	moem_be_free(be, 0);
	moem_backend_close(be);
}

#define EXPECT_REFUSED(call, text)                               \
	do {                                                     \
		moem_clear_error();                              \
		EXPECT_EQ(-EINVAL, (call));                      \
		EXPECT_NE(NULL, strstr(moem_last_error(), text)) \
		TH_LOG("message: %s", moem_last_error());        \
	} while (0)

TEST(ops_refuse_bad_arguments)
{
	struct moem_backend *be;
	struct tb_expert ex;
	moem_dptr buf, blob;
	uint8_t zero[4096] = {0}, after[4096];

	ASSERT_EQ(0, moem_backend_open("cpu", NULL, &be));
	ASSERT_EQ(0, tb_expert_make(&ex, MOEM_PREC_Q4, 256, 128, 1));
	buf = tb_zeros(be, 1 << 20);
	blob = tb_put(be, ex.blob, ex.l.bytes);

	{
		struct moem_rmsnorm_args a = {0, 64, 1e-6f, buf, buf, buf};

		EXPECT_REFUSED(moem_op_rmsnorm(be, NULL, &a), "rmsnorm: B = 0");
		a.B = 1;
		a.eps = -1;
		EXPECT_REFUSED(moem_op_rmsnorm(be, NULL, &a), "eps");
		a.eps = 0;
		a.weight = 0;
		EXPECT_REFUSED(moem_op_rmsnorm(be, NULL, &a), "weight is a null");
	}
	{
		struct moem_router_args a = {4, 100, 8, buf, buf, buf};

		EXPECT_REFUSED(moem_op_router(be, NULL, &a), "not a multiple of 32");
		a.H = 128;
		a.N = 2000;
		EXPECT_REFUSED(moem_op_router(be, NULL, &a), "N = 2000");
	}
	{
		struct moem_route_args a = {.mode = MOEM_ROUTE_OEA,
					    .cfg = {16, 4, true, 1.0f},
					    .B = 4,
					    .logits = buf,
					    .ids = buf,
					    .w = buf,
					    .cnt = buf,
					    .k0 = 5};

		EXPECT_REFUSED(moem_op_route(be, NULL, &a), "k0 = 5");
		a.k0 = 0;
		a.mode = MOEM_ROUTE_PIGGYBACK;
		EXPECT_REFUSED(moem_op_route(be, NULL, &a), "resident is a null");
		a.mode = MOEM_ROUTE_LYNX;
		a.lynx.alpha = -1;
		a.lynx.beta = 4;
		EXPECT_REFUSED(moem_op_route(be, NULL, &a), "lynx alpha");
		a.mode = (enum moem_route_mode)9;
		EXPECT_REFUSED(moem_op_route(be, NULL, &a), "unknown mode");
		a.mode = MOEM_ROUTE_TOPK;
		a.cfg.top_k = 17;
		EXPECT_REFUSED(moem_op_route(be, NULL, &a), "top_k = 17");
	}
	{
		struct moem_ffn_expert e[2] = {{blob, MOEM_PREC_Q4, 0, 2},
					       {blob, MOEM_PREC_Q4, 2, 1}};
		struct moem_ffn_assign as[3] = {{0, 0}, {1, 0}, {1, 0}};
		struct moem_ffn_args a = {2, 256, 128, 2, buf, buf + 65536, 2, e, 3, as};

		ASSERT_EQ(0, moem_be_memset(be, buf + 65536, 0, 4096, NULL));
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "token 1 slot 0 is written twice");
		as[2].slot = 2;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "outside 2x2");
		as[2].slot = 1;
		as[2].token = 5;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "token 5 slot 1 outside");
		as[2].token = 1;
		e[1].blob = blob + 16;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "256-byte aligned");
		e[1].blob = blob;
		e[1].n = 2;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "beyond 3");
		e[1].n = 0;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "0 tokens");
		e[1].n = 1;
		e[1].prec = (enum moem_prec)7;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "bad precision");
		e[1].prec = MOEM_PREC_Q4;
		a.I = 96; /* q4 needs multiples of 128 */
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "multiple of 128");
		a.I = 128;
		a.B = 65;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "B = 65");
		a.B = 2;
		a.n_slots = 0;
		EXPECT_REFUSED(moem_op_ffn(be, NULL, &a), "n_slots = 0");
		/* nothing was written by any refused call */
		ASSERT_EQ(0, tb_get(be, after, buf + 65536, 4096));
		EXPECT_EQ(0, memcmp(zero, after, 4096));
		a.n_slots = 2;
		EXPECT_EQ(0, moem_op_ffn(be, NULL, &a)) TH_LOG("%s", moem_last_error());
	}
	{
		struct moem_combine_args a = {2, 64, buf, 2, 0, buf, buf, 0, 0};

		EXPECT_REFUSED(moem_op_combine(be, NULL, &a), "routed is a null");
		a.routed = buf;
		a.n_shared = 1;
		EXPECT_REFUSED(moem_op_combine(be, NULL, &a), "shared is a null");
	}
	{
		struct moem_quantize_args a = {MOEM_PREC_Q4, 4, 100, buf, buf, 1 << 16, buf, 0};

		EXPECT_REFUSED(moem_op_quantize(be, NULL, &a), "multiple of 128");
		a.cols = 128;
		a.dst = buf + 8;
		EXPECT_REFUSED(moem_op_quantize(be, NULL, &a), "16-byte aligned");
		a.dst = buf;
		a.dst_len = 10;
		moem_clear_error();
		EXPECT_EQ(-ENOSPC, moem_op_quantize(be, NULL, &a));
		EXPECT_EQ(-ERANGE, moem_quantize_status_error(0x300000011ull));
		EXPECT_NE(NULL, strstr(moem_last_error(), "row 3 group 1: non-finite"));
	}
	{
		struct moem_hist_args a = {2, 2, 8, 3, 3, buf, buf, buf};

		EXPECT_REFUSED(moem_op_histogram(be, NULL, &a), "layer 3 of 3");
	}
	moem_be_free(be, buf);
	moem_be_free(be, blob);
	tb_expert_free(&ex);
	moem_backend_close(be);
}

TEST_HARNESS_MAIN
