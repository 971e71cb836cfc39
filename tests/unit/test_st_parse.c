// SPDX-License-Identifier: GPL-2.0-only
/*
 * Safetensors reader: valid files parse with the right index; hostile
 * ones (truncated, oversized header, bad JSON, unsupported dtype, wrong
 * sizes, offsets outside the file or overlapping) fail with a message
 * that names the problem; reads and dtype conversion are exact.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/half.h>
#include <moem/safetensors.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

/* A file image: 8-byte length, the JSON header, data_len bytes of data. */
static uint8_t *image(const char *json, size_t data_len, size_t *len)
{
	size_t n = strlen(json);
	uint8_t *b = calloc(1, 8 + n + data_len);

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(b + 8, json, n);
	for (size_t i = 0; i < data_len; i++)
		b[8 + n + i] = (uint8_t)i;
	*len = 8 + n + data_len;
	return b;
}

static int parse_json(const char *json, size_t data_len, struct moem_st_file **f)
{
	size_t len;
	uint8_t *b = image(json, data_len, &len);
	int ret;

	moem_clear_error();
	ret = moem_st_parse(b, len, len, "t.safetensors", f);
	free(b);
	return ret;
}

TEST(valid_index)
{
	struct moem_st_file *f;
	const struct moem_st_tensor *t;

	ASSERT_EQ(0,
		  parse_json("{\"__metadata__\":{\"format\":\"pt\"},"
			     "\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
			     "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
			     "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]}}   ",
			     34, &f));
	ASSERT_EQ(3u, moem_st_count(f));
	EXPECT_STREQ("a", moem_st_at(f, 0)->name); /* name order */
	t = moem_st_find(f, "b");
	ASSERT_NE(NULL, t);
	EXPECT_EQ(MOEM_DTYPE_F32, t->dtype);
	EXPECT_EQ(2u, t->ndim);
	EXPECT_EQ(6u, t->nelem);
	EXPECT_EQ(24u, t->bytes);
	EXPECT_STREQ("pt", moem_st_metadata(f, "format"));
	t = moem_st_find(f, "s");
	ASSERT_NE(NULL, t);
	EXPECT_EQ(0u, t->ndim);
	EXPECT_EQ(1u, t->nelem); /* a scalar */
	EXPECT_EQ(NULL, moem_st_find(f, "zz"));
	moem_st_close(f);
}

TEST(too_short_and_oversized_header)
{
	struct moem_st_file *f;
	uint8_t b[16] = {0};

	moem_clear_error();
	EXPECT_EQ(-EINVAL, moem_st_parse(b, 4, 4, "x", &f));
	EXPECT_MSG("too short");
	/* 200 MB header length */
	b[0] = 0x00, b[1] = 0xc2, b[2] = 0xeb, b[3] = 0x0b;
	EXPECT_EQ(-EINVAL, moem_st_parse(b, 16, 1ULL << 40, "x", &f));
	EXPECT_MSG("exceeds");
	/* longer than the file */
	memset(b, 0, 8);
	b[0] = 100;
	EXPECT_EQ(-EINVAL, moem_st_parse(b, 16, 16, "x", &f));
	EXPECT_MSG("only 8 bytes follow");
	/* u64 length with the top bit set: no wrap-around */
	memset(b, 0xff, 8);
	EXPECT_EQ(-EINVAL, moem_st_parse(b, 16, 16, "x", &f));
	EXPECT_MSG("exceeds");
}

TEST(bad_json)
{
	struct moem_st_file *f;

	EXPECT_EQ(-EINVAL, parse_json("{\"a\":{\"dtype\":\"F32\",", 0, &f));
	EXPECT_MSG("JSON");
	EXPECT_EQ(-EINVAL, parse_json("[1,2,3]", 0, &f));
	EXPECT_MSG("not a JSON object");
	EXPECT_EQ(-EINVAL, parse_json("{} trailing", 0, &f));
	EXPECT_MSG("bad JSON");
	EXPECT_EQ(-EINVAL, parse_json("{\"a\":7}", 0, &f));
	EXPECT_MSG("tensor a: entry is not an object");
	EXPECT_EQ(-EINVAL, parse_json("{\"__metadata__\":{\"k\":1}}", 0, &f));
	EXPECT_MSG("__metadata__");
}

TEST(dtype_and_fields)
{
	struct moem_st_file *f;

	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"I64\",\"shape\":[1],"
				      "\"data_offsets\":[0,8]}}",
				      8, &f));
	EXPECT_MSG("tensor w: dtype I64 not supported");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
				      "\"data_offsets\":[0,4],\"x\":1}}",
				      4, &f));
	EXPECT_MSG("unexpected field \"x\"");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, &f));
	EXPECT_MSG("missing array \"shape\"");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
				      "\"data_offsets\":[0,4]}}",
				      4, &f));
	EXPECT_MSG("shape[0] is not a size");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],"
				      "\"data_offsets\":[0,4]}}",
				      4, &f));
	EXPECT_MSG("shape[0] is not a size");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
				      "\"data_offsets\":[0]}}",
				      4, &f));
	EXPECT_MSG("[begin, end]");
}

TEST(sizes_and_overflow)
{
	struct moem_st_file *f;

	/* 3 F32 need 12 bytes, offsets hold 8 */
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],"
				      "\"data_offsets\":[0,8]}}",
				      8, &f));
	EXPECT_MSG("hold 8 bytes but 3 x F32 needs 12");
	/* shape product overflows 64 bits */
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
				      "4294967296],\"data_offsets\":[0,8]}}",
				      8, &f));
	EXPECT_MSG("overflows");
	/* elements fit, bytes do not */
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
				      "\"data_offsets\":[0,8]}}",
				      8, &f));
	EXPECT_MSG("overflows");
	/* the saturated 2^64 - 1 of json-c is refused, not wrapped */
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"BF16\",\"shape\":[1],"
				      "\"data_offsets\":[99999999999999999999999,2]}}",
				      8, &f));
	EXPECT_MSG("[begin, end]");
}

TEST(offsets_outside_and_overlapping)
{
	struct moem_st_file *f;

	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],"
				      "\"data_offsets\":[4,12]}}",
				      8, &f));
	EXPECT_MSG("outside the 8-byte data area");
	EXPECT_EQ(-EINVAL, parse_json("{\"w\":{\"dtype\":\"BF16\",\"shape\":[0],"
				      "\"data_offsets\":[6,4]}}",
				      8, &f));
	EXPECT_MSG("outside");
	EXPECT_EQ(-EINVAL, parse_json("{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],"
				      "\"data_offsets\":[0,8]},"
				      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],"
				      "\"data_offsets\":[6,10]}}",
				      10, &f));
	EXPECT_MSG("tensors a [0, 8) and b [6, 10) overlap");
	/* gaps are allowed */
	ASSERT_EQ(0, parse_json("{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],"
				"\"data_offsets\":[0,2]},"
				"\"b\":{\"dtype\":\"BF16\",\"shape\":[1],"
				"\"data_offsets\":[6,8]}}",
				8, &f));
	moem_st_close(f);
}

TEST(truncated_on_disk)
{
	const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
	char *dir = st_tmpdir(), *path;
	struct moem_st_file *f;
	float v[4];
	size_t len;
	uint8_t *b = image(json, 16, &len);

	ASSERT_NE(NULL, dir);
	path = st_path(dir, "t.safetensors");
	ASSERT_EQ(0, st_write_file(path, b, len));
	ASSERT_EQ(0, moem_st_open(path, &f));
	ASSERT_EQ(0, moem_st_read_f32(f, moem_st_find(f, "a"), v, 4));
	EXPECT_EQ(0, memcmp(v, b + len - 16, 16));
	/* the file shrinks after open: a read fails cleanly */
	ASSERT_EQ(0, truncate(path, len - 4));
	moem_clear_error();
	EXPECT_EQ(-EIO, moem_st_read_f32(f, moem_st_find(f, "a"), v, 4));
	EXPECT_MSG("short read");
	EXPECT_EQ(-EINVAL, moem_st_read(f, moem_st_find(f, "a"), 8, v, 16));
	EXPECT_MSG("outside its 16 bytes");
	moem_st_close(f);
	/* truncated data area */
	EXPECT_EQ(-EINVAL, moem_st_open(path, &f));
	EXPECT_MSG("outside the 12-byte data area");
	/* truncated header */
	ASSERT_EQ(0, truncate(path, 20));
	EXPECT_EQ(-EINVAL, moem_st_open(path, &f));
	EXPECT_MSG("only 12 bytes follow");
	ASSERT_EQ(0, truncate(path, 3));
	EXPECT_EQ(-EINVAL, moem_st_open(path, &f));
	EXPECT_MSG("too short");
	EXPECT_EQ(-ENOENT, moem_st_open("/nonexistent/x.safetensors", &f));
	free(b);
	free(path);
	st_rm_rf(dir);
	free(dir);
}

TEST(bf16_conversion_round_to_nearest_even)
{
	/* f32 values at and around bf16 ties, and their expected bf16 bits */
	static const struct {
		uint32_t f32;
		uint16_t bf16;
	} cases[] = {
		{0x3f800000, 0x3f80}, /* 1.0 */
		{0x3f808000, 0x3f80}, /* 1 + 2^-8: tie, even stays */
		{0x3f818000, 0x3f82}, /* tie with odd lsb: rounds up */
		{0x3f808001, 0x3f81}, /* just above the tie */
		{0xc0490fdb, 0xc049}, /* -pi */
		{0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to inf */
	};
	char *dir = st_tmpdir(), *path;
	struct moem_st_writer *w;
	struct moem_st_file *f;
	uint64_t shape = MOEM_ARRAY_SIZE(cases) + 1, size, off, bytes;
	uint16_t f16 = 0x3c01; /* 1 + 2^-10 in fp16 */
	uint16_t got[8];
	uint32_t idx;
	int fd;

	ASSERT_NE(NULL, dir);
	path = st_path(dir, "c.safetensors");
	ASSERT_EQ(0, moem_st_writer_create(&w));
	ASSERT_EQ(0, moem_st_writer_add(w, "f32", MOEM_DTYPE_F32, 1, &shape, &idx));
	shape = 1;
	ASSERT_EQ(0, moem_st_writer_add(w, "f16", MOEM_DTYPE_F16, 1, &shape, NULL));
	EXPECT_EQ(-EEXIST, moem_st_writer_add(w, "f16", MOEM_DTYPE_F16, 1, &shape, NULL));
	ASSERT_EQ(0, moem_st_writer_layout(w, &size));
	EXPECT_EQ(0u, (size - 8 - 4 * MOEM_ARRAY_SIZE(cases) - 4 - 2) % 8); /* padded header */
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, moem_st_writer_write_header(w, fd, path));
	moem_st_writer_offset(w, idx, &off, &bytes);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(cases); i++)
		ASSERT_EQ(4, pwrite(fd, &cases[i].f32, 4, (off_t)(off + 4 * i)));
	ASSERT_EQ(4, pwrite(fd, &cases[0].f32, 4, (off_t)(off + 4 * MOEM_ARRAY_SIZE(cases))));
	ASSERT_EQ(2, pwrite(fd, &f16, 2, (off_t)(off + bytes)));
	close(fd);
	moem_st_writer_destroy(w);
	ASSERT_EQ(0, moem_st_open(path, &f));
	ASSERT_EQ(0, moem_st_read_bf16(f, moem_st_find(f, "f32"), got, MOEM_ARRAY_SIZE(cases) + 1));
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(cases); i++)
		EXPECT_EQ(cases[i].bf16, got[i]);
	/* 1 + 2^-10 is below half a bf16 step: rounds down to 1.0 */
	ASSERT_EQ(0, moem_st_read_bf16(f, moem_st_find(f, "f16"), got, 1));
	EXPECT_EQ(0x3f80, got[0]);
	EXPECT_EQ(-EINVAL, moem_st_read_bf16(f, moem_st_find(f, "f16"), got, 2));
	moem_st_close(f);
	free(path);
	st_rm_rf(dir);
	free(dir);
}

TEST_HARNESS_MAIN
