// SPDX-License-Identifier: GPL-2.0-only
/*
 * The store's files against what a user can hand it by mistake:
 *  - a FIFO as the pack, as config.json, as a safetensors file: refused
 *    within a second (opening a FIFO used to wait for a writer forever),
 *    by the library and by `moem info` / `moem pack`;
 *  - a NaN or an infinity in an expert's weights, in a shared expert, in
 *    the router: refused by `moem pack` in every precision, naming the
 *    tensor (q4 used to be the only one that noticed);
 *  - `moem pack` killed with SIGKILL at random moments: no temporary file
 *    is left next to the output (it writes an unnamed file and links it
 *    in at the end), and the output is either absent or a whole pack.
 */
#include <dirent.h>

#include <moem/safetensors.h>

#include "kselftest_harness.h"
#include "daemon_util.h"

static const char *moem_bin(void)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/bin/moem",
		 getenv("MOEM_BUILD") ? getenv("MOEM_BUILD") : "build");
	return path;
}

/* Run the moem tool with argv (NULL-terminated); its exit status, or -1
 * if it did not exit within timeout_ms (it is killed then). */
static int run_moem(const char *const *args, int timeout_ms, uint64_t *ms)
{
	const char *argv[32] = {moem_bin()};
	uint64_t t0 = dmn_ms();
	int n = 1, st;
	pid_t pid;

	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (dmn_ms() - t0 > (uint64_t)timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		dmn_sleep_ms(2);
	}
	if (ms)
		*ms = dmn_ms() - t0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int make_model(const char *dir, uint32_t shared)
{
	struct moem_mkmodel_opts mo;

	moem_mkmodel_defaults(&mo,
			      shared ? MOEM_PRESET_DEEPSEEK_V2_LITE : MOEM_PRESET_QWEN3_30B_A3B);
	mo.cfg.n_layers = 2;
	mo.cfg.n_experts = 8;
	mo.cfg.top_k = 2;
	mo.cfg.hidden = 128;
	mo.cfg.moe_inter = 128;
	mo.cfg.dense_inter = 128;
	mo.cfg.n_shared = shared;
	mo.cfg.shared_inter = 128;
	mo.cfg.vocab = 256;
	mo.cfg.n_heads = 4;
	mo.cfg.n_kv_heads = 2;
	mo.cfg.head_dim = 32;
	mo.threads = 2;
	mo.out_dir = dir;
	return moem_mkmodel(&mo);
}

FIXTURE(f)
{
	char *dir;
};

FIXTURE_SETUP(f)
{
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
}

FIXTURE_TEARDOWN(f)
{
	dmn_rm_rf(self->dir);
	free(self->dir);
}

TEST_F_TIMEOUT(f, fifos_refused_at_once, 60)
{
	char fifo[600], model[600], cfg[600], st[600], out[600];
	struct moem_pack *p;
	struct moem_ckpt *ck;
	uint64_t t0, ms;

	snprintf(fifo, sizeof(fifo), "%s/pack.moem", self->dir);
	ASSERT_EQ(0, mkfifo(fifo, 0644));
	t0 = dmn_ms();
	EXPECT_EQ(-EINVAL, moem_pack_open(fifo, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "a FIFO")) TH_LOG("%s", moem_last_error());
	EXPECT_LT(dmn_ms() - t0, 1000u);
	{
		const char *a[] = {"info", fifo, NULL};

		EXPECT_EQ(1, run_moem(a, 10000, &ms));
		EXPECT_LT(ms, 1000u);
	}

	/* A model whose config.json is a FIFO, then one whose weights are. */
	snprintf(model, sizeof(model), "%s/model", self->dir);
	ASSERT_EQ(0, make_model(model, 0)) TH_LOG("%s", moem_last_error());
	snprintf(cfg, sizeof(cfg), "%s/config.json", model);
	snprintf(st, sizeof(st), "%s/config.json.real", model);
	ASSERT_EQ(0, rename(cfg, st));
	ASSERT_EQ(0, mkfifo(cfg, 0644));
	t0 = dmn_ms();
	EXPECT_NE(0, moem_ckpt_open(model, &ck));
	EXPECT_NE(NULL, strstr(moem_last_error(), "a FIFO")) TH_LOG("%s", moem_last_error());
	EXPECT_LT(dmn_ms() - t0, 1000u);
	snprintf(out, sizeof(out), "%s/out.moem", self->dir);
	{
		const char *a[] = {"pack", "--model", model, "--out", out, "--quiet", NULL};

		EXPECT_EQ(1, run_moem(a, 10000, &ms));
		EXPECT_LT(ms, 1000u);
		EXPECT_NE(0, access(out, F_OK));
	}
	ASSERT_EQ(0, unlink(cfg));
	ASSERT_EQ(0, rename(st, cfg));
	snprintf(st, sizeof(st), "%s/model.safetensors", model);
	ASSERT_EQ(0, unlink(st));
	ASSERT_EQ(0, mkfifo(st, 0644));
	t0 = dmn_ms();
	EXPECT_NE(0, moem_ckpt_open(model, &ck));
	EXPECT_NE(NULL, strstr(moem_last_error(), "a FIFO")) TH_LOG("%s", moem_last_error());
	EXPECT_LT(dmn_ms() - t0, 1000u);
	{
		const char *a[] = {"pack", "--model", model, "--out", out, "--quiet", NULL};

		EXPECT_EQ(1, run_moem(a, 10000, &ms));
		EXPECT_LT(ms, 1000u);
	}
}

/* A FIFO as moem run's hidden-state workload file: refused, not waited on. */
TEST_F_TIMEOUT(f, fifo_hidden_workload_refused_at_once, 120)
{
	char model[600], pack[600], fifo[600], wl[700];
	uint64_t ms;

	snprintf(model, sizeof(model), "%s/model", self->dir);
	snprintf(pack, sizeof(pack), "%s/m.moem", self->dir);
	snprintf(fifo, sizeof(fifo), "%s/hidden.bin", self->dir);
	ASSERT_EQ(0, make_model(model, 0)) TH_LOG("%s", moem_last_error());
	{
		const char *a[] = {"pack", "--model", model, "--out", pack, "--quiet", NULL};

		ASSERT_EQ(0, run_moem(a, 120000, &ms));
	}
	ASSERT_EQ(0, mkfifo(fifo, 0644));
	snprintf(wl, sizeof(wl), "hidden:%s", fifo);
	{
		const char *a[] = {"run", "--pack", pack, "--workload", wl, "--steps", "1", NULL};

		/* A hang is killed at the deadline and reads -1. */
		EXPECT_EQ(1, run_moem(a, 60000, &ms));
	}
}

/* Write a bf16 value over element i of tensor name in model/model.safetensors. */
static int poke(const char *model, const char *name, uint64_t i, uint16_t v)
{
	char path[600];
	struct moem_st_file *f;
	const struct moem_st_tensor *t;
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/model.safetensors", model);
	ret = moem_st_open(path, &f);
	if (ret)
		return ret;
	t = moem_st_find(f, name);
	if (!t || t->dtype != MOEM_DTYPE_BF16 || i >= t->nelem) {
		moem_st_close(f);
		return -ENOENT;
	}
	fd = open(path, O_WRONLY);
	if (fd < 0 || pwrite(fd, &v, 2, (off_t)(t->offset + 2 * i)) != 2)
		ret = -EIO;
	if (fd >= 0)
		close(fd);
	moem_st_close(f);
	return ret;
}

TEST_F_TIMEOUT(f, nonfinite_weights_refused_in_every_precision, 300)
{
	static const struct {
		const char *tensor, *what;
		uint16_t v;
		uint32_t shared;
	} cases[] = {
		{"model.layers.1.mlp.experts.3.down_proj.weight", "NaN", 0x7fc0, 0},
		{"model.layers.0.mlp.experts.5.gate_proj.weight", "infinite", 0xff80, 0},
		{"model.layers.1.mlp.gate.weight", "NaN", 0xffc1, 0},
		{"model.layers.1.mlp.shared_experts.up_proj.weight", "infinite", 0x7f80, 1},
	};
	static const char *const precs[] = {"bf16", "q8", "q4", "q2", "bf16,q4"};

	for (size_t c = 0; c < MOEM_ARRAY_SIZE(cases); c++) {
		char model[600], out[600];

		snprintf(model, sizeof(model), "%s/model%zu", self->dir, c);
		snprintf(out, sizeof(out), "%s/out.moem", self->dir);
		ASSERT_EQ(0, make_model(model, cases[c].shared)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, poke(model, cases[c].tensor, 17, cases[c].v))
		TH_LOG("%s", cases[c].tensor);
		for (size_t p = 0; p < MOEM_ARRAY_SIZE(precs); p++) {
			struct moem_pack_opts po = {
				.model_dir = model, .out_path = out, .threads = 2};
			char want[160];

			ASSERT_EQ(0, moem_prec_parse_list(precs[p], &po.prec_mask));
			EXPECT_EQ(-EDOM, moem_pack_write(&po))
			TH_LOG("%s in %s, %s: %s", cases[c].what, cases[c].tensor, precs[p],
			       moem_last_error());
			snprintf(want, sizeof(want), "tensor %s: element 17 is %s", cases[c].tensor,
				 cases[c].what);
			EXPECT_NE(NULL, strstr(moem_last_error(), want))
			TH_LOG("%s: %s", precs[p], moem_last_error());
			EXPECT_NE(0, access(out, F_OK));
		}
		dmn_rm_rf(model);
	}
}

/* Names in dir other than keep (the model directory). */
static int stray_files(const char *dir, const char *keep1, const char *keep2, char *first,
		       size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d) {
		snprintf(first, len, "(opendir: %s)", strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !strcmp(e->d_name, keep1) || !strcmp(e->d_name, keep2))
			continue;
		if (!n++)
			snprintf(first, len, "%s", e->d_name);
	}
	closedir(d);
	return n;
}

TEST_F_TIMEOUT(f, kill9_during_pack_leaves_nothing, 600)
{
	const char *env = getenv("MOEM_PACK_KILL_ITERS");
	unsigned int iters = env ? (unsigned int)atoi(env) : 8, whole = 0, absent = 0;
	char model[600], out[600], first[256];
	uint64_t full_ms = 0;
	struct moem_rng rng;

	snprintf(model, sizeof(model), "%s/model", self->dir);
	snprintf(out, sizeof(out), "%s/out.moem", self->dir);
	{
		struct moem_mkmodel_opts mo;

		/* Big enough that a pack takes a while to write. */
		moem_mkmodel_defaults(&mo, MOEM_PRESET_QWEN3_30B_A3B);
		mo.cfg.n_layers = 2;
		mo.cfg.n_experts = 8;
		mo.cfg.top_k = 2;
		mo.cfg.vocab = 256;
		mo.threads = 2;
		mo.out_dir = model;
		ASSERT_EQ(0, moem_mkmodel(&mo)) TH_LOG("%s", moem_last_error());
	}
	{
		const char *a[] = {"pack",	   "--model", model,	 "--out", out,
				   "--precisions", "bf16,q4", "--quiet", NULL};

		ASSERT_EQ(0, run_moem(a, 300000, &full_ms));
		ASSERT_EQ(0, unlink(out));
	}
	TH_LOG("a whole pack takes %llu ms", (unsigned long long)full_ms);
	moem_rng_seed(&rng, (uint64_t)time(NULL), 0);
	for (unsigned int it = 0; it < iters; it++) {
		const char *argv[] = {moem_bin(), "pack",	  "--model", model,	"--out",
				      out,	  "--precisions", "bf16,q4", "--quiet", NULL};
		uint64_t delay = moem_rng_below(&rng, full_ms + 1);
		struct moem_pack *p;
		pid_t pid = fork();
		int st;

		ASSERT_LE(0, pid);
		if (!pid) {
			execv(argv[0], (char *const *)argv);
			_exit(127);
		}
		/* Kill it at a random moment of its run (or after it ended). */
		for (uint64_t t0 = dmn_ms(); dmn_ms() - t0 < delay; dmn_sleep_ms(1))
			if (waitpid(pid, &st, WNOHANG) == pid)
				goto reaped;
		kill(pid, SIGKILL);
		ASSERT_EQ(pid, waitpid(pid, &st, 0));
	reaped:
		EXPECT_EQ(0, stray_files(self->dir, "model", "out.moem", first, sizeof(first)))
		TH_LOG("iteration %u (killed after %llu ms): %s left behind", it,
		       (unsigned long long)delay, first);
		if (access(out, F_OK) == 0) {
			EXPECT_EQ(0, moem_pack_open(out, &p)) TH_LOG("%s", moem_last_error());
			moem_pack_close(p);
			unlink(out);
			whole++;
		} else {
			absent++;
		}
	}
	TH_LOG("%u kills: %u left no pack, %u a whole one", iters, absent, whole);
}

TEST_HARNESS_MAIN
