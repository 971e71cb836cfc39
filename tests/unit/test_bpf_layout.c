// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pool tracer's check of moem.ko's tracepoint records against tracefs
 * (runtime/observe/bpf/pool.c): format files as Linux 6.1 writes them for
 * kmod/trace.h pass; a field at another offset or size, a missing field,
 * an extra common field that shifts the record, and a missing file are
 * refused with a message naming what differs. Needs no BPF.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../../runtime/observe/bpf/bpf_int.h"
#include "kselftest_harness.h"
#include "store_test_util.h"

#define COMMON                                                                         \
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"         \
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"         \
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n" \
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"

/* kmod/trace.h's records, as tracefs describes them on x86-64. */
static const struct {
	const char *event, *fields;
} formats[] = {
	{"moem_chunk_alloc", "\tfield:u64 id;\toffset:8;\tsize:8;\tsigned:0;\n"
			     "\tfield:unsigned long pfn;\toffset:16;\tsize:8;\tsigned:0;\n"
			     "\tfield:int nid;\toffset:24;\tsize:4;\tsigned:1;\n"
			     "\tfield:bool fresh;\toffset:28;\tsize:1;\tsigned:0;\n"},
	{"moem_chunk_free", "\tfield:u64 id;\toffset:8;\tsize:8;\tsigned:0;\n"
			    "\tfield:unsigned long pfn;\toffset:16;\tsize:8;\tsigned:0;\n"
			    "\tfield:int nid;\toffset:24;\tsize:4;\tsigned:1;\n"
			    "\tfield:int why;\toffset:28;\tsize:4;\tsigned:1;\n"},
	{"moem_region_create", "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
			       "\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
			       "\tfield:u64 size;\toffset:24;\tsize:8;\tsigned:0;\n"
			       "\tfield:u32 flags;\toffset:32;\tsize:4;\tsigned:0;\n"
			       "\tfield:u32 mode;\toffset:36;\tsize:4;\tsigned:0;\n"
			       "\tfield:u32 uid;\toffset:40;\tsize:4;\tsigned:0;\n"},
	{"moem_region_open", "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
			     "\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
			     "\tfield:u32 flags;\toffset:24;\tsize:4;\tsigned:0;\n"
			     "\tfield:u32 uid;\toffset:28;\tsize:4;\tsigned:0;\n"},
	{"moem_region_destroy", "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
				"\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
				"\tfield:int nr_maps;\toffset:24;\tsize:4;\tsigned:1;\n"
				"\tfield:int nr_files;\toffset:28;\tsize:4;\tsigned:1;\n"},
	{"moem_region_release", "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
				"\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
				"\tfield:u64 size;\toffset:24;\tsize:8;\tsigned:0;\n"},
	{"moem_mmap", "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
		      "\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
		      "\tfield:unsigned long start;\toffset:24;\tsize:8;\tsigned:0;\n"
		      "\tfield:unsigned long pgoff;\toffset:32;\tsize:8;\tsigned:0;\n"
		      "\tfield:unsigned long len;\toffset:40;\tsize:8;\tsigned:0;\n"
		      "\tfield:bool writable;\toffset:48;\tsize:1;\tsigned:0;\n"},
	{"moem_budget_change", "\tfield:__data_loc char[] knob;\toffset:8;\tsize:4;\tsigned:1;\n"
			       "\tfield:u64 old;\toffset:16;\tsize:8;\tsigned:0;\n"
			       "\tfield:u64 value;\toffset:24;\tsize:8;\tsigned:0;\n"
			       "\tfield:u64 seq;\toffset:32;\tsize:8;\tsigned:0;\n"},
};

static void write_format(struct __test_metadata *_metadata, const char *root, const char *ev,
			 const char *common, const char *fields)
{
	char path[512], text[2048];

	snprintf(path, sizeof(path), "%s/events/moem/%s", root, ev);
	ASSERT_EQ(0, mkdir(path, 0755) && errno != EEXIST ? -1 : 0);
	snprintf(path, sizeof(path), "%s/events/moem/%s/format", root, ev);
	snprintf(text, sizeof(text), "name: %s\nID: 1500\nformat:\n%s%s\nprint fmt: \"...\"\n", ev,
		 common, fields);
	ASSERT_EQ(0, st_write_file(path, text, strlen(text)));
}

FIXTURE(fmt)
{
	char *root;
};

FIXTURE_SETUP(fmt)
{
	char path[512];

	self->root = st_tmpdir();
	snprintf(path, sizeof(path), "%s/events", self->root);
	ASSERT_EQ(0, mkdir(path, 0755));
	snprintf(path, sizeof(path), "%s/events/moem", self->root);
	ASSERT_EQ(0, mkdir(path, 0755));
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		write_format(_metadata, self->root, formats[i].event, COMMON, formats[i].fields);
}

FIXTURE_TEARDOWN(fmt)
{
	st_rm_rf(self->root);
	free(self->root);
}

TEST_F(fmt, linux_6_1_layouts_pass)
{
	EXPECT_EQ(0, moem_bpf_pool_check_layouts(self->root)) TH_LOG("%s", moem_last_error());
}

TEST_F(fmt, moved_field_is_refused)
{
	write_format(_metadata, self->root, "moem_region_create", COMMON,
		     "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
		     "\tfield:u32 flags;\toffset:12;\tsize:4;\tsigned:0;\n"
		     "\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
		     "\tfield:u64 size;\toffset:24;\tsize:8;\tsigned:0;\n"
		     "\tfield:u32 mode;\toffset:36;\tsize:4;\tsigned:0;\n"
		     "\tfield:u32 uid;\toffset:40;\tsize:4;\tsigned:0;\n");
	EXPECT_EQ(-EPROTO, moem_bpf_pool_check_layouts(self->root));
	EXPECT_NE(NULL,
		  strstr(moem_last_error(), "moem_region_create: field flags is at offset 12"))
	TH_LOG("%s", moem_last_error());
}

TEST_F(fmt, resized_field_is_refused)
{
	write_format(_metadata, self->root, "moem_chunk_free", COMMON,
		     "\tfield:u64 id;\toffset:8;\tsize:8;\tsigned:0;\n"
		     "\tfield:unsigned long pfn;\toffset:16;\tsize:8;\tsigned:0;\n"
		     "\tfield:int nid;\toffset:24;\tsize:4;\tsigned:1;\n"
		     "\tfield:u8 why;\toffset:28;\tsize:1;\tsigned:0;\n");
	EXPECT_EQ(-EPROTO, moem_bpf_pool_check_layouts(self->root));
	EXPECT_NE(NULL, strstr(moem_last_error(), "field why is at offset 28 (1 bytes)"));
}

TEST_F(fmt, missing_field_is_refused)
{
	write_format(_metadata, self->root, "moem_region_open", COMMON,
		     "\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:1;\n"
		     "\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
		     "\tfield:u32 flags;\toffset:24;\tsize:4;\tsigned:0;\n");
	EXPECT_EQ(-EPROTO, moem_bpf_pool_check_layouts(self->root));
	EXPECT_NE(NULL, strstr(moem_last_error(), "moem_region_open has no field uid"));
}

/* A kernel whose common header grew (PREEMPT_RT's extra counters) shifts every field. */
TEST_F(fmt, shifted_common_header_is_refused)
{
	write_format(
		_metadata, self->root, "moem_mmap",
		"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
		"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
		"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
		"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
		"\tfield:unsigned char common_migrate_disable;\toffset:8;\tsize:1;\tsigned:0;\n\n",
		"\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n"
		"\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;\n"
		"\tfield:unsigned long start;\toffset:24;\tsize:8;\tsigned:0;\n"
		"\tfield:unsigned long pgoff;\toffset:32;\tsize:8;\tsigned:0;\n"
		"\tfield:unsigned long len;\toffset:40;\tsize:8;\tsigned:0;\n"
		"\tfield:bool writable;\toffset:48;\tsize:1;\tsigned:0;\n");
	EXPECT_EQ(-EPROTO, moem_bpf_pool_check_layouts(self->root));
	EXPECT_NE(NULL, strstr(moem_last_error(), "moem_mmap: field name is at offset 12"));
}

TEST_F(fmt, missing_event_is_refused)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/events/moem/moem_budget_change/format", self->root);
	ASSERT_EQ(0, unlink(path));
	EXPECT_EQ(-ENOENT, moem_bpf_pool_check_layouts(self->root));
	EXPECT_NE(NULL, strstr(moem_last_error(), "moem_budget_change/format"));
}

TEST_HARNESS_MAIN
