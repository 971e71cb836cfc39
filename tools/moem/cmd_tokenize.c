// SPDX-License-Identifier: GPL-2.0-only
/* moem tokenize: text -> token ids with the pack's (or a file's) tokenizer. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/tokenizer.h>

#include "cmd.h"
#include "tok_source.h"

static void tokenize_usage(FILE *f)
{
	fprintf(f,
		"usage: moem tokenize (--pack PACK | --tokenizer FILE|DIR) [--json] [--lines]\n"
		"                     [--jsonl] [--no-special] [--split-special] [--file F] "
		"[TEXT...]\n"
		"Turn text into token ids. The text is TEXT (words joined by spaces), the file F\n"
		"('-' for standard input), or standard input. It must be UTF-8.\n"
		"  --json           {\"ids\": [...], \"tokens\": [...]} (one object per line with "
		"--lines)\n"
		"  --lines          encode each line on its own (without its newline)\n"
		"  --jsonl          each line is a JSON string to encode; prints a JSON array of "
		"ids\n"
		"                   per line (or an object with --json)\n"
		"  --no-special     no BOS/EOS from the post-processor (add_special_tokens=False)\n"
		"  --split-special  special tokens written in the text are plain text\n");
}

static int emit(const struct moem_tokenizer *t, const struct moem_tok_ids *ids, int json, int jsonl)
{
	if (!json && jsonl) {
		putchar('[');
		for (size_t i = 0; i < ids->n; i++)
			printf(i ? ",%u" : "%u", ids->ids[i]);
		puts("]");
		return 0;
	}
	if (!json) {
		for (size_t i = 0; i < ids->n; i++)
			printf(i ? " %u" : "%u", ids->ids[i]);
		putchar('\n');
		return 0;
	}
	{
		struct json_object *o = json_object_new_object(), *a = json_object_new_array();
		struct json_object *tk = json_object_new_array();

		for (size_t i = 0; i < ids->n; i++) {
			size_t len;
			const char *s = moem_tok_id_to_token(t, ids->ids[i], &len);

			json_object_array_add(a, json_object_new_int64(ids->ids[i]));
			json_object_array_add(tk, json_object_new_string_len(s ? s : "", (int)len));
		}
		json_object_object_add(o, "ids", a);
		json_object_object_add(o, "tokens", tk);
		json_object_object_add(o, "count", json_object_new_int64((int64_t)ids->n));
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	}
	return 0;
}

/* A line holding one JSON string: decode it, encode the string. */
static int encode_jsonl(const struct moem_tokenizer *t, const char *line, size_t n, unsigned flags,
			struct moem_tok_ids *ids)
{
	struct json_tokener *tk = json_tokener_new();
	struct json_object *o;
	int ret;

	if (!tk)
		return -ENOMEM;
	json_tokener_set_flags(tk, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tk, line, (int)n);
	if (!o && json_tokener_get_error(tk) == json_tokener_continue)
		o = json_tokener_parse_ex(tk, "", 1);
	if (!o || !json_object_is_type(o, json_type_string))
		ret = moem_errf(EINVAL, "not a JSON string");
	else
		ret = moem_tok_encode(t, json_object_get_string(o),
				      (size_t)json_object_get_string_len(o), flags, ids);
	json_object_put(o);
	json_tokener_free(tk);
	return ret;
}

static int cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pack", required_argument, NULL, 'p'},
		{"tokenizer", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"lines", no_argument, NULL, 'l'},
		{"jsonl", no_argument, NULL, 'J'},
		{"no-special", no_argument, NULL, 'n'},
		{"split-special", no_argument, NULL, 's'},
		{"file", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct tok_source src = {0};
	struct moem_tok_ids ids = {0};
	const char *file = NULL;
	unsigned flags = MOEM_TOK_ADD_SPECIAL;
	int json = 0, lines = 0, jsonl = 0, c, ret, rc = 0;
	char *text = NULL;
	size_t len = 0;

	while ((c = getopt_long(argc, argv, "p:t:jlJnsf:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			src.pack = optarg;
			break;
		case 't':
			src.tokenizer = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'l':
			lines = 1;
			break;
		case 'J':
			lines = jsonl = 1;
			break;
		case 'n':
			flags &= ~MOEM_TOK_ADD_SPECIAL;
			break;
		case 's':
			flags |= MOEM_TOK_SPLIT_SPECIAL;
			break;
		case 'f':
			file = optarg;
			break;
		case 'h':
			tokenize_usage(stdout);
			return 0;
		default:
			tokenize_usage(stderr);
			return 2;
		}
	}
	if (file && optind < argc) {
		fprintf(stderr, "moem tokenize: give TEXT or --file, not both\n");
		return 2;
	}
	if (optind < argc) {
		for (int i = optind; i < argc; i++)
			len += strlen(argv[i]) + 1;
		text = calloc(1, len + 1);
		if (!text)
			return moem_tool_fail("tokenize", -ENOMEM, NULL);
		for (int i = optind; i < argc; i++) {
			if (i > optind)
				strcat(text, " ");
			strcat(text, argv[i]);
		}
		len = strlen(text);
	} else {
		ret = tok_read_all(file ? file : "-", &text, &len);
		if (ret)
			return moem_tool_fail("tokenize", ret, NULL);
	}
	if (tok_source_open(&src, "tokenize")) {
		free(text);
		return 1;
	}
	if (!lines) {
		ret = moem_tok_encode(src.tok, text, len, flags, &ids);
		if (ret)
			rc = moem_tool_fail("tokenize", ret, NULL);
		else
			emit(src.tok, &ids, json, 0);
	} else {
		size_t at = 0, line = 1;

		while (at < len && !rc) {
			const char *nl = memchr(text + at, '\n', len - at);
			size_t n = nl ? (size_t)(nl - (text + at)) : len - at;

			ids.n = 0;
			if (jsonl)
				ret = encode_jsonl(src.tok, text + at, n, flags, &ids);
			else
				ret = moem_tok_encode(src.tok, text + at, n, flags, &ids);
			if (ret) {
				fprintf(stderr, "moem tokenize: line %zu: %s\n", line,
					moem_strerror(ret));
				rc = 1;
				break;
			}
			emit(src.tok, &ids, json, jsonl);
			at += n + (nl != NULL);
			line++;
		}
	}
	if (fflush(stdout) && !rc) {
		fprintf(stderr, "moem tokenize: writing the output: %s\n", strerror(errno));
		rc = 1;
	}
	moem_tok_ids_free(&ids);
	tok_source_close(&src);
	free(text);
	return rc;
}

MOEM_CMD(cmd_tokenize_def, "tokenize", "text to token ids with a pack's tokenizer", cmd_tokenize);
