// SPDX-License-Identifier: GPL-2.0-only
/* moem detokenize: token ids -> text with the pack's (or a file's) tokenizer. */
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

static void detokenize_usage(FILE *f)
{
	fprintf(f,
		"usage: moem detokenize (--pack PACK | --tokenizer FILE|DIR) [--skip-special]\n"
		"                       [--stream] [--jsonl] [--file F] [ID...]\n"
		"Turn token ids (arguments, or whitespace-separated on standard input or in F)\n"
		"back into text.\n"
		"  --skip-special  leave special tokens out\n"
		"  --stream        decode one id at a time as a model produces them (the text is\n"
		"                  the same; it shows the streaming decoder at work)\n"
		"  --jsonl         each input line is a JSON array of ids; prints a JSON string "
		"per line\n");
}

static int parse_ids(const char *s, struct moem_tok_ids *ids)
{
	while (*s) {
		char *end;
		unsigned long long v;

		while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == ',')
			s++;
		if (!*s)
			break;
		errno = 0;
		v = strtoull(s, &end, 10);
		if (end == s || errno || v > UINT32_MAX || *s == '-')
			return moem_errf(EINVAL, "\"%.20s\" is not a token id", s);
		if (ids->n == ids->cap) {
			size_t cap = ids->cap ? ids->cap * 2 : 64;
			uint32_t *n = realloc(ids->ids, cap * sizeof(*n));

			if (!n)
				return -ENOMEM;
			ids->ids = n;
			ids->cap = cap;
		}
		ids->ids[ids->n++] = (uint32_t)v;
		s = end;
	}
	return 0;
}

static int decode_stream(const struct moem_tokenizer *t, const struct moem_tok_ids *ids,
			 unsigned flags)
{
	struct moem_tok_stream *st;
	const char *text;
	size_t len;
	int ret = moem_tok_stream_new(t, flags, &st);

	for (size_t i = 0; !ret && i < ids->n; i++) {
		ret = moem_tok_stream_push(st, ids->ids[i], &text, &len);
		if (!ret) {
			fwrite(text, 1, len, stdout);
			fflush(stdout);
		}
	}
	if (!ret)
		ret = moem_tok_stream_flush(st, &text, &len);
	if (!ret)
		fwrite(text, 1, len, stdout);
	moem_tok_stream_free(st);
	return ret;
}

/* The streamed pieces of ids, concatenated (what a client of the stream sees). */
static int stream_all(const struct moem_tokenizer *t, const struct moem_tok_ids *ids,
		      unsigned flags, char **text, size_t *len)
{
	struct moem_tok_stream *st;
	const char *piece;
	size_t n, cap = 64;
	char *b = malloc(cap);
	int ret = b ? moem_tok_stream_new(t, flags, &st) : -ENOMEM;

	*len = 0;
	for (size_t i = 0; !ret && i <= ids->n; i++) {
		ret = i < ids->n ? moem_tok_stream_push(st, ids->ids[i], &piece, &n)
				 : moem_tok_stream_flush(st, &piece, &n);
		while (!ret && *len + n + 1 > cap) {
			char *nb = realloc(b, cap * 2);

			if (!nb)
				ret = -ENOMEM;
			else
				b = nb, cap *= 2;
		}
		if (!ret) {
			memcpy(b + *len, piece, n);
			*len += n;
		}
	}
	if (b && !ret)
		moem_tok_stream_free(st);
	if (ret) {
		free(b);
		return ret;
	}
	b[*len] = 0;
	*text = b;
	return 0;
}

static int decode_jsonl(const struct moem_tokenizer *t, char *line, unsigned flags, int stream)
{
	struct moem_tok_ids ids = {0};
	struct json_object *o;
	char *text;
	size_t len;
	int ret;

	for (char *p = line; *p; p++)
		if (*p == '[' || *p == ']')
			*p = ' ';
	ret = parse_ids(line, &ids);
	if (!ret && stream)
		ret = stream_all(t, &ids, flags, &text, &len);
	else if (!ret)
		ret = moem_tok_decode(t, ids.ids, ids.n, flags, &text, &len);
	moem_tok_ids_free(&ids);
	if (ret)
		return ret;
	o = json_object_new_string_len(text, (int)len);
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	free(text);
	return 0;
}

static int cmd_detokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pack", required_argument, NULL, 'p'},
		{"tokenizer", required_argument, NULL, 't'},
		{"skip-special", no_argument, NULL, 's'},
		{"stream", no_argument, NULL, 'S'},
		{"jsonl", no_argument, NULL, 'J'},
		{"file", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct tok_source src = {0};
	struct moem_tok_ids ids = {0};
	const char *file = NULL;
	unsigned flags = 0;
	int stream = 0, jsonl = 0, c, ret = 0, rc = 0;
	char *in = NULL, *text;
	size_t len;

	while ((c = getopt_long(argc, argv, "p:t:sSJf:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			src.pack = optarg;
			break;
		case 't':
			src.tokenizer = optarg;
			break;
		case 's':
			flags |= MOEM_TOK_SKIP_SPECIAL;
			break;
		case 'S':
			stream = 1;
			break;
		case 'J':
			jsonl = 1;
			break;
		case 'f':
			file = optarg;
			break;
		case 'h':
			detokenize_usage(stdout);
			return 0;
		default:
			detokenize_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		for (int i = optind; !ret && i < argc; i++)
			ret = parse_ids(argv[i], &ids);
	} else {
		ret = tok_read_all(file ? file : "-", &in, &len);
		if (!ret && !jsonl)
			ret = parse_ids(in, &ids);
	}
	if (ret) {
		rc = moem_tool_fail("detokenize", ret, NULL);
		goto out;
	}
	if (tok_source_open(&src, "detokenize")) {
		rc = 1;
		goto out;
	}
	if (jsonl) {
		size_t line = 1;

		for (char *p = in, *nl; !rc && p && *p; p = nl ? nl + 1 : NULL, line++) {
			nl = strchr(p, '\n');
			if (nl)
				*nl = 0;
			ret = decode_jsonl(src.tok, p, flags, stream);
			if (ret) {
				fprintf(stderr, "moem detokenize: line %zu: %s\n", line,
					moem_strerror(ret));
				rc = 1;
			}
		}
	} else if (stream) {
		ret = decode_stream(src.tok, &ids, flags);
		if (ret)
			rc = moem_tool_fail("detokenize", ret, NULL);
	} else {
		ret = moem_tok_decode(src.tok, ids.ids, ids.n, flags, &text, &len);
		if (ret) {
			rc = moem_tool_fail("detokenize", ret, NULL);
		} else {
			fwrite(text, 1, len, stdout);
			free(text);
		}
	}
	if (fflush(stdout) && !rc) {
		fprintf(stderr, "moem detokenize: writing the output: %s\n", strerror(errno));
		rc = 1;
	}
	tok_source_close(&src);
out:
	moem_tok_ids_free(&ids);
	free(in);
	return rc;
}

MOEM_CMD(cmd_detokenize_def, "detokenize", "token ids to text with a pack's tokenizer",
	 cmd_detokenize);
