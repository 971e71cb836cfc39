// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem generate: text in, text out. The prompt is encoded with the pack's
 * tokenizer (as transformers encodes a plain prompt), decoded on the full
 * decoder, and the text is written as it is produced: never half a UTF-8
 * character, never a stop string. --json instead prints one object with
 * the text, the token ids, timings and counters.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/util.h>

#include "cmd.h"
#include "gen_util.h"
#include "tok_source.h"

static void gen_usage(FILE *f)
{
	fprintf(f, "usage: moem generate --pack FILE (--prompt TEXT | --prompt-file FILE|-) "
		   "[options]\n"
		   "Continue TEXT with the model (full decode) and stream what it writes.\n"
		   "  --prompt TEXT            the prompt, encoded with the pack's tokenizer\n"
		   "  --prompt-file FILE       read it from FILE (- for standard input)\n"
		   "  --no-add-special         no BOS or other special tokens added to the prompt\n"
		   "                           (by default as transformers: the tokenizer's "
		   "post-processor,\n"
		   "                           and BOS where tokenizer_config.json asks for one)\n"
		   "  --show-prompt-ids        print the prompt's token ids on standard "
		   "error\n" MOEM_GEN_USAGE);
}

static int cmd_generate(int argc, char **argv)
{
	static const struct option own[] = {
		{"prompt", required_argument, NULL, 'p'},
		{"prompt-file", required_argument, NULL, 'f'},
		{"no-add-special", no_argument, NULL, 'n'},
		{"show-prompt-ids", no_argument, NULL, 'i'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct option opts[MOEM_GEN_N_OPTS + MOEM_ARRAY_SIZE(own)];
	struct moem_gen g;
	struct moem_gen_out o = {0};
	const char *prompt = NULL, *pfile = NULL;
	char *text = NULL;
	size_t len = 0;
	int32_t *ids = NULL;
	uint32_t n = 0;
	bool raw = false, show_ids = false;
	int c, idx, ret, rc = 1;

	moem_gen_init(&g);
	moem_gen_options(opts);
	memcpy(opts + MOEM_GEN_N_OPTS, own, sizeof(own));
	while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
		switch (c) {
		case 0:
			ret = moem_gen_set(&g, opts[idx].name, optarg ? optarg : "");
			if (ret) {
				moem_tool_fail("generate", ret, NULL);
				goto out;
			}
			break;
		case 'p':
			prompt = optarg;
			break;
		case 'f':
			pfile = optarg;
			break;
		case 'n':
			raw = true;
			break;
		case 'i':
			show_ids = true;
			break;
		case 'h':
			gen_usage(stdout);
			rc = 0;
			goto out;
		default:
			gen_usage(stderr);
			rc = 2;
			goto out;
		}
	}
	if (optind != argc || !g.r.ea.o.pack_path || !!prompt == !!pfile) {
		fprintf(stderr, "moem generate: %s\n",
			optind != argc	      ? "unexpected argument"
			: !g.r.ea.o.pack_path ? "--pack is required"
					      : "give one of --prompt TEXT or --prompt-file FILE");
		gen_usage(stderr);
		rc = 2;
		goto out;
	}
	if (pfile) {
		ret = tok_read_all(pfile, &text, &len);
		if (ret) {
			moem_tool_fail("generate", ret, NULL);
			goto out;
		}
	}
	ret = moem_gen_open(&g);
	if (!ret)
		ret = moem_gen_encode(&g, pfile ? text : prompt, pfile ? len : strlen(prompt), !raw,
				      &ids, &n);
	if (ret) {
		moem_tool_fail("generate", ret, NULL);
		goto out;
	}
	if (show_ids) {
		fprintf(stderr, "moem generate: prompt ids ");
		for (uint32_t i = 0; i < n; i++)
			fprintf(stderr, "%s%d", i ? "," : "", ids[i]);
		fprintf(stderr, "\n");
	}
	if (g.synthetic && !g.r.quiet && !g.r.json)
		fprintf(stderr,
			"moem generate: %s is a synthetic model (random weights): what "
			"it writes is gibberish\n",
			g.r.ea.o.pack_path);
	ret = moem_gen_run(&g, ids, n, g.r.json && !g.json_stream ? NULL : stdout, &o);
	if (ret) {
		if (!g.r.json && o.len)
			putchar('\n');
		moem_tool_fail("generate", ret, NULL);
		goto out;
	}
	if (g.r.json) {
		struct json_object *j = moem_gen_json(&g, &o);

		puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(j);
	} else {
		if (o.len && o.text[o.len - 1] != '\n')
			putchar('\n');
		if (!g.r.quiet)
			moem_gen_summary(&g, &o, "generate");
	}
	rc = fflush(stdout) ? 1 : 0;
out:
	moem_gen_out_free(&o);
	free(ids);
	free(text);
	moem_gen_free(&g);
	return rc;
}

MOEM_CMD(generate_cmd, "generate", "generate text from a prompt (full decode, streamed)",
	 cmd_generate);
