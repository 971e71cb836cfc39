// SPDX-License-Identifier: GPL-2.0-only
/*
 * Safetensors reader (safetensors.h). A header is validated completely
 * before anything is returned: every later read is bounded by what the
 * validated index says, so a hostile file can only produce an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/half.h>
#include <moem/safetensors.h>

#include "store_int.h"

#define ST_NAME_MAX   1024
#define ST_JSON_DEPTH 8

struct moem_st_file {
	char *path;
	int fd;
	uint64_t size;
	uint32_t n;
	struct moem_st_tensor *t; /* sorted by name */
	char *names;		  /* name arena */
	uint32_t n_meta;
	char **meta; /* key, value, key, value ... */
};

static const char *const st_dtypes[MOEM_DTYPE_NR] = {
	[MOEM_DTYPE_BF16] = "BF16",
	[MOEM_DTYPE_F16] = "F16",
	[MOEM_DTYPE_F32] = "F32",
};

const char *moem_st_dtype_name(enum moem_dtype d)
{
	return (unsigned int)d < MOEM_DTYPE_NR ? st_dtypes[d] : "?";
}

static int parse_dtype(const char *s, enum moem_dtype *d)
{
	for (int i = 0; i < MOEM_DTYPE_NR; i++) {
		if (!strcmp(s, st_dtypes[i])) {
			*d = (enum moem_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct moem_st_tensor *)a)->name,
		      ((const struct moem_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
	const struct moem_st_tensor *x = *(const struct moem_st_tensor *const *)a;
	const struct moem_st_tensor *y = *(const struct moem_st_tensor *const *)b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? -1 : 1;
	return 0;
}

static int parse_metadata(struct moem_st_file *f, struct json_object *m, const char *label)
{
	uint32_t i = 0;

	if (!json_object_is_type(m, json_type_object))
		return moem_errf(EINVAL, "%s: \"__metadata__\" is not an object", label);
	f->n_meta = (uint32_t)json_object_object_length(m);
	f->meta = calloc((size_t)f->n_meta * 2 + 1, sizeof(char *));
	if (!f->meta)
		return -ENOMEM;
	json_object_object_foreach(m, key, val)
	{
		if (!val || !json_object_is_type(val, json_type_string))
			return moem_errf(EINVAL, "%s: __metadata__ \"%s\" is not a string", label,
					 key);
		f->meta[2 * i] = strdup(key);
		f->meta[2 * i + 1] = strdup(json_object_get_string(val));
		if (!f->meta[2 * i] || !f->meta[2 * i + 1])
			return -ENOMEM;
		i++;
	}
	return 0;
}

/* Validate one tensor entry; data_len is the size of the data area. */
static int parse_tensor(struct moem_st_tensor *t, struct json_object *v, uint64_t data_off,
			uint64_t data_len, const char *label)
{
	struct json_object *dt = NULL, *shape = NULL, *offs = NULL;
	uint64_t begin, end, n = 1;
	size_t nd;

	if (!v || !json_object_is_type(v, json_type_object))
		return moem_errf(EINVAL, "%s: tensor %s: entry is not an object", label, t->name);
	json_object_object_foreach(v, key, val)
	{
		if (!strcmp(key, "dtype"))
			dt = val;
		else if (!strcmp(key, "shape"))
			shape = val;
		else if (!strcmp(key, "data_offsets"))
			offs = val;
		else
			return moem_errf(EINVAL, "%s: tensor %s: unexpected field \"%s\"", label,
					 t->name, key);
	}
	if (!dt || !json_object_is_type(dt, json_type_string))
		return moem_errf(EINVAL, "%s: tensor %s: missing string \"dtype\"", label, t->name);
	if (parse_dtype(json_object_get_string(dt), &t->dtype))
		return moem_errf(EINVAL,
				 "%s: tensor %s: dtype %.32s not supported (BF16, F16, F32)", label,
				 t->name, json_object_get_string(dt));
	if (!shape || !json_object_is_type(shape, json_type_array))
		return moem_errf(EINVAL, "%s: tensor %s: missing array \"shape\"", label, t->name);
	nd = json_object_array_length(shape);
	if (nd > MOEM_ST_MAX_DIMS)
		return moem_errf(EINVAL, "%s: tensor %s: %zu dimensions, at most %d", label,
				 t->name, nd, MOEM_ST_MAX_DIMS);
	t->ndim = (uint32_t)nd;
	for (size_t i = 0; i < nd; i++) {
		if (moem_store_json_as_u64(json_object_array_get_idx(shape, i), &t->shape[i]))
			return moem_errf(EINVAL, "%s: tensor %s: shape[%zu] is not a size", label,
					 t->name, i);
		if (moem_mul_overflow(n, t->shape[i], &n))
			return moem_errf(EINVAL, "%s: tensor %s: shape overflows 64 bits", label,
					 t->name);
	}
	t->nelem = n;
	if (moem_mul_overflow(n, moem_dtype_size(t->dtype), &t->bytes))
		return moem_errf(EINVAL, "%s: tensor %s: shape x %s size overflows 64 bits", label,
				 t->name, st_dtypes[t->dtype]);
	if (!offs || !json_object_is_type(offs, json_type_array) ||
	    json_object_array_length(offs) != 2 ||
	    moem_store_json_as_u64(json_object_array_get_idx(offs, 0), &begin) ||
	    moem_store_json_as_u64(json_object_array_get_idx(offs, 1), &end))
		return moem_errf(EINVAL, "%s: tensor %s: \"data_offsets\" must be [begin, end]",
				 label, t->name);
	if (begin > end || end > data_len)
		return moem_errf(EINVAL,
				 "%s: tensor %s: data_offsets [%llu, %llu) outside the %llu-byte "
				 "data area",
				 label, t->name, (unsigned long long)begin, (unsigned long long)end,
				 (unsigned long long)data_len);
	if (end - begin != t->bytes)
		return moem_errf(EINVAL,
				 "%s: tensor %s: data_offsets hold %llu bytes but %llu x %s needs "
				 "%llu",
				 label, t->name, (unsigned long long)(end - begin),
				 (unsigned long long)n, st_dtypes[t->dtype],
				 (unsigned long long)t->bytes);
	t->offset = data_off + begin;
	return 0;
}

static int check_overlaps(struct moem_st_file *f, uint64_t data_off, const char *label)
{
	struct moem_st_tensor **by_off;
	int ret = 0;

	if (f->n < 2)
		return 0;
	by_off = malloc(sizeof(*by_off) * f->n);
	if (!by_off)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->n; i++)
		by_off[i] = &f->t[i];
	qsort(by_off, f->n, sizeof(*by_off), cmp_offset);
	for (uint32_t i = 1; i < f->n; i++) {
		const struct moem_st_tensor *a = by_off[i - 1], *b = by_off[i];

		if (b->offset < a->offset + a->bytes) {
			ret = moem_errf(EINVAL,
					"%s: tensors %s [%llu, %llu) and %s [%llu, %llu) overlap",
					label, a->name, (unsigned long long)(a->offset - data_off),
					(unsigned long long)(a->offset - data_off + a->bytes),
					b->name, (unsigned long long)(b->offset - data_off),
					(unsigned long long)(b->offset - data_off + b->bytes));
			break;
		}
	}
	free(by_off);
	return ret;
}

static int parse_header(struct moem_st_file *f, const char *hdr, uint64_t hlen, uint64_t data_len,
			const char *label)
{
	struct json_object *root;
	size_t arena = 0, pos = 0;
	uint32_t i = 0;
	int ret;

	ret = moem_store_json_parse(hdr, (size_t)hlen, ST_JSON_DEPTH, label, &root);
	if (ret)
		return moem_err_prefix(-ret, "header");
	if (!json_object_is_type(root, json_type_object)) {
		ret = moem_errf(EINVAL, "%s: header is not a JSON object", label);
		goto out;
	}
	json_object_object_foreach(root, k, v)
	{
		size_t kl = strlen(k);

		(void)v;
		if (!strcmp(k, "__metadata__"))
			continue;
		if (!kl || kl > ST_NAME_MAX) {
			ret = moem_errf(EINVAL, "%s: tensor name of %zu bytes (1..%d)", label, kl,
					ST_NAME_MAX);
			goto out;
		}
		arena += kl + 1;
		f->n++;
	}
	f->t = calloc(f->n ? f->n : 1, sizeof(*f->t));
	f->names = malloc(arena ? arena : 1);
	if (!f->t || !f->names) {
		ret = -ENOMEM;
		goto out;
	}
	json_object_object_foreach(root, key, val)
	{
		size_t kl = strlen(key);

		if (!strcmp(key, "__metadata__")) {
			ret = parse_metadata(f, val, label);
			if (ret)
				goto out;
			continue;
		}
		memcpy(f->names + pos, key, kl + 1);
		f->t[i].name = f->names + pos;
		pos += kl + 1;
		ret = parse_tensor(&f->t[i], val, 8 + hlen, data_len, label);
		if (ret)
			goto out;
		i++;
	}
	ret = check_overlaps(f, 8 + hlen, label);
	if (ret)
		goto out;
	qsort(f->t, f->n, sizeof(*f->t), cmp_name);
out:
	json_object_put(root);
	return ret;
}

/* Check the length prefix against the file size; *hlen on success. */
static int check_prefix(const uint8_t *p8, uint64_t file_size, const char *label, uint64_t *hlen)
{
	uint64_t n = 0;

	if (file_size < 8)
		return moem_errf(EINVAL, "%s: %llu bytes, too short for a safetensors file", label,
				 (unsigned long long)file_size);
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | p8[i];
	if (n > MOEM_ST_MAX_HEADER)
		return moem_errf(EINVAL, "%s: header length %llu exceeds the %llu-byte limit",
				 label, (unsigned long long)n,
				 (unsigned long long)MOEM_ST_MAX_HEADER);
	if (n > file_size - 8)
		return moem_errf(EINVAL, "%s: header length %llu but only %llu bytes follow", label,
				 (unsigned long long)n, (unsigned long long)(file_size - 8));
	if (n < 2)
		return moem_errf(EINVAL, "%s: header length %llu is too short for JSON", label,
				 (unsigned long long)n);
	*hlen = n;
	return 0;
}

static struct moem_st_file *st_alloc(const char *label, uint64_t size)
{
	struct moem_st_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->fd = -1;
	f->size = size;
	f->path = strdup(label);
	if (!f->path) {
		free(f);
		return NULL;
	}
	return f;
}

int moem_st_parse(const void *buf, size_t len, uint64_t file_size, const char *label,
		  struct moem_st_file **out)
{
	struct moem_st_file *f;
	uint64_t hlen;
	int ret;

	*out = NULL;
	if (file_size < 8)
		return moem_errf(EINVAL, "%s: %llu bytes, too short for a safetensors file", label,
				 (unsigned long long)file_size);
	if (len < 8 || len > file_size)
		return moem_errf(EINVAL, "%s: %zu bytes given of a %llu-byte file", label, len,
				 (unsigned long long)file_size);
	ret = check_prefix(buf, file_size, label, &hlen);
	if (ret)
		return ret;
	if (len - 8 < hlen)
		return moem_errf(EINVAL, "%s: truncated header (%zu of %llu bytes)", label, len - 8,
				 (unsigned long long)hlen);
	f = st_alloc(label, file_size);
	if (!f)
		return -ENOMEM;
	ret = parse_header(f, (const char *)buf + 8, hlen, file_size - 8 - hlen, label);
	if (ret) {
		moem_st_close(f);
		return ret;
	}
	*out = f;
	return 0;
}

int moem_st_open(const char *path, struct moem_st_file **out)
{
	struct moem_st_file *f;
	uint8_t p8[8];
	uint64_t hlen;
	struct stat st;
	char *hdr;
	int fd, ret;

	*out = NULL;
	fd = moem_store_open_regular(path, &st);
	if (fd < 0)
		return fd;
	if (st.st_size < 8) {
		ret = moem_errf(EINVAL, "%s: %lld bytes, too short for a safetensors file", path,
				(long long)st.st_size);
		goto err_close;
	}
	ret = moem_store_pread_all(fd, p8, 8, 0, path);
	if (!ret)
		ret = check_prefix(p8, (uint64_t)st.st_size, path, &hlen);
	if (ret)
		goto err_close;
	hdr = malloc((size_t)hlen);
	if (!hdr) {
		ret = -ENOMEM;
		goto err_close;
	}
	ret = moem_store_pread_all(fd, hdr, (size_t)hlen, 8, path);
	f = ret ? NULL : st_alloc(path, (uint64_t)st.st_size);
	if (!ret && !f)
		ret = -ENOMEM;
	if (!ret) {
		ret = parse_header(f, hdr, hlen, (uint64_t)st.st_size - 8 - hlen, path);
		if (ret)
			moem_st_close(f);
	}
	free(hdr);
	if (ret)
		goto err_close;
	f->fd = fd;
	*out = f;
	return 0;
err_close:
	close(fd);
	return ret;
}

void moem_st_close(struct moem_st_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	for (uint32_t i = 0; f->meta && i < 2 * f->n_meta; i++)
		free(f->meta[i]);
	free(f->meta);
	free(f->t);
	free(f->names);
	free(f->path);
	free(f);
}

const char *moem_st_path(const struct moem_st_file *f)
{
	return f->path;
}

uint64_t moem_st_file_size(const struct moem_st_file *f)
{
	return f->size;
}

uint32_t moem_st_count(const struct moem_st_file *f)
{
	return f->n;
}

const struct moem_st_tensor *moem_st_at(const struct moem_st_file *f, uint32_t i)
{
	return i < f->n ? &f->t[i] : NULL;
}

const struct moem_st_tensor *moem_st_find(const struct moem_st_file *f, const char *name)
{
	struct moem_st_tensor key = {.name = name};

	return bsearch(&key, f->t, f->n, sizeof(*f->t), cmp_name);
}

const char *moem_st_metadata(const struct moem_st_file *f, const char *key)
{
	for (uint32_t i = 0; i < f->n_meta; i++)
		if (f->meta[2 * i] && !strcmp(f->meta[2 * i], key))
			return f->meta[2 * i + 1];
	return NULL;
}

int moem_st_read(const struct moem_st_file *f, const struct moem_st_tensor *t, uint64_t off,
		 void *dst, uint64_t len)
{
	uint64_t end;

	if (f->fd < 0)
		return moem_errf(EBADF, "%s: parsed from memory, no data to read", f->path);
	if (moem_add_overflow(off, len, &end) || end > t->bytes || len > SIZE_MAX)
		return moem_errf(EINVAL, "%s: tensor %s: read [%llu, +%llu) outside its %llu bytes",
				 f->path, t->name, (unsigned long long)off, (unsigned long long)len,
				 (unsigned long long)t->bytes);
	return moem_store_pread_all(f->fd, dst, (size_t)len, t->offset + off, f->path);
}

#define CONV_CHUNK 16384u

static int read_convert(const struct moem_st_file *f, const struct moem_st_tensor *t, uint16_t *bf,
			float *fl, uint64_t nelem)
{
	uint32_t esz = moem_dtype_size(t->dtype);
	uint8_t *tmp;
	int ret = 0;

	if (nelem != t->nelem)
		return moem_errf(EINVAL, "%s: tensor %s has %llu elements, caller expects %llu",
				 f->path, t->name, (unsigned long long)t->nelem,
				 (unsigned long long)nelem);
	if (bf && t->dtype == MOEM_DTYPE_BF16)
		return moem_st_read(f, t, 0, bf, t->bytes);
	if (fl && t->dtype == MOEM_DTYPE_F32)
		return moem_st_read(f, t, 0, fl, t->bytes);
	tmp = malloc((size_t)CONV_CHUNK * esz);
	if (!tmp)
		return -ENOMEM;
	for (uint64_t i = 0; i < nelem && !ret; i += CONV_CHUNK) {
		uint32_t n = (uint32_t)moem_min((uint64_t)CONV_CHUNK, nelem - i);

		ret = moem_st_read(f, t, i * esz, tmp, (uint64_t)n * esz);
		for (uint32_t j = 0; !ret && j < n; j++) {
			uint16_t h;
			uint32_t u;
			float v;

			if (esz == 2) {
				memcpy(&h, tmp + 2 * j, 2);
				v = t->dtype == MOEM_DTYPE_F16 ? moem_f16_to_f32(h)
							       : moem_bf16_to_f32(h);
			} else {
				memcpy(&u, tmp + 4 * j, 4);
				v = moem_bits_f32(u);
			}
			if (bf)
				bf[i + j] = moem_f32_to_bf16(v);
			else
				fl[i + j] = v;
		}
	}
	free(tmp);
	return ret;
}

int moem_st_read_bf16(const struct moem_st_file *f, const struct moem_st_tensor *t, uint16_t *dst,
		      uint64_t nelem)
{
	return read_convert(f, t, dst, NULL, nelem);
}

int moem_st_read_f32(const struct moem_st_file *f, const struct moem_st_tensor *t, float *dst,
		     uint64_t nelem)
{
	return read_convert(f, t, NULL, dst, nelem);
}
