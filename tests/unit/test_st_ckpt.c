// SPDX-License-Identifier: GPL-2.0-only
/*
 * Checkpoint directories: the tensor set must match the architecture
 * (missing, extra and misshapen tensors are named), sharded indexes are
 * checked both ways, and side files are validated.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/store.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

FIXTURE(ckpt)
{
	char *dir;
	struct moem_mkmodel_opts o;
};

FIXTURE_SETUP(ckpt)
{
	self->dir = st_tmpdir();
	ASSERT_NE(NULL, self->dir);
	st_tiny_opts(&self->o, MOEM_ARCH_QWEN3_MOE, self->dir);
}

FIXTURE_TEARDOWN(ckpt)
{
	st_rm_rf(self->dir);
	free(self->dir);
}

/*
 * Write config.json for o->cfg and one model.safetensors of zeros holding
 * the architecture's tensors, minus skip, plus extra, with bad (if given)
 * one row short.
 */
static int write_ckpt(const struct moem_mkmodel_opts *o, const char *skip, const char *extra,
		      const char *bad)
{
	struct moem_tensor_spec *s;
	struct moem_st_writer *w;
	struct json_object *j;
	char *path;
	uint64_t size, one = 4;
	size_t n;
	int fd, ret;

	ret = moem_config_to_json(&o->cfg, &j);
	if (ret)
		return ret;
	path = st_path(o->out_dir, "config.json");
	ret = st_write_file(path, json_object_to_json_string(j),
			    strlen(json_object_to_json_string(j)));
	free(path);
	json_object_put(j);
	if (ret || moem_arch_tensors(&o->cfg, &s, &n) || moem_st_writer_create(&w))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (skip && !strcmp(s[i].name, skip))
			continue;
		if (bad && !strcmp(s[i].name, bad))
			s[i].shape[0]--;
		if (moem_st_writer_add(w, s[i].name, MOEM_DTYPE_BF16, s[i].ndim, s[i].shape, NULL))
			return -1;
	}
	if (extra && moem_st_writer_add(w, extra, MOEM_DTYPE_BF16, 1, &one, NULL))
		return -1;
	path = st_path(o->out_dir, "model.safetensors");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ret = fd < 0 || moem_st_writer_layout(w, &size) || ftruncate(fd, (off_t)size) ||
	      moem_st_writer_write_header(w, fd, path);
	close(fd);
	free(path);
	free(s);
	moem_st_writer_destroy(w);
	return ret ? -1 : 0;
}

TEST_F(ckpt, complete_opens)
{
	struct moem_ckpt *c;
	const struct moem_st_tensor *t;

	ASSERT_EQ(0, write_ckpt(&self->o, NULL, NULL, NULL));
	ASSERT_EQ(0, moem_ckpt_open(self->dir, &c));
	EXPECT_EQ(1u, moem_ckpt_n_files(c));
	EXPECT_EQ(MOEM_ARCH_QWEN3_MOE, moem_ckpt_config(c)->arch);
	ASSERT_EQ(0, moem_ckpt_find(c, "model.layers.2.mlp.experts.3.down_proj.weight", NULL, &t));
	EXPECT_EQ(128u, t->shape[0]);
	EXPECT_EQ(-ENOENT, moem_ckpt_find(c, "nope", NULL, &t));
	moem_ckpt_close(c);
}

TEST_F(ckpt, missing_extra_misshapen)
{
	struct moem_ckpt *c;

	ASSERT_EQ(0,
		  write_ckpt(&self->o, "model.layers.1.mlp.experts.2.up_proj.weight", NULL, NULL));
	moem_clear_error();
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("1 tensors missing: model.layers.1.mlp.experts.2.up_proj.weight");
	ASSERT_EQ(0,
		  write_ckpt(&self->o, NULL, "model.layers.0.mlp.shared_expert_gate.weight", NULL));
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG(
		"unexpected tensors for qwen3_moe: model.layers.0.mlp.shared_expert_gate.weight");
	ASSERT_EQ(0, write_ckpt(&self->o, "lm_head.weight", "lm_head.bias", NULL));
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("missing (lm_head.weight) and 1 unexpected (lm_head.bias)");
	ASSERT_EQ(0, write_ckpt(&self->o, NULL, NULL, "model.layers.0.mlp.gate.weight"));
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("tensor model.layers.0.mlp.gate.weight: shape [3, 128] (2 dims) but config.json "
		   "says [4, 128]");
}

TEST_F(ckpt, side_files)
{
	struct moem_ckpt *c;
	char *p = st_path(self->dir, "config.json");
	char *s = st_path(self->dir, "moem_synth.json");
	struct moem_synth_params sp;
	struct json_object *j;

	moem_clear_error();
	EXPECT_EQ(-ENOENT, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("config.json");
	ASSERT_EQ(0, write_ckpt(&self->o, NULL, NULL, NULL));
	/* a synthetic workload for another shape is refused */
	moem_synth_defaults(&sp, 3, 5, 2, 1);
	ASSERT_EQ(0, moem_synth_to_json(&sp, &j));
	ASSERT_EQ(0, st_write_file(s, json_object_to_json_string(j),
				   strlen(json_object_to_json_string(j))));
	json_object_put(j);
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("does not match config.json");
	ASSERT_EQ(0, st_write_file(s, "{", 1));
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("moem_synth.json");
	unlink(s);
	ASSERT_EQ(0, st_write_file(p, "{\"model_type\":\"qwen3_moe\"}", 26));
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("missing \"hidden_size\"");
	free(p);
	free(s);
}

/* generation_config.json's eos_token_id wins over config.json's (HF generate()). */
TEST_F(ckpt, generation_config_eos)
{
	static const char gen_ok[] = "{\"eos_token_id\":[11,12],\"do_sample\":true}";
	static const char gen_bad[] = "{\"eos_token_id\":\"x\"}";
	char *g = st_path(self->dir, "generation_config.json");
	struct moem_ckpt *c;

	self->o.cfg.n_eos = 1;
	self->o.cfg.eos[0] = 3;
	ASSERT_EQ(0, write_ckpt(&self->o, NULL, NULL, NULL));
	ASSERT_EQ(0, moem_ckpt_open(self->dir, &c));
	EXPECT_EQ(1u, moem_ckpt_config(c)->n_eos);
	EXPECT_EQ(3, moem_ckpt_config(c)->eos[0]);
	moem_ckpt_close(c);
	ASSERT_EQ(0, st_write_file(g, gen_ok, strlen(gen_ok)));
	ASSERT_EQ(0, moem_ckpt_open(self->dir, &c));
	EXPECT_EQ(2u, moem_ckpt_config(c)->n_eos);
	EXPECT_EQ(12, moem_ckpt_config(c)->eos[1]);
	moem_ckpt_close(c);
	ASSERT_EQ(0, st_write_file(g, gen_bad, strlen(gen_bad)));
	moem_clear_error();
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("generation_config.json: eos_token_id is not a token id");
	free(g);
}

/* Rewrite the shard index with a change applied by fn. */
static void edit_index(struct __test_metadata *_metadata, const char *dir,
		       void (*fn)(struct json_object *wm))
{
	char *p = st_path(dir, "model.safetensors.index.json");
	struct json_object *root = json_object_from_file(p), *wm;

	ASSERT_NE(NULL, root);
	ASSERT_TRUE(json_object_object_get_ex(root, "weight_map", &wm));
	fn(wm);
	ASSERT_EQ(0, json_object_to_file(p, root));
	json_object_put(root);
	free(p);
}

static const char *victim = "model.layers.1.mlp.experts.0.gate_proj.weight";

static void move_tensor(struct json_object *wm)
{
	struct json_object *v;
	const char *cur;

	json_object_object_get_ex(wm, victim, &v);
	cur = json_object_get_string(v);
	json_object_object_add(
		wm, victim,
		json_object_new_string(strstr(cur, "00001") ? "model-00002-of-00003.safetensors"
							    : "model-00001-of-00003.safetensors"));
}

static void drop_tensor(struct json_object *wm)
{
	json_object_object_del(wm, victim);
}

static void escape_dir(struct json_object *wm)
{
	json_object_object_add(wm, victim, json_object_new_string("../model.safetensors"));
}

static void missing_shard(struct json_object *wm)
{
	json_object_object_add(wm, victim,
			       json_object_new_string("model-00009-of-00009.safetensors"));
}

TEST_F(ckpt, sharded_index_checked_both_ways)
{
	struct moem_ckpt *c;

	self->o.shards = 3;
	ASSERT_EQ(0, moem_mkmodel(&self->o));
	ASSERT_EQ(0, moem_ckpt_open(self->dir, &c));
	EXPECT_EQ(3u, moem_ckpt_n_files(c));
	moem_ckpt_close(c);

	edit_index(_metadata, self->dir, move_tensor);
	moem_clear_error();
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("maps tensor model.layers.1.mlp.experts.0.gate_proj.weight to");
	EXPECT_MSG("which does not hold it");
	edit_index(_metadata, self->dir, drop_tensor);
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("is not in model.safetensors.index.json");
	edit_index(_metadata, self->dir, escape_dir);
	EXPECT_EQ(-EINVAL, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("\"../model.safetensors\" is not a plain file name");
	edit_index(_metadata, self->dir, missing_shard);
	EXPECT_EQ(-ENOENT, moem_ckpt_open(self->dir, &c));
	EXPECT_MSG("model-00009-of-00009.safetensors");
}

TEST_HARNESS_MAIN
