/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Internal helpers of the store (runtime/storage/store/): bounded file reads,
 * strict JSON parsing through json-c, typed field getters whose messages
 * name the file and the field. Not part of the public API.
 */
#ifndef MOEM_STORE_INT_H
#define MOEM_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

struct json_object;

/* Most bytes any JSON side file (config.json, the shard index) may hold. */
#define STORE_JSON_MAX	     (64ULL * 1024 * 1024)
/* Most bytes moem_store_json_parse() takes (a safetensors header may be 100 MB). */
#define STORE_JSON_PARSE_MAX (128ULL * 1024 * 1024)

/*
 * Read a whole regular file of at most max bytes into a NUL-terminated
 * malloc'd buffer. -EFBIG (with a message) when larger, -errno when it
 * cannot be opened or read; what names the file in messages.
 */
int moem_store_read_file(const char *path, uint64_t max, char **buf, size_t *len);
/* Open a regular file for reading without blocking on a FIFO (or a
 * device): the fd, with *st, or -errno with a message saying what path is. */
int moem_store_open_regular(const char *path, struct stat *st);

/*
 * The tokenizer files a checkpoint may carry, by name ("tokenizer.json"
 * first, the one required), i = 0.. until NULL; *max (may be NULL) is the
 * largest such file moem reads.
 */
const char *moem_store_tok_file(size_t i, uint64_t *max);

/*
 * Parse buf[0, len) as exactly one JSON value (trailing whitespace only,
 * no NUL bytes, valid UTF-8, nesting at most depth). -EINVAL with a
 * message "<what>: ..." that says where parsing stopped.
 */
int moem_store_json_parse(const char *buf, size_t len, int depth, const char *what,
			  struct json_object **out);

/*
 * Field getters on a JSON object. A field that is absent or null gives
 * -ENOENT without a message when !required (so callers apply a default),
 * and -EINVAL "<what>: missing \"key\"" when required. A field of the
 * wrong type or range gives -EINVAL naming it.
 */
int moem_store_json_u32(struct json_object *o, const char *key, bool required, const char *what,
			uint32_t *out);
int moem_store_json_u64(struct json_object *o, const char *key, bool required, const char *what,
			uint64_t *out);
int moem_store_json_f64(struct json_object *o, const char *key, bool required, const char *what,
			double *out);
int moem_store_json_bool(struct json_object *o, const char *key, bool required, const char *what,
			 bool *out);
int moem_store_json_str(struct json_object *o, const char *key, bool required, const char *what,
			const char **out);

/* A non-negative JSON integer as u64 (shape entries, offsets). */
int moem_store_json_as_u64(struct json_object *v, uint64_t *out);

/* path = dir + "/" + name into a malloc'd string (NULL on ENOMEM). */
char *moem_store_path_join(const char *dir, const char *name);

/* Write all of buf at off, retrying short writes; -errno with a message. */
int moem_store_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what);
/* Read exactly len bytes at off; -EIO "<what>: short read" at end of file. */
int moem_store_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what);

struct moem_model_config;
/*
 * moem_model_config_validate() plus the store's own limits (attention
 * shapes, deepseek_v2 ranks): what every config read from a file must pass.
 */
int moem_store_config_check(const struct moem_model_config *c);

/*
 * eos_token_id of a config.json or generation_config.json object (what
 * names the file): an id or a list of ids into c->eos, null for none.
 * -ENOENT when absent (c unchanged), -EINVAL with a message when malformed.
 */
int moem_store_parse_eos(struct json_object *o, const char *what, struct moem_model_config *c);

struct moem_tensor_spec;
/* moem_arch_tensors(), optionally without the FFN (expert/shared/dense) matrices. */
int moem_store_arch_tensors(const struct moem_model_config *c, bool with_ffn,
			    struct moem_tensor_spec **out, size_t *n);

/* Online CPUs, clamped to [1, 16]: the default worker count. */
uint32_t moem_store_default_threads(void);

/*
 * Independent jobs on a pool of threads (jobs.c). Each thread calls init
 * once (optional: its scratch), run for the jobs it takes, fini at the end
 * (optional; also after a failed init). The first error stops the pool and
 * is returned with its message. threads 0: moem_store_default_threads();
 * at most 16, and no more than jobs. Where no thread can be started the
 * caller's thread runs every job.
 */
struct moem_store_jobs {
	int (*init)(void *ctx, void **scratch);
	int (*run)(void *ctx, size_t job, void *scratch);
	void (*fini)(void *ctx, void *scratch);
};

int moem_store_run_jobs(const struct moem_store_jobs *j, void *ctx, size_t n_jobs,
			uint32_t threads);

#endif /* MOEM_STORE_INT_H */
