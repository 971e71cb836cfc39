// SPDX-License-Identifier: GPL-2.0-only
/*
 * Routing traces: write/read round trip (bit for bit), generator
 * determinism, the writer's rules, and rejection of corrupt, truncated and
 * future-version files with a clear error and no crash.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/rng.h>
#include <moem/trace.h>

#include "kselftest_harness.h"

static char dir[64];

/* In the parent, before the harness forks a child per test. */
static void __attribute__((constructor)) mkdir_once(void)
{
	if (!dir[0]) {
		/* tmpfs when there is one: the corruption test writes and
		 * reads the file once per byte of it. */
		strcpy(dir, access("/dev/shm", W_OK) ? "/tmp/moem-trace-XXXXXX"
						     : "/dev/shm/moem-trace-XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
}

static char *tpath(const char *name)
{
	static char buf[4][128];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
	return buf[i];
}

static void info_init(struct moem_trace_info *in, uint32_t L, uint32_t N, uint32_t k, bool lg)
{
	memset(in, 0, sizeof(*in));
	in->flags = lg ? MOEM_TRACE_F_LOGITS : 0;
	in->source = MOEM_TRACE_SRC_ENGINE;
	in->n_layers = L;
	in->n_experts = N;
	in->top_k = k;
	strcpy(in->desc, "unit test");
}

/* Random records (some tokens with unused slots) written and kept for comparison. */
struct recs {
	uint32_t n, tokens[64];
	int32_t ids[64][16 * 4];
	float w[64][16 * 4];
	float lg[64][16 * 32];
};

static void make_recs(struct recs *rs, uint32_t n, uint32_t N, uint32_t k, uint64_t seed)
{
	struct moem_rng r;

	moem_rng_seed(&r, seed, 0);
	rs->n = n;
	for (uint32_t i = 0; i < n; i++) {
		rs->tokens[i] = 1 + moem_rng_below(&r, 16);
		for (uint32_t t = 0; t < rs->tokens[i]; t++) {
			uint32_t used = 1 + moem_rng_below(&r, k), j = 0;

			while (j < k) {
				int32_t e = j < used ? (int32_t)moem_rng_below(&r, N) : -1;
				int dup = 0;

				for (uint32_t q = 0; q < j && e >= 0; q++)
					dup |= rs->ids[i][t * k + q] == e;
				if (dup)
					continue;
				rs->ids[i][t * k + j] = e;
				rs->w[i][t * k + j] = e < 0 ? 0.0f : (float)moem_rng_f64(&r);
				j++;
			}
			for (uint32_t e = 0; e < N; e++)
				rs->lg[i][t * N + e] = (float)moem_rng_normal(&r);
		}
	}
}

static int write_recs(const char *path, const struct recs *rs, uint32_t L, uint32_t N, uint32_t k,
		      bool lg)
{
	struct moem_trace_writer *w;
	struct moem_trace_info in;
	int ret;

	info_init(&in, L, N, k, lg);
	ret = moem_trace_writer_open(path, &in, &w);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < rs->n; i++) {
		struct moem_trace_rec r = {i / L,      i % L,	 rs->tokens[i],
					   rs->ids[i], rs->w[i], lg ? rs->lg[i] : NULL,
					   NULL};

		ret = moem_trace_write(w, &r);
		if (ret) {
			moem_trace_writer_abort(w);
			return ret;
		}
	}
	return moem_trace_writer_close(w);
}

/* Read a whole trace; returns records read or a negative errno. */
static long read_all(const char *path)
{
	struct moem_trace_reader *r;
	struct moem_trace_rec rec;
	long n = 0;
	int ret;

	ret = moem_trace_open(path, &r);
	if (ret)
		return ret;
	while ((ret = moem_trace_next(r, &rec)) > 0)
		n++;
	moem_trace_close(r);
	return ret < 0 ? ret : n;
}

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	void *p;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc(*len ? *len : 1);
	if (fread(p, 1, *len, f) != *len) {
		free(p);
		p = NULL;
	}
	fclose(f);
	return p;
}

static void spit(const char *path, const void *p, size_t len)
{
	FILE *f = fopen(path, "wb");

	fwrite(p, 1, len, f);
	fclose(f);
}

TEST(round_trip_bit_exact)
{
	static struct recs rs;
	struct moem_trace_reader *r;
	struct moem_trace_rec rec;
	const char *p = tpath("rt.trace");

	for (int lg = 0; lg < 2; lg++) {
		make_recs(&rs, 40, 32, 4, 7 + lg);
		ASSERT_EQ(0, write_recs(p, &rs, 6, 32, 4, lg));
		ASSERT_EQ(0, moem_trace_open(p, &r));
		EXPECT_EQ(6u, moem_trace_reader_info(r)->n_layers);
		EXPECT_EQ(32u, moem_trace_reader_info(r)->n_experts);
		EXPECT_EQ(16u >= moem_trace_reader_info(r)->max_tokens, 1);
		EXPECT_STREQ("unit test", moem_trace_reader_info(r)->desc);
		for (uint32_t i = 0; i < rs.n; i++) {
			ASSERT_EQ(1, moem_trace_next(r, &rec));
			ASSERT_EQ(i / 6, rec.step);
			ASSERT_EQ(i % 6, rec.layer);
			ASSERT_EQ(rs.tokens[i], rec.tokens);
			ASSERT_EQ(0, memcmp(rs.ids[i], rec.ids, rec.tokens * 4 * 4));
			ASSERT_EQ(0, memcmp(rs.w[i], rec.w, rec.tokens * 4 * 4));
			for (uint32_t t = 0; t < rec.tokens; t++) {
				uint32_t c = 0;

				while (c < 4 && rs.ids[i][t * 4 + c] >= 0)
					c++;
				ASSERT_EQ(c, rec.cnt[t]);
			}
			if (lg) {
				ASSERT_EQ(0, memcmp(rs.lg[i], rec.logits, rec.tokens * 32 * 4));
			} else {
				ASSERT_EQ(NULL, rec.logits);
			}
		}
		ASSERT_EQ(0, moem_trace_next(r, &rec));
		ASSERT_EQ(0, moem_trace_next(r, &rec));
		/* rewind gives the same first record again */
		ASSERT_EQ(0, moem_trace_rewind(r));
		ASSERT_EQ(1, moem_trace_next(r, &rec));
		EXPECT_EQ(rs.tokens[0], rec.tokens);
		moem_trace_close(r);
	}
}

TEST(writer_rules)
{
	struct moem_trace_writer *w;
	struct moem_trace_info in;
	int32_t ids[4] = {1, 2, 3, 4};
	float wt[4] = {.4f, .3f, .2f, .1f};
	struct moem_trace_rec r = {0, 1, 1, ids, wt, NULL, NULL};
	const char *p = tpath("rules.trace");
	struct stat st;

	info_init(&in, 4, 8, 4, false);
	ASSERT_EQ(0, moem_trace_writer_open(p, &in, &w));
	ASSERT_EQ(0, moem_trace_write(w, &r));
	/* same (step, layer) again, then an earlier layer */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "after"));
	r.layer = 0;
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	r.step = 1;
	r.layer = 4; /* out of range */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	r.layer = 0;
	ids[1] = 1; /* duplicate */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	ids[1] = 8; /* expert out of range */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	ids[1] = -1; /* used slot after an unused one */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	ids[1] = 2;
	wt[2] = NAN;
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	wt[2] = .2f;
	r.tokens = 0;
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	r.tokens = 1;
	r.logits = wt; /* the header has no logits */
	EXPECT_EQ(-EINVAL, moem_trace_write(w, &r));
	r.logits = NULL;
	ASSERT_EQ(0, moem_trace_write(w, &r));
	EXPECT_EQ(2u, moem_trace_writer_count(w));
	/* nothing under the name until close */
	EXPECT_EQ(-1, stat(p, &st));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	EXPECT_EQ(2, read_all(p));
	/* abort leaves nothing behind */
	ASSERT_EQ(0, unlink(p));
	ASSERT_EQ(0, moem_trace_writer_open(p, &in, &w));
	moem_trace_writer_abort(w);
	EXPECT_EQ(-1, stat(p, &st));
	/* bad shapes are refused up front */
	in.top_k = 9;
	EXPECT_EQ(-EINVAL, moem_trace_writer_open(p, &in, &w));
	in.top_k = 4;
	in.flags = 1u << 7;
	EXPECT_EQ(-EPROTO, moem_trace_writer_open(p, &in, &w));
}

TEST(generator_deterministic)
{
	struct moem_trace_gen_opts o = {.batch = 4, .steps = 20, .logits = true};
	struct moem_trace_writer *w;
	struct moem_trace_info in;
	const char *a = tpath("g1.trace"), *b = tpath("g2.trace"), *c = tpath("g3.trace");
	size_t la, lb, lc;
	void *pa, *pb, *pc;

	moem_synth_defaults(&o.synth, 6, 32, 4, 99);
	moem_trace_gen_info(&o, &in);
	ASSERT_EQ(0, moem_trace_writer_open(a, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&o, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	ASSERT_EQ(0, moem_trace_writer_open(b, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&o, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	o.synth.seed = 100;
	moem_trace_gen_info(&o, &in);
	ASSERT_EQ(0, moem_trace_writer_open(c, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&o, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	pa = slurp(a, &la);
	pb = slurp(b, &lb);
	pc = slurp(c, &lc);
	ASSERT_NE(NULL, pa);
	ASSERT_NE(NULL, pb);
	ASSERT_NE(NULL, pc);
	ASSERT_EQ(la, lb);
	EXPECT_EQ(0, memcmp(pa, pb, la));
	ASSERT_EQ(la, lc);
	EXPECT_NE(0, memcmp(pa, pc, la));
	EXPECT_EQ(120, read_all(a));
	free(pa);
	free(pb);
	free(pc);
}

/* Every single-byte corruption and every truncation is refused, never crashes. */
TEST(corruption_and_truncation_rejected)
{
	static struct recs rs;
	const char *p = tpath("c.trace"), *q = tpath("c2.trace");
	size_t len, fails = 0;
	uint8_t *orig, *buf;

	make_recs(&rs, 6, 16, 4, 3);
	ASSERT_EQ(0, write_recs(p, &rs, 3, 16, 4, true));
	orig = slurp(p, &len);
	ASSERT_NE(NULL, orig);
	ASSERT_EQ(6, read_all(p));
	buf = malloc(len);
	for (size_t i = 0; i < len; i++) {
		long n;

		memcpy(buf, orig, len);
		buf[i] ^= 0x5a;
		spit(q, buf, len);
		n = read_all(q);
		if (n >= 0) {
			/* Only the header's reserved bytes are free to change. */
			EXPECT_TRUE(i >= 112 && i < 120) TH_LOG("flip at %zu accepted", i);
		} else {
			fails++;
			EXPECT_TRUE(n == -EBADMSG || n == -EPROTO) TH_LOG("flip %zu: %ld", i, n);
		}
	}
	EXPECT_GE(fails, len - 8);
	for (size_t cut = 0; cut < len; cut++) {
		long n;

		spit(q, orig, cut);
		n = read_all(q);
		ASSERT_TRUE(n == -EPROTO || n == -EBADMSG) TH_LOG("cut at %zu: %ld", cut, n);
	}
	spit(q, orig, len - 40); /* drop the end record: truncated, says so */
	EXPECT_EQ(-EPROTO, read_all(q));
	EXPECT_NE(NULL, strstr(moem_last_error(), "without an end record"));
	/* trailing garbage after the end record */
	memcpy(buf, orig, len);
	spit(q, buf, len);
	{
		FILE *f = fopen(q, "ab");

		fputs("x", f);
		fclose(f);
	}
	EXPECT_EQ(-EBADMSG, read_all(q));
	free(buf);
	free(orig);
}

/* The header's size is at byte 12 (128 in 1.0, 144 since 1.1). */
static uint32_t header_bytes(const uint8_t *h)
{
	uint32_t n;

	memcpy(&n, h + 12, 4);
	return le32toh(n);
}

static void rehash_header(uint8_t *h)
{
	memset(h + 120, 0, 8);
	uint64_t s = XXH64(h, header_bytes(h), 0);
	memcpy(h + 120, &s, 8);
}

TEST(versions_and_unknown_records)
{
	static struct recs rs;
	const char *p = tpath("v.trace"), *q = tpath("v2.trace");
	uint8_t *orig, *buf, extra[32] = {0};
	size_t len, hb;
	char want[32];
	uint64_t s;

	make_recs(&rs, 3, 16, 4, 5);
	ASSERT_EQ(0, write_recs(p, &rs, 3, 16, 4, false));
	orig = slurp(p, &len);
	ASSERT_NE(NULL, orig);
	buf = malloc(len + sizeof(extra));
	/* a future major version is refused by name */
	memcpy(buf, orig, len);
	buf[8] = 2;
	rehash_header(buf);
	spit(q, buf, len);
	EXPECT_EQ(-EPROTO, read_all(q));
	snprintf(want, sizeof(want), "version 2.%d", MOEM_TRACE_VERSION_MINOR);
	EXPECT_NE(NULL, strstr(moem_last_error(), want));
	/* not a trace at all */
	spit(q, "hello world, this is not a trace", 32);
	EXPECT_EQ(-EPROTO, read_all(q));
	EXPECT_NE(NULL, strstr(moem_last_error(), "bad magic"));
	EXPECT_EQ(-ENOENT, read_all(tpath("missing.trace")));
	/* a newer minor version's record type is skipped: insert one after the header */
	memcpy(extra, "MREC", 4);
	extra[4] = 9;
	extra[8] = sizeof(extra);
	s = XXH64(extra, sizeof(extra) - 8, 0);
	memcpy(extra + sizeof(extra) - 8, &s, 8);
	hb = header_bytes(orig);
	memcpy(buf, orig, hb);
	buf[10] = 3; /* minor 3 */
	rehash_header(buf);
	memcpy(buf + hb, extra, sizeof(extra));
	memcpy(buf + hb + sizeof(extra), orig + hb, len - hb);
	spit(q, buf, len + sizeof(extra));
	EXPECT_EQ(3, read_all(q));
	/* a 1.0 trace (128-byte header, no expert shape, no pre-gate) still reads */
	memcpy(buf, orig, 128);
	buf[10] = 0;
	buf[12] = 128;
	rehash_header(buf);
	memcpy(buf + 128, orig + hb, len - hb);
	spit(q, buf, len - (hb - 128));
	EXPECT_EQ(3, read_all(q));
	/* 1.2: expert groups (u16 n_group, u16 topk_group at 140), checked */
	memcpy(buf, orig, len);
	buf[140] = 4;
	buf[142] = 2;
	rehash_header(buf);
	spit(q, buf, len);
	EXPECT_EQ(3, read_all(q));
	buf[140] = 3;
	rehash_header(buf);
	spit(q, buf, len);
	EXPECT_EQ(-EBADMSG, read_all(q));
	EXPECT_NE(NULL, strstr(moem_last_error(), "expert groups: n_group 3 must divide the 16"))
	TH_LOG("%s", moem_last_error());
	/* a 1.1 trace's bytes there are reserved: not read */
	buf[10] = 1;
	rehash_header(buf);
	spit(q, buf, len);
	EXPECT_EQ(3, read_all(q));
	free(buf);
	free(orig);
}

TEST(json_lines_round_trip)
{
	struct moem_trace_gen_opts o = {.batch = 3,
					.steps = 4,
					.logits = true,
					.pregate = 2,
					.hidden = 256,
					.moe_inter = 128};
	struct moem_trace_writer *w;
	struct moem_trace_reader *r;
	struct moem_trace_info in;
	const char *a = tpath("j1.trace"), *b = tpath("j2.trace");
	struct moem_trace_rec rec;
	size_t la, lb;
	void *pa, *pb;
	uint64_t n = 0;
	FILE *f;

	moem_synth_defaults(&o.synth, 5, 24, 6, 11);
	moem_trace_gen_info(&o, &in);
	ASSERT_EQ(0, moem_trace_writer_open(a, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&o, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	f = tmpfile();
	ASSERT_NE(NULL, f);
	ASSERT_EQ(0, moem_trace_open(a, &r));
	ASSERT_EQ(20, moem_trace_dump_json(r, f));
	moem_trace_close(r);
	rewind(f);
	ASSERT_EQ(0, moem_trace_import_json(f, "dump", b, &n));
	fclose(f);
	EXPECT_EQ(20u, n);
	pa = slurp(a, &la);
	pb = slurp(b, &lb);
	ASSERT_NE(NULL, pa);
	ASSERT_NE(NULL, pb);
	ASSERT_EQ(la, lb);
	EXPECT_EQ(0, memcmp(pa, pb, la));
	free(pa);
	free(pb);
	/* the pre-gate picks and the shape came through: layer 4 of 5 has none ahead */
	ASSERT_EQ(0, moem_trace_open(b, &r));
	EXPECT_EQ(2u, moem_trace_reader_info(r)->pregate_depth);
	EXPECT_EQ(256u, moem_trace_reader_info(r)->hidden);
	while (moem_trace_next(r, &rec) == 1) {
		ASSERT_NE(NULL, rec.pregate);
		EXPECT_EQ(rec.layer + 1 < 5, rec.pregate[0] >= 0);
		EXPECT_EQ(rec.layer + 2 < 5, rec.pregate[(size_t)3 * 6] >= 0);
	}
	moem_trace_close(r);
	/* bad input names its line and leaves no file */
	ASSERT_EQ(0, unlink(b));
	f = fmemopen((void *)"{\"moem_trace\":1,\"n_layers\":2,\"n_experts\":4,\"top_k\":2}\n"
			     "{\"step\":0,\"layer\":0,\"ids\":[[0,1]],\"w\":[[0.5,0.5]]}\n"
			     "{\"step\":0,\"layer\":1,\"ids\":[[0,9]],\"w\":[[0.5,0.5]]}\n",
		     150, "r");
	ASSERT_NE(NULL, f);
	EXPECT_EQ(-EINVAL, moem_trace_import_json(f, "in", b, &n));
	EXPECT_NE(NULL, strstr(moem_last_error(), "in:3"));
	fclose(f);
	EXPECT_NE(0, access(b, F_OK));
}

TEST(cleanup)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ASSERT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
