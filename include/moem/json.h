/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Strict JSON parsing on json-c, shared by every reader of JSON that comes
 * from outside (checkpoints, packs, tokenizer files, chat variables).
 */
#ifndef MOEM_JSON_H
#define MOEM_JSON_H

#include <stddef.h>
#include <stdint.h>

struct json_object;

/*
 * Parse buf[0, len) as exactly one JSON value: trailing whitespace only,
 * no NUL bytes, valid UTF-8, nesting at most depth, at most max bytes
 * (-EFBIG above). -EINVAL with a message "<what>: ..." that says where
 * parsing stopped. *out is put with json_object_put().
 */
int moem_json_parse(const char *buf, size_t len, uint64_t max, int depth, const char *what,
		    struct json_object **out);

#endif /* MOEM_JSON_H */
