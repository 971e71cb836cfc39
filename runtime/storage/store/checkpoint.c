// SPDX-License-Identifier: GPL-2.0-only
/*
 * Checkpoint directories (store.h): config.json, one or more safetensors
 * files, and the check that the tensor set is exactly the architecture's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/store.h>

#include "ckpt_int.h"
#include "store_int.h"

#define CKPT_MAX_SHARDS 1024

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_entry *)a)->name, ((const struct ckpt_entry *)b)->name);
}

static struct ckpt_entry *find_entry(const struct moem_ckpt *c, const char *name)
{
	struct ckpt_entry key = {.name = name};

	return bsearch(&key, c->idx, c->n_idx, sizeof(key), cmp_entry);
}

static bool file_exists(const char *path)
{
	struct stat st;

	return !stat(path, &st);
}

static int open_shard(struct moem_ckpt *c, const char *name)
{
	char *path = moem_store_path_join(c->dir, name);
	int ret;

	if (!path)
		return -ENOMEM;
	ret = moem_st_open(path, &c->files[c->n_files]);
	free(path);
	if (!ret)
		c->n_files++;
	return ret;
}

static int check_shard_name(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 255 || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
		return moem_errf(EINVAL,
				 "model.safetensors.index.json: shard \"%.64s\" is not a plain "
				 "file name",
				 s);
	return 0;
}

/* Index entries (tensor -> shard number), sorted by name. */
struct map_entry {
	const char *name;
	uint32_t shard;
};

static int cmp_map(const void *a, const void *b)
{
	return strcmp(((const struct map_entry *)a)->name, ((const struct map_entry *)b)->name);
}

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Check the weight map against the opened shards, both ways. */
static int check_map(struct moem_ckpt *c, struct map_entry *map, size_t n, const char **shards)
{
	for (size_t i = 0; i < n; i++) {
		if (!moem_st_find(c->files[map[i].shard], map[i].name))
			return moem_errf(EINVAL,
					 "model.safetensors.index.json maps tensor %s to %s, "
					 "which does not hold it",
					 map[i].name, shards[map[i].shard]);
	}
	for (uint32_t s = 0; s < c->n_files; s++) {
		for (uint32_t i = 0; i < moem_st_count(c->files[s]); i++) {
			struct map_entry key = {.name = moem_st_at(c->files[s], i)->name}, *m;

			m = bsearch(&key, map, n, sizeof(key), cmp_map);
			if (!m)
				return moem_errf(EINVAL,
						 "tensor %s of %s is not in "
						 "model.safetensors.index.json",
						 key.name, shards[s]);
			if (m->shard != s)
				return moem_errf(EINVAL,
						 "tensor %s is in %s but the index maps it to %s",
						 key.name, shards[s], shards[m->shard]);
		}
	}
	return 0;
}

static int open_sharded(struct moem_ckpt *c, const char *index_path)
{
	struct json_object *root = NULL, *wm;
	struct map_entry *map = NULL;
	const char **shards = NULL;
	size_t n = 0, ns = 0, len;
	char *text;
	int ret;

	ret = moem_store_read_file(index_path, STORE_JSON_MAX, &text, &len);
	if (ret)
		return ret;
	ret = moem_store_json_parse(text, len, 8, "model.safetensors.index.json", &root);
	free(text);
	if (ret)
		return ret;
	if (!json_object_is_type(root, json_type_object) ||
	    !json_object_object_get_ex(root, "weight_map", &wm) ||
	    !json_object_is_type(wm, json_type_object)) {
		ret = moem_errf(EINVAL, "model.safetensors.index.json: missing \"weight_map\" "
					"object");
		goto out;
	}
	n = (size_t)json_object_object_length(wm);
	map = calloc(n ? n : 1, sizeof(*map));
	shards = calloc(n ? n : 1, sizeof(*shards));
	if (!map || !shards) {
		ret = -ENOMEM;
		goto out;
	}
	n = 0;
	json_object_object_foreach(wm, key, val)
	{
		if (!val || !json_object_is_type(val, json_type_string)) {
			ret = moem_errf(EINVAL,
					"model.safetensors.index.json: weight_map[\"%.100s\"] is "
					"not a file name",
					key);
			goto out;
		}
		ret = check_shard_name(json_object_get_string(val));
		if (ret)
			goto out;
		map[n].name = key;
		shards[n++] = json_object_get_string(val);
	}
	if (!n) {
		ret = moem_errf(EINVAL, "model.safetensors.index.json: empty weight_map");
		goto out;
	}
	/* Unique shard names, in sorted order; then number each map entry. */
	qsort(shards, n, sizeof(*shards), cmp_cstr);
	for (size_t i = 0; i < n; i++)
		if (!ns || strcmp(shards[ns - 1], shards[i]))
			shards[ns++] = shards[i];
	if (ns > CKPT_MAX_SHARDS) {
		ret = moem_errf(EINVAL, "model.safetensors.index.json: %zu shards, at most %d", ns,
				CKPT_MAX_SHARDS);
		goto out;
	}
	{
		size_t i = 0;

		json_object_object_foreach(wm, k2, v2)
		{
			const char *s = json_object_get_string(v2);
			const char **hit = bsearch(&s, shards, ns, sizeof(*shards), cmp_cstr);

			(void)k2;
			map[i++].shard = (uint32_t)(hit - shards);
		}
	}
	qsort(map, n, sizeof(*map), cmp_map);
	c->files = calloc(ns, sizeof(*c->files));
	if (!c->files) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t s = 0; s < ns && !ret; s++)
		ret = open_shard(c, shards[s]);
	if (!ret)
		ret = check_map(c, map, n, shards);
out:
	free(map);
	free(shards);
	json_object_put(root);
	return ret;
}

static int build_index(struct moem_ckpt *c)
{
	size_t n = 0;
	int ret;

	for (uint32_t f = 0; f < c->n_files; f++)
		n += moem_st_count(c->files[f]);
	c->idx = calloc(n ? n : 1, sizeof(*c->idx));
	if (!c->idx)
		return -ENOMEM;
	for (uint32_t f = 0; f < c->n_files; f++) {
		for (uint32_t i = 0; i < moem_st_count(c->files[f]); i++) {
			struct ckpt_entry *e = &c->idx[c->n_idx++];

			e->t = moem_st_at(c->files[f], i);
			e->name = e->t->name;
			e->file = f;
			c->tensor_bytes += e->t->bytes;
		}
	}
	/* transformers 5's fused experts as per-expert views (fused.c) */
	ret = moem_ckpt_unfuse(c);
	if (ret)
		return ret;
	qsort(c->idx, c->n_idx, sizeof(*c->idx), cmp_entry);
	for (size_t i = 1; i < c->n_idx; i++) {
		if (strcmp(c->idx[i - 1].name, c->idx[i].name))
			continue;
		if (moem_ckpt_entry_is_view(c, c->idx[i - 1].t) ||
		    moem_ckpt_entry_is_view(c, c->idx[i].t))
			return moem_errf(EINVAL,
					 "%s: tensor %s is both in the checkpoint and in a fused "
					 "(transformers 5) tensor: a layer has both layouts",
					 c->dir, c->idx[i].name);
		return moem_errf(EINVAL, "tensor %s appears in %s and %s", c->idx[i].name,
				 moem_st_path(c->files[c->idx[i - 1].file]),
				 moem_st_path(c->files[c->idx[i].file]));
	}
	return 0;
}

/* Append "name" to a list of at most 3 shown names in buf. */
static void note(char *buf, size_t len, size_t *count, const char *name)
{
	size_t used = strlen(buf);

	if (*count < 3)
		snprintf(buf + used, len - used, "%s%s", *count ? ", " : "", name);
	(*count)++;
}

static int check_tensors(struct moem_ckpt *c)
{
	char missing[400] = "", extra[400] = "";
	size_t n_missing = 0, n_extra = 0;
	int ret;

	ret = moem_arch_tensors(&c->cfg, &c->specs, &c->n_specs);
	if (ret)
		return ret;
	for (size_t i = 0; i < c->n_specs; i++) {
		const struct moem_tensor_spec *s = &c->specs[i];
		struct ckpt_entry *e = find_entry(c, s->name);

		if (!e) {
			note(missing, sizeof(missing), &n_missing, s->name);
			continue;
		}
		e->expected = true;
		if (e->t->ndim != s->ndim || e->t->shape[0] != s->shape[0] ||
		    (s->ndim == 2 && e->t->shape[1] != s->shape[1]))
			return moem_errf(EINVAL,
					 "tensor %s: shape [%llu%s%llu] (%u dims) but config.json "
					 "says [%llu%s%llu]",
					 s->name, (unsigned long long)e->t->shape[0],
					 e->t->ndim > 1 ? ", " : "",
					 (unsigned long long)(e->t->ndim > 1 ? e->t->shape[1] : 0),
					 e->t->ndim, (unsigned long long)s->shape[0],
					 s->ndim > 1 ? ", " : "",
					 (unsigned long long)(s->ndim > 1 ? s->shape[1] : 0));
	}
	for (size_t i = 0; i < c->n_idx; i++)
		if (!c->idx[i].expected && !c->idx[i].viewed)
			note(extra, sizeof(extra), &n_extra, c->idx[i].name);
	if (n_missing && n_extra)
		return moem_errf(EINVAL,
				 "%s: %zu tensors missing (%s%s) and %zu unexpected (%s%s) for %s",
				 c->dir, n_missing, missing, n_missing > 3 ? ", ..." : "", n_extra,
				 extra, n_extra > 3 ? ", ..." : "", moem_arch_name(c->cfg.arch));
	if (n_missing)
		return moem_errf(EINVAL, "%s: %zu tensors missing: %s%s", c->dir, n_missing,
				 missing, n_missing > 3 ? ", ..." : "");
	if (n_extra)
		return moem_errf(EINVAL, "%s: %zu unexpected tensors for %s: %s%s", c->dir, n_extra,
				 moem_arch_name(c->cfg.arch), extra, n_extra > 3 ? ", ..." : "");
	return 0;
}

/*
 * generation_config.json, when present: its eos_token_id is what HF's
 * generate() stops on, so it takes precedence over config.json's.
 */
static int load_generation(struct moem_ckpt *c)
{
	char *path = moem_store_path_join(c->dir, "generation_config.json"), *text = NULL;
	struct json_object *o = NULL;
	size_t len;
	int ret;

	if (!path)
		return -ENOMEM;
	if (!file_exists(path)) {
		free(path);
		return 0;
	}
	ret = moem_store_read_file(path, STORE_JSON_MAX, &text, &len);
	free(path);
	if (!ret)
		ret = moem_store_json_parse(text, len, 8, "generation_config.json", &o);
	if (!ret && !json_object_is_type(o, json_type_object))
		ret = moem_errf(EINVAL, "generation_config.json: not a JSON object");
	if (!ret)
		ret = moem_store_parse_eos(o, "generation_config.json", &c->cfg);
	if (ret == -ENOENT)
		ret = 0;
	json_object_put(o);
	free(text);
	return ret;
}

static int load_synth(struct moem_ckpt *c)
{
	char *path = moem_store_path_join(c->dir, "moem_synth.json");
	struct moem_synth_params *p = &c->synth;
	struct json_object *o;
	int ret;

	if (!path)
		return -ENOMEM;
	if (!file_exists(path)) {
		free(path);
		return 0;
	}
	ret = moem_store_read_file(path, STORE_JSON_MAX, &c->synth_text, &c->synth_len);
	free(path);
	if (ret)
		return ret;
	ret = moem_store_json_parse(c->synth_text, c->synth_len, 8, "moem_synth.json", &o);
	if (ret)
		return ret;
	ret = moem_synth_from_json(o, p);
	json_object_put(o);
	if (ret)
		return ret;
	if (p->n_layers != moem_n_moe_layers(&c->cfg) || p->n_experts != c->cfg.n_experts ||
	    p->top_k != c->cfg.top_k)
		return moem_errf(EINVAL,
				 "moem_synth.json: %u layers x %u experts, top-%u does not match "
				 "config.json (%u MoE layers x %u, top-%u)",
				 p->n_layers, p->n_experts, p->top_k, moem_n_moe_layers(&c->cfg),
				 c->cfg.n_experts, c->cfg.top_k);
	c->has_synth = true;
	return 0;
}

int moem_ckpt_open(const char *dir, struct moem_ckpt **out)
{
	struct moem_ckpt *c;
	char *path = NULL;
	int ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dir = strdup(dir);
	path = moem_store_path_join(dir, "config.json");
	if (!c->dir || !path) {
		ret = -ENOMEM;
		goto err;
	}
	ret = moem_store_read_file(path, STORE_JSON_MAX, &c->config_text, &c->config_len);
	if (ret)
		goto err;
	ret = moem_config_parse(c->config_text, c->config_len, &c->cfg);
	if (ret) {
		moem_err_prefix(-ret, "%s", dir);
		goto err;
	}
	ret = load_generation(c);
	if (!ret)
		ret = load_synth(c);
	if (ret)
		goto err;
	free(path);
	path = moem_store_path_join(dir, "model.safetensors.index.json");
	if (!path) {
		ret = -ENOMEM;
		goto err;
	}
	if (file_exists(path)) {
		ret = open_sharded(c, path);
	} else {
		c->files = calloc(1, sizeof(*c->files));
		ret = c->files ? open_shard(c, "model.safetensors") : -ENOMEM;
	}
	if (!ret)
		ret = build_index(c);
	if (!ret)
		ret = check_tensors(c);
	if (ret)
		goto err;
	free(path);
	*out = c;
	return 0;
err:
	free(path);
	moem_ckpt_close(c);
	return ret;
}

void moem_ckpt_close(struct moem_ckpt *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->n_files; i++)
		moem_st_close(c->files[i]);
	free(c->files);
	free(c->idx);
	free(c->views);
	free(c->specs);
	free(c->config_text);
	free(c->synth_text);
	free(c->dir);
	free(c);
}

const struct moem_model_config *moem_ckpt_config(const struct moem_ckpt *c)
{
	return &c->cfg;
}

const char *moem_ckpt_dir(const struct moem_ckpt *c)
{
	return c->dir;
}

const char *moem_ckpt_config_text(const struct moem_ckpt *c, size_t *len)
{
	*len = c->config_len;
	return c->config_text;
}

const char *moem_ckpt_synth_text(const struct moem_ckpt *c, size_t *len)
{
	*len = c->has_synth ? c->synth_len : 0;
	return c->has_synth ? c->synth_text : NULL;
}

int moem_ckpt_synth(const struct moem_ckpt *c, struct moem_synth_params *p)
{
	if (!c->has_synth)
		return -ENOENT;
	*p = c->synth;
	return 0;
}

uint32_t moem_ckpt_n_files(const struct moem_ckpt *c)
{
	return c->n_files;
}

uint64_t moem_ckpt_tensor_bytes(const struct moem_ckpt *c)
{
	return c->tensor_bytes;
}

size_t moem_ckpt_n_specs(const struct moem_ckpt *c)
{
	return c->n_specs;
}

const struct moem_tensor_spec *moem_ckpt_spec(const struct moem_ckpt *c, size_t i)
{
	return i < c->n_specs ? &c->specs[i] : NULL;
}

int moem_ckpt_find(const struct moem_ckpt *c, const char *name, const struct moem_st_file **f,
		   const struct moem_st_tensor **t)
{
	struct ckpt_entry *e = find_entry(c, name);

	if (!e)
		return moem_errf(ENOENT, "%s: no tensor %s", c->dir, name);
	if (f)
		*f = c->files[e->file];
	*t = e->t;
	return 0;
}
