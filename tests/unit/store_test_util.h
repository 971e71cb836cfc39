/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers shared by the store's unit tests (test_st_*, test_mkmodel*,
 * test_pack*): temporary directories, files, tiny model options and a
 * check that an error message says what it should.
 */
#ifndef MOEM_STORE_TEST_UTIL_H
#define MOEM_STORE_TEST_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/store.h>

/* The last error message must contain needle (shown in the log if not). */
#define EXPECT_MSG(needle)                                                   \
	do {                                                                 \
		const char *m_ = moem_last_error();                          \
		if (!strstr(m_, (needle)))                                   \
			TH_LOG("message \"%s\" lacks \"%s\"", m_, (needle)); \
		EXPECT_TRUE(strstr(m_, (needle)) != NULL);                   \
	} while (0)

static inline char *st_tmpdir(void)
{
	char tmpl[] = "/tmp/moem-test-XXXXXX";
	char *d = mkdtemp(tmpl);

	return d ? strdup(d) : NULL;
}

static int st_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void st_rm_rf(const char *path)
{
	if (path)
		nftw(path, st_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline char *st_path(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);

	sprintf(p, "%s/%s", dir, name);
	return p;
}

static inline int st_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(data, 1, len, f) == len;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static inline void *st_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(n ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Number of entries in a directory, "." and ".." excluded. */
static inline int st_count_entries(const char *dir)
{
	char cmd[512];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

/*
 * Options for a tiny model of an architecture: small enough that a unit
 * test writes, packs and reads it in well under a second, with every
 * structural feature (dense-first layers and shared experts for
 * deepseek_v2) and q8/q4/q2-compatible widths.
 */
static inline void st_tiny_opts(struct moem_mkmodel_opts *o, enum moem_arch a, const char *dir)
{
	moem_mkmodel_defaults(o, moem_preset_of_arch(a));
	o->cfg.n_layers = 3;
	o->cfg.hidden = 128;
	o->cfg.moe_inter = 128;
	o->cfg.n_experts = 4;
	o->cfg.top_k = 2;
	o->cfg.vocab = 64;
	o->cfg.n_heads = 2;
	o->cfg.n_kv_heads = a == MOEM_ARCH_OLMOE || a == MOEM_ARCH_DEEPSEEK_V2 ? 2 : 1;
	o->cfg.head_dim = 32;
	o->cfg.dense_inter = 256;
	if (a == MOEM_ARCH_DEEPSEEK_V2) {
		o->cfg.shared_inter = 128;
		o->cfg.kv_lora_rank = 64;
		o->cfg.qk_nope_dim = 32;
		o->cfg.qk_rope_dim = 16;
		o->cfg.v_head_dim = 32;
	}
	o->threads = 2;
	o->out_dir = dir;
}

/* The tiny model of arch written to model_dir and packed bf16 to pack: 0 or -errno. */
static inline int st_tiny_pack(enum moem_arch a, const char *model_dir, const char *pack)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	int ret;

	st_tiny_opts(&mo, a, model_dir);
	ret = moem_mkmodel(&mo);
	if (ret)
		return ret;
	po.model_dir = model_dir;
	po.out_path = pack;
	po.prec_mask = 1u << MOEM_PREC_BF16;
	po.threads = 2;
	return moem_pack_write(&po);
}

#endif /* MOEM_STORE_TEST_UTIL_H */
