// SPDX-License-Identifier: GPL-2.0-only
/* Strict JSON parsing and typed field access for the store (store_int.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/json.h>

#include "store_int.h"

int moem_store_json_parse(const char *buf, size_t len, int depth, const char *what,
			  struct json_object **out)
{
	return moem_json_parse(buf, len, STORE_JSON_PARSE_MAX, depth, what, out);
}

static int get_field(struct json_object *o, const char *key, bool required, const char *what,
		     struct json_object **v)
{
	if (!json_object_object_get_ex(o, key, v) || !*v) {
		if (required)
			return moem_errf(EINVAL, "%s: missing \"%s\"", what, key);
		return -ENOENT;
	}
	return 0;
}

int moem_store_json_as_u64(struct json_object *v, uint64_t *out)
{
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
		return -EINVAL;
	*out = json_object_get_uint64(v);
	/* json-c saturates integers past 2^64 - 1: treat that value as too big. */
	if (*out == UINT64_MAX)
		return -ERANGE;
	return 0;
}

int moem_store_json_u64(struct json_object *o, const char *key, bool required, const char *what,
			uint64_t *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (moem_store_json_as_u64(v, out))
		return moem_errf(EINVAL, "%s: \"%s\" must be a non-negative integer, not %s", what,
				 key, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	return 0;
}

int moem_store_json_u32(struct json_object *o, const char *key, bool required, const char *what,
			uint32_t *out)
{
	uint64_t v;
	int ret = moem_store_json_u64(o, key, required, what, &v);

	if (ret)
		return ret;
	if (v > UINT32_MAX)
		return moem_errf(EINVAL, "%s: \"%s\" = %llu is too large", what, key,
				 (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

int moem_store_json_f64(struct json_object *o, const char *key, bool required, const char *what,
			double *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return moem_errf(EINVAL, "%s: \"%s\" must be a number", what, key);
	*out = json_object_get_double(v);
	if (!isfinite(*out))
		return moem_errf(EINVAL, "%s: \"%s\" is not finite", what, key);
	return 0;
}

int moem_store_json_bool(struct json_object *o, const char *key, bool required, const char *what,
			 bool *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_boolean))
		return moem_errf(EINVAL, "%s: \"%s\" must be true or false", what, key);
	*out = json_object_get_boolean(v);
	return 0;
}

int moem_store_json_str(struct json_object *o, const char *key, bool required, const char *what,
			const char **out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_string))
		return moem_errf(EINVAL, "%s: \"%s\" must be a string", what, key);
	*out = json_object_get_string(v);
	return 0;
}
