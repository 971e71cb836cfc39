/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Safetensors files: the reader behind checkpoint loading and the writer
 * behind `moem mkmodel`. Format (huggingface/safetensors):
 *
 *   u64 LE  N                  header length
 *   N bytes JSON header        {"__metadata__": {str: str}?,
 *                               "<name>": {"dtype": "BF16", "shape": [..],
 *                                          "data_offsets": [begin, end]}, ...}
 *   data area                  offsets are relative to its start
 *
 * The reader trusts nothing: N <= MOEM_ST_MAX_HEADER and N <= file size - 8;
 * the header is strict JSON (json-c); dtype is BF16, F16 or F32 (others are
 * refused by name); shape x dtype size is computed with overflow checks and
 * must equal end - begin; every range lies inside the data area; no two
 * ranges overlap (gaps are allowed). Every failure is -EINVAL (or -EFBIG,
 * -EIO) with a message naming the file and, where it applies, the tensor.
 */
#ifndef MOEM_SAFETENSORS_H
#define MOEM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define MOEM_ST_MAX_HEADER (100ULL * 1000 * 1000)
#define MOEM_ST_MAX_DIMS   8

struct moem_st_tensor {
	const char *name;
	enum moem_dtype dtype;
	uint32_t ndim;
	uint64_t shape[MOEM_ST_MAX_DIMS];
	uint64_t nelem;
	uint64_t offset; /* absolute offset of the first byte in the file */
	uint64_t bytes;	 /* nelem * dtype size */
};

struct moem_st_file;

/* Open and validate a file; the file stays open for reads until close. */
int moem_st_open(const char *path, struct moem_st_file **out);

/*
 * Validate a file given its first len bytes (at least 8 + N of them) and
 * its total size; label names it in messages. The result describes the
 * tensors but cannot read data (for fuzzers and tests).
 */
int moem_st_parse(const void *buf, size_t len, uint64_t file_size, const char *label,
		  struct moem_st_file **out);

void moem_st_close(struct moem_st_file *f);

const char *moem_st_path(const struct moem_st_file *f);
uint64_t moem_st_file_size(const struct moem_st_file *f);
/* Number of tensors, and the i-th in name order. */
uint32_t moem_st_count(const struct moem_st_file *f);
const struct moem_st_tensor *moem_st_at(const struct moem_st_file *f, uint32_t i);
/* Tensor by name, or NULL. */
const struct moem_st_tensor *moem_st_find(const struct moem_st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *moem_st_metadata(const struct moem_st_file *f, const char *key);

/*
 * Read len raw bytes of tensor t starting at byte off of the tensor.
 * -EINVAL if [off, off + len) is not inside the tensor, -EIO on a short
 * read (file truncated since open), -EBADF for a parse-only handle.
 */
int moem_st_read(const struct moem_st_file *f, const struct moem_st_tensor *t, uint64_t off,
		 void *dst, uint64_t len);

/*
 * Read the whole tensor as bf16 into dst[nelem]: BF16 is copied
 * byte-for-byte; F16 and F32 are converted with round-to-nearest-even
 * (moem/half.h). nelem must equal t->nelem.
 */
int moem_st_read_bf16(const struct moem_st_file *f, const struct moem_st_tensor *t, uint16_t *dst,
		      uint64_t nelem);
/* Same, converted exactly to float. */
int moem_st_read_f32(const struct moem_st_file *f, const struct moem_st_tensor *t, float *dst,
		     uint64_t nelem);

/* "BF16", "F16", "F32". */
const char *moem_st_dtype_name(enum moem_dtype d);

/*
 * Writer. A file is planned (add every tensor, then finish the header)
 * and then written: the header at once, tensor data by any thread at the
 * offsets moem_st_writer_offset() gives. Tensors are laid out in the
 * order they were added; the header JSON lists them in that order with
 * "__metadata__": {"format": "pt", ...} first, padded with spaces to a
 * multiple of 8 bytes as the reference implementation does.
 */
struct moem_st_writer;

int moem_st_writer_create(struct moem_st_writer **out);
/* Add a "__metadata__" string entry (before moem_st_writer_layout). */
int moem_st_writer_meta(struct moem_st_writer *w, const char *key, const char *value);
/* Add a tensor; returns its index in *idx. */
int moem_st_writer_add(struct moem_st_writer *w, const char *name, enum moem_dtype dtype,
		       uint32_t ndim, const uint64_t *shape, uint32_t *idx);
/* Fix the header; returns the total file size. */
int moem_st_writer_layout(struct moem_st_writer *w, uint64_t *file_size);
/* Absolute file offset and byte size of tensor idx (after layout). */
void moem_st_writer_offset(const struct moem_st_writer *w, uint32_t idx, uint64_t *off,
			   uint64_t *bytes);
/* Write the 8-byte length and the header to fd (after layout). */
int moem_st_writer_write_header(const struct moem_st_writer *w, int fd, const char *what);
void moem_st_writer_destroy(struct moem_st_writer *w);

#endif /* MOEM_SAFETENSORS_H */
