// SPDX-License-Identifier: GPL-2.0-only
/*
 * tokenizer.json (+ tokenizer_config.json, generation_config.json) into a
 * moem_tokenizer: each stage's "type" maps to one unit (normalizer.c,
 * pre_tokenizer.c, bpe.c, post_processor.c, decoder.c). Unknown types are
 * refused with a message naming them, never skipped: a tokenizer that
 * loads encodes as the reference does.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/pack.h>

#include "tok_int.h"

/* Side files (tokenizer_config.json carries the chat template) stay small. */
#define TOK_SIDE_MAX (16u << 20)

const char *moem_tok_kind_name(enum moem_tok_kind k)
{
	switch (k) {
	case MOEM_TOK_BYTE_BPE:
		return "byte-level BPE";
	case MOEM_TOK_SP_BPE:
		return "SentencePiece BPE";
	case MOEM_TOK_BPE:
		return "BPE";
	}
	return "?";
}

static bool pre_has(const struct tok_pretok *p, enum tok_pretok_kind k)
{
	if (!p)
		return false;
	for (size_t i = 0; i < p->n_items; i++)
		if (pre_has(p->items[i], k))
			return true;
	return p->kind == k;
}

static bool dec_has(const struct tok_dec *d, enum tok_dec_kind k)
{
	if (!d)
		return false;
	for (size_t i = 0; i < d->n_items; i++)
		if (dec_has(d->items[i], k))
			return true;
	return d->kind == k;
}

/* A role token of tokenizer_config.json: a string or {"content": ...}; NULL if null/absent. */
static int cfg_token(struct json_object *cfg, const char *key, const char **s)
{
	struct json_object *v, *c;

	*s = NULL;
	if (!cfg || !json_object_object_get_ex(cfg, key, &v) || !v)
		return 0;
	if (json_object_is_type(v, json_type_string)) {
		*s = json_object_get_string(v);
		return 0;
	}
	if (json_object_is_type(v, json_type_object) &&
	    json_object_object_get_ex(v, "content", &c) &&
	    json_object_is_type(c, json_type_string)) {
		*s = json_object_get_string(c);
		return 0;
	}
	return moem_errf(EINVAL, "tokenizer_config.json: \"%s\" is not a token", key);
}

static int64_t find_id(const struct moem_tokenizer *t, const char *s)
{
	return s ? moem_tok_token_to_id(t, s, strlen(s)) : -1;
}

/* chat_template: a string, or a list of {"name", "template"} where "default" is used. */
static int cfg_template(struct moem_tokenizer *t, struct json_object *cfg)
{
	struct json_object *v;
	const char *s = NULL;

	if (!cfg || !json_object_object_get_ex(cfg, "chat_template", &v) || !v ||
	    json_object_is_type(v, json_type_null))
		return 0;
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
	} else if (json_object_is_type(v, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			struct json_object *e = json_object_array_get_idx(v, i), *n, *tp;

			if (json_object_object_get_ex(e, "name", &n) &&
			    json_object_object_get_ex(e, "template", &tp) &&
			    json_object_is_type(tp, json_type_string) &&
			    !strcmp(json_object_get_string(n), "default"))
				s = json_object_get_string(tp);
		}
		if (!s)
			return moem_errf(EINVAL, "tokenizer_config.json: chat_template list has no "
						 "\"default\"");
	} else {
		return moem_errf(EINVAL, "tokenizer_config.json: chat_template is not a string");
	}
	t->chat_template = strdup(s);
	return t->chat_template ? 0 : -ENOMEM;
}

static int load_config(struct moem_tokenizer *t, struct json_object *cfg)
{
	const char *bos, *eos, *pad, *unk;
	struct json_object *v;
	int ret;

	ret = cfg_token(cfg, "bos_token", &bos);
	if (!ret)
		ret = cfg_token(cfg, "eos_token", &eos);
	if (!ret)
		ret = cfg_token(cfg, "pad_token", &pad);
	if (!ret)
		ret = cfg_token(cfg, "unk_token", &unk);
	if (ret)
		return ret;
	t->bos_id = find_id(t, bos);
	t->eos_id = find_id(t, eos);
	t->pad_id = find_id(t, pad);
	t->unk_id = find_id(t, unk);
	if ((bos && t->bos_id < 0) || (eos && t->eos_id < 0))
		return moem_errf(EINVAL,
				 "tokenizer_config.json: bos/eos token \"%.40s\" is not in "
				 "the vocabulary",
				 bos && t->bos_id < 0 ? bos : eos);
	if (bos && !(t->bos_str = strdup(bos)))
		return -ENOMEM;
	if (eos && !(t->eos_str = strdup(eos)))
		return -ENOMEM;
	if (cfg && json_object_object_get_ex(cfg, "add_bos_token", &v)) {
		ret = moem_tok_json_bool(cfg, "add_bos_token", false, "tokenizer_config.json",
					 &t->add_bos);
		t->cfg_add_bos_set = true;
	}
	if (!ret && cfg && json_object_object_get_ex(cfg, "add_eos_token", &v)) {
		ret = moem_tok_json_bool(cfg, "add_eos_token", false, "tokenizer_config.json",
					 &t->add_eos);
		t->cfg_add_eos_set = true;
	}
	if (!ret)
		ret = cfg_template(t, cfg);
	if (!ret && ((t->add_bos && t->bos_id < 0) || (t->add_eos && t->eos_id < 0)))
		ret = moem_errf(EINVAL,
				"tokenizer_config.json: add_bos/eos_token without the token");
	return ret;
}

static int load_generation(struct moem_tokenizer *t, struct json_object *gen)
{
	struct json_object *v;
	size_t n;

	if (!gen || !json_object_object_get_ex(gen, "eos_token_id", &v) || !v ||
	    json_object_is_type(v, json_type_null))
		return 0;
	n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 1;
	t->stop_ids = calloc(n + 1, sizeof(*t->stop_ids));
	if (!t->stop_ids)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_is_type(v, json_type_array)
						? json_object_array_get_idx(v, i)
						: v;
		int64_t id = json_object_get_int64(e);

		if (!json_object_is_type(e, json_type_int) || id < 0 || id >= t->vocab_size)
			return moem_errf(EINVAL, "generation_config.json: eos_token_id is not a "
						 "token id");
		t->stop_ids[t->n_stop_ids++] = (uint32_t)id;
	}
	return 0;
}

static int finish(struct moem_tokenizer *t, struct tok_ctx *c)
{
	uint32_t vs = t->bpe.n_ids;
	int ret;

	for (size_t i = 0; i < t->added.n; i++) {
		const struct tok_added *a = &t->added.v[i];

		if (a->id >= vs)
			vs = a->id + 1;
		t->n_special += a->special;
		/* An added token with a model id must be that model token. */
		if (a->id < t->bpe.n_ids && t->bpe.tok[a->id] &&
		    (t->bpe.tok_len[a->id] != a->len ||
		     memcmp(t->bpe.tok[a->id], a->content, a->len)))
			return moem_errf(
				EINVAL,
				"added token \"%.40s\" has id %u, which the model gives to "
				"\"%.40s\"",
				a->content, a->id, t->bpe.tok[a->id]);
	}
	t->vocab_size = vs;
	t->added_of = malloc((size_t)vs * sizeof(*t->added_of));
	if (!t->added_of)
		return -ENOMEM;
	memset(t->added_of, 0xff, (size_t)vs * sizeof(*t->added_of));
	for (size_t i = 0; i < t->added.n; i++) {
		if (t->added_of[t->added.v[i].id] >= 0)
			return moem_errf(EINVAL, "added tokens \"%.40s\" and \"%.40s\" share id %u",
					 t->added.v[t->added_of[t->added.v[i].id]].content,
					 t->added.v[i].content, t->added.v[i].id);
		t->added_of[t->added.v[i].id] = (int32_t)i;
	}
	ret = moem_tok_added_build(&t->added, t->norm, c);
	if (ret)
		return ret;
	if (pre_has(t->pre, TOK_PRE_BYTELEVEL) || dec_has(t->dec, TOK_DEC_BYTELEVEL))
		t->kind = MOEM_TOK_BYTE_BPE;
	else if (t->bpe.byte_fallback || pre_has(t->pre, TOK_PRE_METASPACE) ||
		 dec_has(t->dec, TOK_DEC_METASPACE) || dec_has(t->dec, TOK_DEC_BYTEFALLBACK))
		t->kind = MOEM_TOK_SP_BPE;
	else
		t->kind = MOEM_TOK_BPE;
	return 0;
}

static int load_stages(struct moem_tokenizer *t, struct json_object *root)
{
	struct json_object *v = NULL;
	int ret;

	if (!json_object_is_type(root, json_type_object))
		return moem_errf(EINVAL, "tokenizer.json is not a JSON object");
	json_object_object_get_ex(root, "model", &v);
	ret = moem_tok_bpe_load(&t->bpe, v);
	if (ret)
		return ret;
	v = NULL;
	json_object_object_get_ex(root, "added_tokens", &v);
	ret = moem_tok_added_load(&t->added, v);
	if (ret)
		return ret;
	v = NULL;
	json_object_object_get_ex(root, "normalizer", &v);
	ret = moem_tok_norm_load(&t->norm, v);
	if (ret)
		return ret;
	v = NULL;
	json_object_object_get_ex(root, "pre_tokenizer", &v);
	ret = moem_tok_pretok_load(&t->pre, v);
	if (ret)
		return ret;
	v = NULL;
	json_object_object_get_ex(root, "post_processor", &v);
	ret = moem_tok_post_load(&t->post, v);
	if (ret)
		return ret;
	v = NULL;
	json_object_object_get_ex(root, "decoder", &v);
	return moem_tok_dec_load(&t->dec, v);
}

int moem_tok_load(struct moem_tokenizer **out, const struct moem_tok_files *f)
{
	struct json_object *root = NULL, *cfg = NULL, *gen = NULL;
	struct moem_tokenizer *t;
	struct tok_ctx c;
	int ret;

	*out = NULL;
	if (!f->tokenizer_json)
		return moem_errf(EINVAL, "no tokenizer.json");
	if ((f->config_json && f->config_json_len > TOK_SIDE_MAX) ||
	    (f->generation_json && f->generation_json_len > TOK_SIDE_MAX))
		return moem_errf(EFBIG, "tokenizer side file larger than %u MiB",
				 TOK_SIDE_MAX >> 20);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
	ret = moem_tok_ctx_init(&c);
	if (ret) {
		free(t);
		return ret;
	}
	ret = moem_tok_json_parse(f->tokenizer_json, f->tokenizer_json_len, "tokenizer.json",
				  &root);
	if (!ret)
		ret = load_stages(t, root);
	json_object_put(root);
	if (!ret)
		ret = finish(t, &c);
	if (!ret && f->config_json)
		ret = moem_tok_json_parse(f->config_json, f->config_json_len,
					  "tokenizer_config.json", &cfg);
	if (!ret && cfg && !json_object_is_type(cfg, json_type_object))
		ret = moem_errf(EINVAL, "tokenizer_config.json is not a JSON object");
	if (!ret)
		ret = load_config(t, cfg);
	json_object_put(cfg);
	if (!ret && f->generation_json)
		ret = moem_tok_json_parse(f->generation_json, f->generation_json_len,
					  "generation_config.json", &gen);
	if (!ret)
		ret = load_generation(t, gen);
	json_object_put(gen);
	moem_tok_ctx_free(&c);
	if (ret) {
		moem_tok_free(t);
		return ret;
	}
	*out = t;
	return 0;
}

void moem_tok_free(struct moem_tokenizer *t)
{
	if (!t)
		return;
	moem_tok_norm_free(t->norm);
	moem_tok_pretok_free(t->pre);
	moem_tok_bpe_free(&t->bpe);
	moem_tok_added_free(&t->added);
	moem_tok_post_free(t->post);
	moem_tok_dec_free(t->dec);
	free(t->added_of);
	free(t->chat_template);
	free(t->bos_str);
	free(t->eos_str);
	free(t->stop_ids);
	free(t);
}

/* Read a whole file (at most max bytes); -ENOENT quietly if it is absent and optional. */
static int read_file(const char *path, size_t max, bool optional, char **buf, size_t *len)
{
	struct stat st;
	size_t got = 0;
	int fd, ret = 0;

	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (optional && errno == ENOENT)
			return 0;
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		ret = moem_errf(EINVAL, "%s: not a regular file", path);
		goto out_close;
	}
	if ((uint64_t)st.st_size > max) {
		ret = moem_errf(EFBIG, "%s: %lld bytes is more than moem reads", path,
				(long long)st.st_size);
		goto out_close;
	}
	*buf = malloc((size_t)st.st_size + 1);
	if (!*buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = moem_errf(r < 0 ? errno : EIO, "%s: short read", path);
			free(*buf);
			*buf = NULL;
			goto out_close;
		}
		got += (size_t)r;
	}
	(*buf)[got] = 0;
	*len = got;
out_close:
	close(fd);
	return ret;
}

int moem_tok_load_path(struct moem_tokenizer **out, const char *path)
{
	char *dir = NULL, *tj = NULL, *cj = NULL, *gj = NULL, *p = NULL;
	struct moem_tok_files f = {0};
	struct stat st;
	int ret;

	*out = NULL;
	if (stat(path, &st))
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		dir = strdup(path);
	} else {
		const char *slash = strrchr(path, '/');

		dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup(".");
	}
	if (!dir)
		return -ENOMEM;
	ret = asprintf(&p, "%s/tokenizer.json", dir) < 0 ? -ENOMEM : 0;
	if (!ret)
		ret = read_file(S_ISDIR(st.st_mode) ? p : path, 1ULL << 28, false, &tj,
				&f.tokenizer_json_len);
	free(p);
	p = NULL;
	if (!ret)
		ret = asprintf(&p, "%s/tokenizer_config.json", dir) < 0 ? -ENOMEM : 0;
	if (!ret)
		ret = read_file(p, TOK_SIDE_MAX, true, &cj, &f.config_json_len);
	free(p);
	p = NULL;
	if (!ret)
		ret = asprintf(&p, "%s/generation_config.json", dir) < 0 ? -ENOMEM : 0;
	if (!ret)
		ret = read_file(p, TOK_SIDE_MAX, true, &gj, &f.generation_json_len);
	free(p);
	if (!ret) {
		f.tokenizer_json = tj;
		f.config_json = cj;
		f.generation_json = gj;
		ret = moem_tok_load(out, &f);
		if (ret)
			moem_err_prefix(-ret, "%s", path);
	}
	free(tj);
	free(cj);
	free(gj);
	free(dir);
	return ret;
}

int moem_tok_load_pack(struct moem_tokenizer **out, const struct moem_pack *pk)
{
	struct moem_tok_files f = {0};
	int ret;

	*out = NULL;
	ret = moem_pack_has_tokenizer(pk);
	if (ret < 0)
		return ret;
	f.tokenizer_json = moem_pack_tokenizer_file(pk, "tokenizer.json", &f.tokenizer_json_len);
	if (!f.tokenizer_json)
		return moem_errf(ENOENT,
				 "%s: the pack has no tokenizer (pack it with moem pack "
				 "from a checkpoint that has tokenizer.json)",
				 moem_pack_path(pk));
	f.config_json = moem_pack_tokenizer_file(pk, "tokenizer_config.json", &f.config_json_len);
	f.generation_json =
		moem_pack_tokenizer_file(pk, "generation_config.json", &f.generation_json_len);
	ret = moem_tok_load(out, &f);
	if (ret)
		moem_err_prefix(-ret, "%s", moem_pack_path(pk));
	return ret;
}
