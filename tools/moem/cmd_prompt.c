// SPDX-License-Identifier: GPL-2.0-only
/* moem prompt: render a conversation with the model's chat template. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/chat.h>
#include <moem/error.h>
#include <moem/tokenizer.h>

#include "cmd.h"
#include "tok_source.h"

static void prompt_usage(FILE *f)
{
	fprintf(f,
		"usage: moem prompt (--pack PACK | --tokenizer FILE|DIR) [--template FILE]\n"
		"                   [--add-generation-prompt] [--vars JSON] [--cases FILE]\n"
		"                   [--now EPOCH] [MESSAGES.json]\n"
		"Render a conversation (a JSON array of {\"role\", \"content\"} messages, from "
		"the\n"
		"file or standard input) with the tokenizer's chat_template and print it.\n"
		"  --template FILE           use this Jinja template instead\n"
		"  --add-generation-prompt   end with the assistant's turn opening\n"
		"  --vars JSON               more template variables, e.g. "
		"'{\"enable_thinking\": false}'\n"
		"  --cases FILE              each line {\"messages\", "
		"\"add_generation_prompt\", \"vars\"};\n"
		"                            prints one JSON string per line ({\"error\": true}\n"
		"                            where the template raises)\n"
		"  --now EPOCH               the time strftime_now() formats, in seconds since\n"
		"                            1970 (local time zone; default: now)\n");
}

static int render_case(const struct moem_chat_template *ct, const struct moem_tokenizer *t,
		       const char *line, int64_t now)
{
	struct json_object *o = json_tokener_parse(line), *m, *g, *v;
	struct moem_chat_args a = {.now = now};
	char *out;
	size_t len;
	int ret;

	if (!o || !json_object_object_get_ex(o, "messages", &m)) {
		json_object_put(o);
		return moem_errf(EINVAL, "case is not {\"messages\": ...}");
	}
	a.messages_json = json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN);
	a.messages_len = strlen(a.messages_json);
	a.add_generation_prompt = json_object_object_get_ex(o, "add_generation_prompt", &g) &&
				  json_object_get_boolean(g);
	if (json_object_object_get_ex(o, "vars", &v)) {
		a.extra_json = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
		a.extra_len = strlen(a.extra_json);
	}
	a.bos_token = moem_tok_special_str(t, "bos_token");
	a.eos_token = moem_tok_special_str(t, "eos_token");
	ret = moem_chat_render(ct, &a, &out, &len);
	json_object_put(o);
	if (ret)
		return ret;
	o = json_object_new_string_len(out, (int)len);
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	free(out);
	return 0;
}

static int cmd_prompt(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pack", required_argument, NULL, 'p'},
		{"tokenizer", required_argument, NULL, 't'},
		{"template", required_argument, NULL, 'T'},
		{"add-generation-prompt", no_argument, NULL, 'g'},
		{"vars", required_argument, NULL, 'v'},
		{"cases", required_argument, NULL, 'c'},
		{"now", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct tok_source src = {0};
	struct moem_chat_template *ct = NULL;
	struct moem_chat_args a = {0};
	const char *tmpl = NULL, *cases = NULL;
	char *in = NULL, *tsrc = NULL, *out;
	size_t len, tlen;
	int c, ret, rc = 0;

	while ((c = getopt_long(argc, argv, "p:t:T:gv:c:n:h", opts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'n':
			errno = 0;
			a.now = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || a.now <= 0 ||
			    a.now > 253402300799LL) {
				fprintf(stderr,
					"moem prompt: --now: '%s' is not a time in seconds "
					"since 1970 (1 to 253402300799)\n",
					optarg);
				return 2;
			}
			break;
		case 'p':
			src.pack = optarg;
			break;
		case 't':
			src.tokenizer = optarg;
			break;
		case 'T':
			tmpl = optarg;
			break;
		case 'g':
			a.add_generation_prompt = true;
			break;
		case 'v':
			a.extra_json = optarg;
			a.extra_len = strlen(optarg);
			break;
		case 'c':
			cases = optarg;
			break;
		case 'h':
			prompt_usage(stdout);
			return 0;
		default:
			prompt_usage(stderr);
			return 2;
		}
	}
	if (tok_source_open(&src, "prompt"))
		return 1;
	if (tmpl) {
		ret = tok_read_all(tmpl, &tsrc, &tlen);
		if (!ret)
			ret = moem_chat_parse(tsrc, tlen, &ct);
	} else {
		ret = moem_chat_from_tokenizer(src.tok, &ct);
	}
	if (!ret)
		ret = tok_read_all(cases ? cases : optind < argc ? argv[optind] : "-", &in, &len);
	if (ret) {
		rc = moem_tool_fail("prompt", ret, NULL);
		goto out;
	}
	if (cases) {
		size_t line = 1;

		for (char *p = in, *nl; p && *p; p = nl ? nl + 1 : NULL, line++) {
			nl = strchr(p, '\n');
			if (nl)
				*nl = 0;
			ret = render_case(ct, src.tok, p, a.now);
			/*
			 * A template that raises (or does what moem refuses) answers
			 * that case with {"error": true}, as the reference renderer
			 * is made to, and the cases go on.
			 */
			if (ret == -EINVAL || ret == -E2BIG) {
				fprintf(stderr, "moem prompt: case %zu: %s\n", line,
					moem_strerror(ret));
				puts("{\"error\":true}");
			} else if (ret) {
				fprintf(stderr, "moem prompt: case %zu: %s\n", line,
					moem_strerror(ret));
				rc = 1;
				break;
			}
		}
		goto out;
	}
	a.messages_json = in;
	a.messages_len = len;
	a.bos_token = moem_tok_special_str(src.tok, "bos_token");
	a.eos_token = moem_tok_special_str(src.tok, "eos_token");
	ret = moem_chat_render(ct, &a, &out, &len);
	if (ret) {
		rc = moem_tool_fail("prompt", ret, NULL);
		goto out;
	}
	fwrite(out, 1, len, stdout);
	free(out);
out:
	moem_chat_free(ct);
	tok_source_close(&src);
	free(in);
	free(tsrc);
	return rc;
}

MOEM_CMD(cmd_prompt_def, "prompt", "render a conversation with the model's chat template",
	 cmd_prompt);
