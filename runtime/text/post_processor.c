// SPDX-License-Identifier: GPL-2.0-only
/*
 * Post-processors (huggingface/tokenizers src/processors): what
 * add_special_tokens puts around one sequence. TemplateProcessing's
 * "single" template (BOS insertion as the file says), BertProcessing and
 * RobertaProcessing (cls + A + sep), ByteLevel (offsets only: no ids) and
 * Sequence. moem encodes single sequences; "pair" templates are not used.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>

#include "tok_int.h"

static int add_item(struct tok_post *p, bool special, const uint32_t *ids, size_t n)
{
	struct tok_post_item *v = realloc(p->single, (p->n_single + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	p->single = v;
	v[p->n_single] = (struct tok_post_item){.special = special};
	if (special) {
		v[p->n_single].ids = malloc((n ? n : 1) * sizeof(uint32_t));
		if (!v[p->n_single].ids)
			return -ENOMEM;
		memcpy(v[p->n_single].ids, ids, n * sizeof(uint32_t));
		v[p->n_single].n_ids = n;
	}
	p->n_single++;
	return 0;
}

static int load_template(struct tok_post *p, struct json_object *o)
{
	struct json_object *single, *specials;
	const char *what = "post-processor TemplateProcessing";
	int ret = 0;
	bool seq = false;

	if (!json_object_object_get_ex(o, "single", &single) ||
	    !json_object_is_type(single, json_type_array))
		return moem_errf(EINVAL, "%s: no \"single\" array", what);
	json_object_object_get_ex(o, "special_tokens", &specials);
	for (size_t i = 0; !ret && i < json_object_array_length(single); i++) {
		struct json_object *it = json_object_array_get_idx(single, i), *st, *sp, *ids;
		const char *name;

		if (json_object_object_get_ex(it, "Sequence", &st)) {
			if (seq)
				return moem_errf(EINVAL, "%s: \"single\" has two sequences", what);
			seq = true;
			ret = add_item(p, false, NULL, 0);
			continue;
		}
		if (!json_object_object_get_ex(it, "SpecialToken", &st))
			return moem_errf(EINVAL,
					 "%s: item %zu is neither SpecialToken nor Sequence", what,
					 i);
		ret = moem_tok_json_str(st, "id", true, what, &name, NULL);
		if (ret)
			return ret;
		if (!specials || !json_object_object_get_ex(specials, name, &sp) ||
		    !json_object_object_get_ex(sp, "ids", &ids) ||
		    !json_object_is_type(ids, json_type_array))
			return moem_errf(EINVAL, "%s: special token \"%.40s\" has no ids", what,
					 name);
		{
			size_t n = json_object_array_length(ids);
			uint32_t *v = calloc(n + 1, sizeof(*v));

			if (!v)
				return -ENOMEM;
			for (size_t k = 0; !ret && k < n; k++) {
				struct json_object *x = json_object_array_get_idx(ids, k);
				int64_t id = json_object_get_int64(x);

				if (!json_object_is_type(x, json_type_int) || id < 0 ||
				    id > UINT32_MAX)
					ret = moem_errf(EINVAL,
							"%s: special token \"%.40s\": bad id", what,
							name);
				else
					v[k] = (uint32_t)id;
			}
			if (!ret)
				ret = add_item(p, true, v, n);
			free(v);
		}
	}
	if (!ret && !seq)
		ret = moem_errf(EINVAL, "%s: \"single\" has no sequence", what);
	return ret;
}

/* cls/sep as ["[CLS]", 101]. */
static int load_pair(struct json_object *o, const char *key, const char *what, uint32_t *id)
{
	struct json_object *v, *x;
	int64_t i;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_array) ||
	    json_object_array_length(v) != 2)
		return moem_errf(EINVAL, "%s: no \"%s\" pair", what, key);
	x = json_object_array_get_idx(v, 1);
	i = json_object_get_int64(x);
	if (!json_object_is_type(x, json_type_int) || i < 0 || i > UINT32_MAX)
		return moem_errf(EINVAL, "%s: bad \"%s\" id", what, key);
	*id = (uint32_t)i;
	return 0;
}

int moem_tok_post_load(struct tok_post **out, struct json_object *o)
{
	struct tok_post *p;
	struct json_object *v;
	const char *type;
	int ret;

	*out = NULL;
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	ret = moem_tok_json_type(o, "post_processor", &type);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (!strcmp(type, "TemplateProcessing")) {
		p->kind = TOK_POST_TEMPLATE;
		ret = load_template(p, o);
	} else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
		uint32_t cls, sep;

		p->kind = TOK_POST_TEMPLATE;
		ret = load_pair(o, "cls", type, &cls);
		if (!ret)
			ret = load_pair(o, "sep", type, &sep);
		if (!ret)
			ret = add_item(p, true, &cls, 1);
		if (!ret)
			ret = add_item(p, false, NULL, 0);
		if (!ret)
			ret = add_item(p, true, &sep, 1);
	} else if (!strcmp(type, "ByteLevel")) {
		p->kind = TOK_POST_BYTELEVEL;
	} else if (!strcmp(type, "Sequence")) {
		p->kind = TOK_POST_SEQUENCE;
		if (!json_object_object_get_ex(o, "processors", &v) ||
		    !json_object_is_type(v, json_type_array)) {
			ret = moem_errf(EINVAL, "post-processor Sequence: no \"processors\" array");
		} else {
			size_t n = json_object_array_length(v);

			p->items = calloc(n + 1, sizeof(*p->items));
			if (!p->items)
				ret = -ENOMEM;
			for (size_t i = 0; !ret && i < n; i++) {
				ret = moem_tok_post_load(&p->items[i],
							 json_object_array_get_idx(v, i));
				if (!ret && p->items[i])
					p->n_items++;
				else if (!ret)
					ret = moem_errf(EINVAL,
							"post-processor Sequence: item %zu is null",
							i);
			}
		}
	} else {
		ret = moem_errf(ENOTSUP,
				"post-processor \"%s\" is not supported (moem reads "
				"TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, "
				"Sequence)",
				type);
	}
	if (ret) {
		moem_tok_post_free(p);
		return ret;
	}
	*out = p;
	return 0;
}

void moem_tok_post_free(struct tok_post *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_single; i++)
		free(p->single[i].ids);
	free(p->single);
	for (size_t i = 0; i < p->n_items; i++)
		moem_tok_post_free(p->items[i]);
	free(p->items);
	free(p);
}

int moem_tok_post_apply(const struct tok_post *p, struct moem_tok_ids *ids, size_t start)
{
	size_t n_seq, at;
	uint32_t *seq;
	int ret = 0;

	if (!p)
		return 0;
	if (p->kind == TOK_POST_SEQUENCE) {
		for (size_t i = 0; !ret && i < p->n_items; i++)
			ret = moem_tok_post_apply(p->items[i], ids, start);
		return ret;
	}
	if (p->kind != TOK_POST_TEMPLATE)
		return 0;
	n_seq = ids->n - start;
	seq = malloc((n_seq ? n_seq : 1) * sizeof(*seq));
	if (!seq)
		return -ENOMEM;
	/* An empty text has no id array yet: memcpy() from NULL is undefined. */
	if (n_seq)
		memcpy(seq, ids->ids + start, n_seq * sizeof(*seq));
	ids->n = start;
	for (size_t i = 0; !ret && i < p->n_single; i++) {
		const struct tok_post_item *it = &p->single[i];

		if (!it->special) {
			for (at = 0; !ret && at < n_seq; at++)
				ret = moem_tok_ids_push(ids, seq[at]);
			continue;
		}
		for (at = 0; !ret && at < it->n_ids; at++)
			ret = moem_tok_ids_push(ids, it->ids[at]);
	}
	free(seq);
	return ret;
}

size_t moem_tok_post_added(const struct tok_post *p)
{
	size_t n = 0;

	if (!p)
		return 0;
	for (size_t i = 0; i < p->n_items; i++)
		n += moem_tok_post_added(p->items[i]);
	for (size_t i = 0; i < p->n_single; i++)
		n += p->single[i].special ? p->single[i].n_ids : 0;
	return n;
}
