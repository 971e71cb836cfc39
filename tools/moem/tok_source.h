/* SPDX-License-Identifier: GPL-2.0-only */
/* Where the text commands get their tokenizer: --pack P or --tokenizer FILE|DIR. */
#ifndef MOEM_TOOL_TOK_SOURCE_H
#define MOEM_TOOL_TOK_SOURCE_H

#include <stddef.h>

struct moem_tokenizer;
struct moem_pack;

struct tok_source {
	const char *pack;      /* --pack */
	const char *tokenizer; /* --tokenizer */
	struct moem_pack *p;   /* open while the tokenizer is used */
	struct moem_tokenizer *tok;
};

/* Open the tokenizer; prints "moem <cmd>: ..." and returns 1 on failure. */
int tok_source_open(struct tok_source *s, const char *cmd);
void tok_source_close(struct tok_source *s);

/*
 * Read all of a file (or stdin for "-") into a malloc'ed NUL-terminated
 * buffer; refused past TOK_READ_MAX (an endless input stops there).
 */
#define TOK_READ_MAX (1ul << 30)
int tok_read_all(const char *path, char **buf, size_t *len);

#endif /* MOEM_TOOL_TOK_SOURCE_H */
