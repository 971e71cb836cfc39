// SPDX-License-Identifier: GPL-2.0-only
/* moem_synth.json: the synthetic workload parameters a model carries. */
#include <errno.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/synth.h>

#define SYNTH_JSON_VERSION 1

int moem_synth_to_json(const struct moem_synth_params *p, struct json_object **out)
{
	struct json_object *o = json_object_new_object(), *names = json_object_new_array();

	if (!o || !names) {
		json_object_put(o);
		json_object_put(names);
		return -ENOMEM;
	}
	json_object_object_add(o, "version", json_object_new_int(SYNTH_JSON_VERSION));
	json_object_object_add(o, "n_layers", json_object_new_int64(p->n_layers));
	json_object_object_add(o, "n_experts", json_object_new_int64(p->n_experts));
	json_object_object_add(o, "top_k", json_object_new_int64(p->top_k));
	for (uint32_t w = 0; w < p->n_workloads; w++)
		json_object_array_add(names, json_object_new_string(p->workload[w]));
	json_object_object_add(o, "workloads", names);
	json_object_object_add(o, "zipf_s", json_object_new_double(p->zipf_s));
	json_object_object_add(o, "overlap", json_object_new_double(p->overlap));
	json_object_object_add(o, "reshuffle", json_object_new_double(p->reshuffle));
	json_object_object_add(o, "layer_corr", json_object_new_double(p->layer_corr));
	json_object_object_add(o, "persist", json_object_new_double(p->persist));
	json_object_object_add(o, "drift", json_object_new_double(p->drift));
	json_object_object_add(o, "mean_seq_len", json_object_new_double(p->mean_seq_len));
	json_object_object_add(o, "boost", json_object_new_double(p->boost));
	json_object_object_add(o, "noise", json_object_new_double(p->noise));
	json_object_object_add(o, "seed", json_object_new_uint64(p->seed));
	*out = o;
	return 0;
}

static int get_num(struct json_object *obj, const char *key, double *v)
{
	struct json_object *f;
	enum json_type t;

	if (!json_object_object_get_ex(obj, key, &f))
		return moem_errf(EINVAL, "moem_synth.json: missing \"%s\"", key);
	t = json_object_get_type(f);
	if (t != json_type_int && t != json_type_double)
		return moem_errf(EINVAL, "moem_synth.json: \"%s\" is not a number", key);
	*v = json_object_get_double(f);
	return 0;
}

static int get_u32(struct json_object *obj, const char *key, uint32_t *v)
{
	double d;
	int ret = get_num(obj, key, &d);

	if (ret)
		return ret;
	if (!(d >= 0 && d <= 4294967295.0) || d != (double)(uint32_t)d)
		return moem_errf(EINVAL, "moem_synth.json: \"%s\" is not a 32-bit count", key);
	*v = (uint32_t)d;
	return 0;
}

int moem_synth_from_json(struct json_object *obj, struct moem_synth_params *p)
{
	const struct {
		const char *key;
		double *v;
	} dbl[] = {
		{"zipf_s", &p->zipf_s},
		{"overlap", &p->overlap},
		{"reshuffle", &p->reshuffle},
		{"layer_corr", &p->layer_corr},
		{"persist", &p->persist},
		{"drift", &p->drift},
		{"mean_seq_len", &p->mean_seq_len},
		{"boost", &p->boost},
		{"noise", &p->noise},
	};
	struct json_object *f, *names;
	uint32_t version;
	int ret;

	if (!json_object_is_type(obj, json_type_object))
		return moem_errf(EINVAL, "moem_synth.json: not an object");
	memset(p, 0, sizeof(*p));
	ret = get_u32(obj, "version", &version);
	if (ret)
		return ret;
	if (version != SYNTH_JSON_VERSION)
		return moem_errf(EINVAL, "moem_synth.json: version %u, this moem reads %d", version,
				 SYNTH_JSON_VERSION);
	if ((ret = get_u32(obj, "n_layers", &p->n_layers)) ||
	    (ret = get_u32(obj, "n_experts", &p->n_experts)) ||
	    (ret = get_u32(obj, "top_k", &p->top_k)))
		return ret;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(dbl); i++) {
		ret = get_num(obj, dbl[i].key, dbl[i].v);
		if (ret)
			return ret;
	}
	if (!json_object_object_get_ex(obj, "seed", &f) || !json_object_is_type(f, json_type_int))
		return moem_errf(EINVAL, "moem_synth.json: missing integer \"seed\"");
	p->seed = json_object_get_uint64(f);
	if (!json_object_object_get_ex(obj, "workloads", &names) ||
	    !json_object_is_type(names, json_type_array))
		return moem_errf(EINVAL, "moem_synth.json: missing \"workloads\" array");
	p->n_workloads = (uint32_t)json_object_array_length(names);
	if (!p->n_workloads || p->n_workloads > MOEM_SYNTH_MAX_WORKLOADS)
		return moem_errf(EINVAL, "moem_synth.json: %u workloads, want 1..%d",
				 p->n_workloads, MOEM_SYNTH_MAX_WORKLOADS);
	for (uint32_t w = 0; w < p->n_workloads; w++) {
		const char *s = json_object_get_string(json_object_array_get_idx(names, w));

		if (!json_object_is_type(json_object_array_get_idx(names, w), json_type_string) ||
		    strlen(s) >= MOEM_SYNTH_NAME_MAX)
			return moem_errf(EINVAL, "moem_synth.json: bad workload name #%u", w);
		strcpy(p->workload[w], s);
	}
	return moem_synth_validate(p);
}
