// SPDX-License-Identifier: GPL-2.0-only
/* The tokenizer the text commands use (tok_source.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/tokenizer.h>
#include <moem/util.h>

#include "cmd.h"
#include "tok_source.h"

int tok_source_open(struct tok_source *s, const char *cmd)
{
	int ret;

	if (!!s->pack == !!s->tokenizer) {
		fprintf(stderr, "moem %s: give one of --pack PACK or --tokenizer FILE\n", cmd);
		return 1;
	}
	if (s->tokenizer) {
		ret = moem_tok_load_path(&s->tok, s->tokenizer);
		return ret ? moem_tool_fail(cmd, ret, NULL) : 0;
	}
	ret = moem_pack_open(s->pack, &s->p);
	if (!ret)
		ret = moem_tok_load_pack(&s->tok, s->p);
	if (ret) {
		moem_pack_close(s->p);
		s->p = NULL;
		return moem_tool_fail(cmd, ret, NULL);
	}
	return 0;
}

void tok_source_close(struct tok_source *s)
{
	moem_tok_free(s->tok);
	moem_pack_close(s->p);
	s->tok = NULL;
	s->p = NULL;
}

int tok_read_all(const char *path, char **buf, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	int ret;

	*buf = NULL;
	*len = 0;
	if (!f)
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	ret = moem_read_whole(f, strcmp(path, "-") ? path : "standard input", TOK_READ_MAX, buf,
			      len);
	if (f != stdin)
		fclose(f);
	return ret;
}
