// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pack's TOKENIZER section (Documentation/pack-format.md): the
 * checkpoint's tokenizer files carried verbatim, so a pack alone is
 * enough to turn text into ids and back. Parsing the files is the text
 * layer's business (runtime/text); here they are only bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/pack.h>

#include "pack_fmt.h"
#include "pack_int.h"
#include "store_int.h"

/* The files copied, in this order; tokenizer.json is required for a section. */
static const char *const tok_files[] = {
	"tokenizer.json",
	"tokenizer_config.json",
	"generation_config.json",
	"special_tokens_map.json",
};

/* Largest tokenizer file carried (real tokenizer.json files are < 20 MiB). */
#define PACK_TOK_FILE_MAX (64ULL << 20)

const char *moem_store_tok_file(size_t i, uint64_t *max)
{
	if (max)
		*max = PACK_TOK_FILE_MAX;
	return i < MOEM_ARRAY_SIZE(tok_files) ? tok_files[i] : NULL;
}

int moem_pack_tok_build(const char *dir, void **out, size_t *len)
{
	char *buf[MOEM_ARRAY_SIZE(tok_files)] = {0};
	size_t blen[MOEM_ARRAY_SIZE(tok_files)] = {0};
	struct pack_tok_hdr h = {.magic = PACK_TOK_MAGIC, .version = PACK_TOK_VERSION};
	struct pack_tok_file e[MOEM_ARRAY_SIZE(tok_files)];
	uint64_t off;
	uint8_t *s = NULL;
	int ret = 0;

	*out = NULL;
	*len = 0;
	memset(e, 0, sizeof(e));
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(tok_files); i++) {
		char *path = moem_store_path_join(dir, tok_files[i]);

		if (!path) {
			ret = -ENOMEM;
			goto out;
		}
		if (access(path, F_OK) == 0)
			ret = moem_store_read_file(path, PACK_TOK_FILE_MAX, &buf[i], &blen[i]);
		free(path);
		if (ret)
			goto out;
		if (i == 0 && !buf[0])
			goto out; /* no tokenizer.json: no section */
	}
	off = sizeof(h) + MOEM_ARRAY_SIZE(tok_files) * sizeof(e[0]);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(tok_files); i++) {
		if (!buf[i])
			continue;
		strcpy(e[h.n_files].name, tok_files[i]);
		e[h.n_files].offset = off;
		e[h.n_files].size = blen[i];
		off = moem_align_up(off + blen[i], 8);
		h.n_files++;
	}
	s = calloc(1, (size_t)off);
	if (!s) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(s, &h, sizeof(h));
	for (uint32_t i = 0, k = 0; i < MOEM_ARRAY_SIZE(tok_files); i++) {
		if (!buf[i])
			continue;
		memcpy(s + sizeof(h) + k * sizeof(e[0]), &e[k], sizeof(e[0]));
		memcpy(s + e[k].offset, buf[i], blen[i]);
		k++;
	}
	*out = s;
	*len = (size_t)off;
out:
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(tok_files); i++)
		free(buf[i]);
	return ret;
}

int moem_pack_tok_parse(const void *data, uint64_t len, const char *path, struct pack_tok_view *v)
{
	const uint8_t *s = data;
	struct pack_tok_hdr h;
	uint64_t prev_end;
	bool have_tok = false;

	memset(v, 0, sizeof(*v));
	if (len < sizeof(h))
		return moem_errf(EINVAL, "%s: tokenizer section of %llu bytes is too short", path,
				 (unsigned long long)len);
	memcpy(&h, s, sizeof(h));
	if (memcmp(h.magic, PACK_TOK_MAGIC, sizeof(h.magic)))
		return moem_errf(EINVAL, "%s: tokenizer section has a bad magic", path);
	if (h.version != PACK_TOK_VERSION) {
		/* A newer layout: the pack stays usable, its tokenizer is not read. */
		v->version = h.version;
		return 0;
	}
	if (!h.n_files || h.n_files > PACK_TOK_MAX_FILES ||
	    len < sizeof(h) + (uint64_t)h.n_files * sizeof(struct pack_tok_file))
		return moem_errf(EINVAL, "%s: tokenizer section lists %u files", path, h.n_files);
	prev_end = sizeof(h) + (uint64_t)h.n_files * sizeof(struct pack_tok_file);
	for (uint32_t i = 0; i < h.n_files; i++) {
		struct pack_tok_file e;
		uint64_t end;

		memcpy(&e, s + sizeof(h) + i * sizeof(e), sizeof(e));
		if (!memchr(e.name, 0, sizeof(e.name)) || !e.name[0])
			return moem_errf(EINVAL, "%s: tokenizer file %u has a bad name", path, i);
		if (!moem_is_aligned(e.offset, 8) || e.offset < prev_end ||
		    moem_add_overflow(e.offset, e.size, &end) || end > len || e.size > SIZE_MAX)
			return moem_errf(EINVAL,
					 "%s: tokenizer file %.48s at [%llu, +%llu) is misplaced",
					 path, e.name, (unsigned long long)e.offset,
					 (unsigned long long)e.size);
		for (uint32_t k = 0; k < v->n; k++)
			if (!strcmp(v->name[k], (const char *)s + sizeof(h) + i * sizeof(e)))
				return moem_errf(EINVAL, "%s: tokenizer file %.48s appears twice",
						 path, e.name);
		prev_end = end;
		have_tok = have_tok || !strcmp(e.name, "tokenizer.json");
		/* Point into the section itself (it stays in memory while the pack is open). */
		v->name[v->n] = (const char *)s + sizeof(h) + i * sizeof(e);
		v->data[v->n] = (const char *)s + e.offset;
		v->len[v->n] = (size_t)e.size;
		v->n++;
	}
	if (!have_tok)
		return moem_errf(EINVAL, "%s: tokenizer section has no tokenizer.json", path);
	v->version = h.version;
	return 0;
}

int moem_pack_has_tokenizer(const struct moem_pack *p)
{
	if (!p->tok.version)
		return 0;
	if (p->tok.version != PACK_TOK_VERSION)
		return moem_errf(
			EPROTONOSUPPORT,
			"%s: tokenizer section version %u is newer than this moem reads (%u)",
			p->path, p->tok.version, PACK_TOK_VERSION);
	return 1;
}

const char *moem_pack_tokenizer_file(const struct moem_pack *p, const char *name, size_t *len)
{
	if (len)
		*len = 0;
	if (p->tok.version != PACK_TOK_VERSION)
		return NULL;
	for (uint32_t i = 0; i < p->tok.n; i++)
		if (!strcmp(p->tok.name[i], name)) {
			if (len)
				*len = p->tok.len[i];
			return p->tok.data[i];
		}
	return NULL;
}
