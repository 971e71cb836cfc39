// SPDX-License-Identifier: GPL-2.0-only
/* Safetensors writer (safetensors.h): plan the header, then fill the data. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/safetensors.h>

#include "store_int.h"

struct st_wtensor {
	uint64_t off, bytes; /* off relative to the data area until layout */
};

struct moem_st_writer {
	struct json_object *root, *meta;
	struct st_wtensor *t;
	uint32_t n, cap;
	uint64_t data_len;
	char *header; /* 8-byte length + padded JSON, after layout */
	uint64_t header_len;
};

int moem_st_writer_create(struct moem_st_writer **out)
{
	struct moem_st_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->root = json_object_new_object();
	w->meta = json_object_new_object();
	if (!w->root || !w->meta) {
		json_object_put(w->meta);
		moem_st_writer_destroy(w);
		return -ENOMEM;
	}
	json_object_object_add(w->meta, "format", json_object_new_string("pt"));
	json_object_object_add(w->root, "__metadata__", w->meta);
	*out = w;
	return 0;
}

int moem_st_writer_meta(struct moem_st_writer *w, const char *key, const char *value)
{
	if (w->header)
		return moem_errf(EBUSY, "safetensors writer: header already laid out");
	json_object_object_add(w->meta, key, json_object_new_string(value));
	return 0;
}

int moem_st_writer_add(struct moem_st_writer *w, const char *name, enum moem_dtype dtype,
		       uint32_t ndim, const uint64_t *shape, uint32_t *idx)
{
	struct json_object *e, *sh, *offs;
	uint64_t n = 1, bytes;

	if (w->header)
		return moem_errf(EBUSY, "safetensors writer: header already laid out");
	if (ndim > MOEM_ST_MAX_DIMS || (unsigned int)dtype >= MOEM_DTYPE_NR)
		return moem_errf(EINVAL, "tensor %s: bad dtype or rank", name);
	if (json_object_object_get_ex(w->root, name, NULL))
		return moem_errf(EEXIST, "tensor %s added twice", name);
	for (uint32_t i = 0; i < ndim; i++)
		if (moem_mul_overflow(n, shape[i], &n))
			return moem_errf(EOVERFLOW, "tensor %s: shape overflows", name);
	if (moem_mul_overflow(n, moem_dtype_size(dtype), &bytes) ||
	    moem_add_overflow(w->data_len, bytes, &n))
		return moem_errf(EOVERFLOW, "tensor %s: size overflows", name);
	if (w->n == w->cap) {
		uint32_t cap = w->cap ? w->cap * 2 : 256;
		struct st_wtensor *t = realloc(w->t, sizeof(*t) * cap);

		if (!t)
			return -ENOMEM;
		w->t = t;
		w->cap = cap;
	}
	e = json_object_new_object();
	sh = json_object_new_array();
	offs = json_object_new_array();
	if (!e || !sh || !offs) {
		json_object_put(e);
		json_object_put(sh);
		json_object_put(offs);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ndim; i++)
		json_object_array_add(sh, json_object_new_uint64(shape[i]));
	json_object_array_add(offs, json_object_new_uint64(w->data_len));
	json_object_array_add(offs, json_object_new_uint64(w->data_len + bytes));
	json_object_object_add(e, "dtype", json_object_new_string(moem_st_dtype_name(dtype)));
	json_object_object_add(e, "shape", sh);
	json_object_object_add(e, "data_offsets", offs);
	json_object_object_add(w->root, name, e);
	w->t[w->n].off = w->data_len;
	w->t[w->n].bytes = bytes;
	w->data_len += bytes;
	if (idx)
		*idx = w->n;
	w->n++;
	return 0;
}

int moem_st_writer_layout(struct moem_st_writer *w, uint64_t *file_size)
{
	const char *js;
	size_t jl, padded;

	if (w->header)
		return moem_errf(EBUSY, "safetensors writer: header already laid out");
	js = json_object_to_json_string_ext(w->root, JSON_C_TO_STRING_PLAIN |
							     JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!js)
		return -ENOMEM;
	jl = strlen(js);
	padded = (size_t)moem_align_up(jl, 8);
	if (padded > MOEM_ST_MAX_HEADER)
		return moem_errf(EFBIG, "safetensors header of %zu bytes is too large", padded);
	w->header = malloc(8 + padded);
	if (!w->header)
		return -ENOMEM;
	for (int i = 0; i < 8; i++)
		w->header[i] = (char)((uint64_t)padded >> (8 * i));
	memcpy(w->header + 8, js, jl);
	memset(w->header + 8 + jl, ' ', padded - jl);
	w->header_len = 8 + padded;
	for (uint32_t i = 0; i < w->n; i++)
		w->t[i].off += w->header_len;
	*file_size = w->header_len + w->data_len;
	return 0;
}

void moem_st_writer_offset(const struct moem_st_writer *w, uint32_t idx, uint64_t *off,
			   uint64_t *bytes)
{
	*off = w->t[idx].off;
	*bytes = w->t[idx].bytes;
}

int moem_st_writer_write_header(const struct moem_st_writer *w, int fd, const char *what)
{
	if (!w->header)
		return moem_errf(EINVAL, "safetensors writer: no layout yet");
	return moem_store_pwrite_all(fd, w->header, (size_t)w->header_len, 0, what);
}

void moem_st_writer_destroy(struct moem_st_writer *w)
{
	if (!w)
		return;
	json_object_put(w->root);
	free(w->t);
	free(w->header);
	free(w);
}
