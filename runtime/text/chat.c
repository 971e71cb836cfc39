// SPDX-License-Identifier: GPL-2.0-only
/* Chat templates (include/moem/chat.h) on the Jinja subset of jinja_*.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include <moem/chat.h>
#include <moem/error.h>
#include <moem/tokenizer.h>

#include "jinja_int.h"
#include "tok_int.h"

/* A render may use this much memory for values, and output this much. */
#define CHAT_ARENA_MAX (256u << 20)
#define CHAT_OUT_MAX   (64u << 20)

struct moem_chat_template {
	struct jtemplate t;
};

int moem_chat_parse(const char *src, size_t len, struct moem_chat_template **out)
{
	struct moem_chat_template *ct;
	struct jlexed lx;
	int ret;

	*out = NULL;
	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	ct->t.arena.limit = CHAT_ARENA_MAX;
	ret = moem_jinja_lex(&ct->t.arena, src, len, &lx);
	if (!ret)
		ret = moem_jinja_parse(&ct->t.arena, &lx, &ct->t.body, &ct->t.nbody);
	if (ret) {
		moem_chat_free(ct);
		return ret;
	}
	*out = ct;
	return 0;
}

int moem_chat_from_tokenizer(const struct moem_tokenizer *t, struct moem_chat_template **out)
{
	struct moem_tok_info info;

	moem_tok_info(t, &info);
	*out = NULL;
	if (!info.chat_template)
		return moem_errf(ENOENT, "the tokenizer has no chat_template "
					 "(tokenizer_config.json)");
	return moem_chat_parse(info.chat_template, strlen(info.chat_template), out);
}

void moem_chat_free(struct moem_chat_template *t)
{
	if (!t)
		return;
	moem_ja_free(&t->t.arena);
	free(t);
}

static int set_global(struct jarena *a, struct jdict *g, const char *name, struct jv v)
{
	return moem_jv_dict_set(a, g, name, strlen(name), v);
}

static int fn_global(struct jarena *a, struct jdict *g, const char *name, int id)
{
	struct jv v = {.t = JT_FN};

	v.fn.id = id;
	return set_global(a, g, name, v);
}

int moem_chat_render(const struct moem_chat_template *t, const struct moem_chat_args *args,
		     char **out, size_t *len)
{
	struct json_object *msgs = NULL, *extra = NULL;
	struct jarena a = {.limit = CHAT_ARENA_MAX};
	struct jbuf b = {.limit = CHAT_OUT_MAX};
	struct jscope scope = {0};
	struct jctx c = {.a = &a, .out = &b, .scope = &scope};
	struct jv v;
	int ret;

	*out = NULL;
	if (len)
		*len = 0;
	ret = moem_tok_json_parse(args->messages_json ? args->messages_json : "[]",
				  args->messages_json ? args->messages_len : 2, "messages", &msgs);
	if (!ret && !json_object_is_type(msgs, json_type_array))
		ret = moem_errf(EINVAL, "messages: not a JSON array");
	if (!ret && args->extra_json) {
		ret = moem_tok_json_parse(args->extra_json, args->extra_len, "template variables",
					  &extra);
		if (!ret && !json_object_is_type(extra, json_type_object))
			ret = moem_errf(EINVAL, "template variables: not a JSON object");
	}
	scope.vars = ret ? NULL : moem_jv_dict_new(&a);
	if (!ret && !scope.vars)
		ret = -ENOMEM;
	if (!ret)
		ret = fn_global(&a, scope.vars, "raise_exception", JF_RAISE);
	if (!ret)
		ret = fn_global(&a, scope.vars, "range", JF_RANGE);
	if (!ret)
		ret = fn_global(&a, scope.vars, "namespace", JF_NAMESPACE);
	if (!ret)
		ret = fn_global(&a, scope.vars, "strftime_now", JF_STRFTIME);
	c.now = args->now ? args->now : (int64_t)time(NULL);
	if (!ret && extra) {
		json_object_object_foreach(extra, k, x)
		{
			ret = moem_jv_from_json(&a, x, &v, 0);
			if (!ret)
				ret = set_global(&a, scope.vars, k, v);
			if (ret)
				break;
		}
	}
	if (!ret)
		ret = moem_jv_from_json(&a, msgs, &v, 0);
	if (!ret)
		ret = set_global(&a, scope.vars, "messages", v);
	if (!ret)
		ret = set_global(&a, scope.vars, "add_generation_prompt",
				 jv_bool(args->add_generation_prompt));
	if (!ret && args->bos_token)
		ret = set_global(&a, scope.vars, "bos_token",
				 jv_str(args->bos_token, strlen(args->bos_token)));
	if (!ret && args->eos_token)
		ret = set_global(&a, scope.vars, "eos_token",
				 jv_str(args->eos_token, strlen(args->eos_token)));
	if (!ret)
		ret = moem_jb_put(&b, "", 0);
	if (!ret) {
		ret = moem_jinja_run(&c, t->t.body, t->t.nbody);
		if (ret > 0)
			ret = moem_errf(EINVAL, "template: break or continue outside a loop");
	}
	if (ret == -ENOMEM && a.total + 65536 > a.limit)
		ret = moem_errf(E2BIG, "template: rendering needs more memory than moem allows");
	if (ret == -E2BIG && b.n + 65536 > b.limit)
		ret = moem_errf(E2BIG, "template: output larger than %u MiB", CHAT_OUT_MAX >> 20);
	json_object_put(msgs);
	json_object_put(extra);
	moem_ja_free(&a);
	if (ret) {
		free(b.p);
		return ret;
	}
	*out = b.p;
	if (len)
		*len = b.n;
	return 0;
}
