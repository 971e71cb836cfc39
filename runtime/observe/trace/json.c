// SPDX-License-Identifier: GPL-2.0-only
/*
 * JSON lines <-> binary trace (trace.h): the door through which routing
 * recorded by anything else (an engine run, a PyTorch hook) becomes a
 * trace the simulator reads.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/trace.h>
#include <moem/util.h>

#define JSON_LINE_MAX (256u << 20)

static void put_float(FILE *f, float v)
{
	if (isinf(v))
		fputs(v > 0 ? "1e999" : "-1e999", f);
	else
		fprintf(f, "%.9g", (double)v);
}

static void put_rows_f(FILE *f, const char *key, const float *v, uint32_t rows, uint32_t cols,
		       const uint32_t *cnt)
{
	fprintf(f, ",\"%s\":[", key);
	for (uint32_t t = 0; t < rows; t++) {
		uint32_t n = cnt ? cnt[t] : cols;

		fputs(t ? ",[" : "[", f);
		for (uint32_t j = 0; j < n; j++) {
			if (j)
				fputc(',', f);
			put_float(f, v[(size_t)t * cols + j]);
		}
		fputc(']', f);
	}
	fputc(']', f);
}

/* "pregate":[[[ids of token 0],..] for d = 1..D]. */
static void put_pregate(FILE *f, const struct moem_trace_rec *rec, const struct moem_trace_info *in)
{
	const uint32_t K = in->top_k;

	fputs(",\"pregate\":[", f);
	for (uint32_t d = 0; d < in->pregate_depth; d++) {
		fputs(d ? ",[" : "[", f);
		for (uint32_t t = 0; t < rec->tokens; t++) {
			const int32_t *id = rec->pregate + ((size_t)d * rec->tokens + t) * K;

			fputs(t ? ",[" : "[", f);
			for (uint32_t j = 0; j < K && id[j] >= 0; j++)
				fprintf(f, j ? ",%d" : "%d", id[j]);
			fputc(']', f);
		}
		fputc(']', f);
	}
	fputc(']', f);
}

int64_t moem_trace_dump_json(struct moem_trace_reader *r, FILE *f)
{
	const struct moem_trace_info *in = moem_trace_reader_info(r);
	struct moem_trace_rec rec;
	struct json_object *d;
	int64_t n = 0;
	int ret;

	d = json_object_new_string(in->desc);
	fprintf(f,
		"{\"moem_trace\":1,\"n_layers\":%u,\"n_experts\":%u,\"top_k\":%u,"
		"\"source\":\"%s\",\"flags\":[%s%s%s],\"seed\":%" PRIu64 ",\"desc\":%s,"
		"\"hidden\":%u,\"moe_inter\":%u,\"pregate_depth\":%u",
		in->n_layers, in->n_experts, in->top_k, moem_trace_source_name(in->source),
		in->flags & MOEM_TRACE_F_LOGITS ? "\"logits\"" : "",
		(in->flags & MOEM_TRACE_F_LOGITS) && (in->flags & MOEM_TRACE_F_SYNTHETIC) ? ","
											  : "",
		in->flags & MOEM_TRACE_F_SYNTHETIC ? "\"synthetic\"" : "", in->seed,
		d ? json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN) : "\"\"", in->hidden,
		in->moe_inter, in->pregate_depth);
	if (in->n_group) /* 1.2; absent in the JSON of older traces */
		fprintf(f, ",\"n_group\":%u,\"topk_group\":%u", in->n_group, in->topk_group);
	fputs("}\n", f);
	json_object_put(d);
	while ((ret = moem_trace_next(r, &rec)) > 0) {
		fprintf(f, "{\"step\":%" PRIu64 ",\"layer\":%u,\"ids\":[", rec.step, rec.layer);
		for (uint32_t t = 0; t < rec.tokens; t++) {
			fputs(t ? ",[" : "[", f);
			for (uint32_t j = 0; j < rec.cnt[t]; j++)
				fprintf(f, j ? ",%d" : "%d", rec.ids[(size_t)t * in->top_k + j]);
			fputc(']', f);
		}
		fputc(']', f);
		put_rows_f(f, "w", rec.w, rec.tokens, in->top_k, rec.cnt);
		if (rec.logits)
			put_rows_f(f, "logits", rec.logits, rec.tokens, in->n_experts, NULL);
		if (rec.pregate)
			put_pregate(f, &rec, in);
		fputs("}\n", f);
		n++;
	}
	if (ret < 0)
		return ret;
	if (fflush(f) || ferror(f))
		return moem_errf(EIO, "trace dump: write error");
	return n;
}

static int get_u64(struct json_object *o, const char *key, bool need, uint64_t max, uint64_t *v)
{
	struct json_object *f;
	int64_t x;

	if (!json_object_object_get_ex(o, key, &f)) {
		if (need)
			return moem_errf(EINVAL, "missing \"%s\"", key);
		return 0;
	}
	if (json_object_get_type(f) != json_type_int)
		return moem_errf(EINVAL, "\"%s\" is not an integer", key);
	errno = 0;
	x = json_object_get_int64(f);
	if (x < 0 || errno || (uint64_t)x > max) {
		/* json-c clamps huge values; take the unsigned form for seeds */
		uint64_t u = json_object_get_uint64(f);

		if (x >= 0 && u <= max) {
			*v = u;
			return 0;
		}
		return moem_errf(EINVAL, "\"%s\" out of range (0..%" PRIu64 ")", key, max);
	}
	*v = (uint64_t)x;
	return 0;
}

/* An optional field of at most max (<= UINT32_MAX); 0 when absent. */
static int opt_u32(struct json_object *o, const char *key, uint32_t max, uint32_t *out)
{
	uint64_t v = 0;
	int ret = get_u64(o, key, false, max, &v);

	*out = (uint32_t)v;
	return ret;
}

static int parse_header(struct json_object *o, struct moem_trace_info *in)
{
	struct json_object *f;
	uint64_t v = 0;
	int ret;

	memset(in, 0, sizeof(*in));
	if ((ret = get_u64(o, "moem_trace", true, 1, &v)) || v != 1)
		return ret ? ret : moem_errf(EPROTO, "unsupported \"moem_trace\" version");
	if ((ret = get_u64(o, "n_layers", true, MOEM_TRACE_MAX_LAYERS, &v)))
		return ret;
	in->n_layers = (uint32_t)v;
	if ((ret = get_u64(o, "n_experts", true, MOEM_TRACE_MAX_EXPERTS, &v)))
		return ret;
	in->n_experts = (uint32_t)v;
	if ((ret = get_u64(o, "top_k", true, MOEM_TRACE_MAX_TOPK, &v)))
		return ret;
	in->top_k = (uint32_t)v;
	if ((ret = get_u64(o, "seed", false, UINT64_MAX, &in->seed)))
		return ret;
	in->source = MOEM_TRACE_SRC_IMPORT;
	if (json_object_object_get_ex(o, "source", &f)) {
		const char *s = json_object_get_string(f);

		for (int i = 0; i < MOEM_TRACE_SRC_NR; i++)
			if (s && !strcmp(s, moem_trace_source_name((enum moem_trace_source)i)))
				in->source = (enum moem_trace_source)i;
	}
	if (json_object_object_get_ex(o, "flags", &f)) {
		if (json_object_get_type(f) != json_type_array)
			return moem_errf(EINVAL, "\"flags\" is not an array");
		for (size_t i = 0; i < json_object_array_length(f); i++) {
			const char *s = json_object_get_string(json_object_array_get_idx(f, i));

			if (s && !strcmp(s, "logits"))
				in->flags |= MOEM_TRACE_F_LOGITS;
			else if (s && !strcmp(s, "synthetic"))
				in->flags |= MOEM_TRACE_F_SYNTHETIC;
			else
				return moem_errf(EINVAL, "unknown flag \"%s\"", s ? s : "?");
		}
	}
	if (json_object_object_get_ex(o, "desc", &f))
		snprintf(in->desc, sizeof(in->desc), "%s", json_object_get_string(f));
	/* 1.1 and 1.2 fields: absent is 0 */
	if ((ret = opt_u32(o, "hidden", 65536, &in->hidden)) ||
	    (ret = opt_u32(o, "moe_inter", 65536, &in->moe_inter)) ||
	    (ret = opt_u32(o, "pregate_depth", MOEM_TRACE_MAX_PREGATE, &in->pregate_depth)) ||
	    (ret = opt_u32(o, "n_group", 64, &in->n_group)))
		return ret;
	return opt_u32(o, "topk_group", 64, &in->topk_group);
}

static int rows_of(struct json_object *a, const char *key, uint32_t *tokens, uint32_t cols,
		   bool exact, bool ints, int32_t *iv, float *fv, uint32_t *cnt);

/* rows must be an array of `tokens` arrays of at most cols numbers. */
static int get_rows(struct json_object *o, const char *key, uint32_t *tokens, uint32_t cols,
		    bool exact, bool ints, int32_t *iv, float *fv, uint32_t *cnt)
{
	struct json_object *a;

	if (!json_object_object_get_ex(o, key, &a) || json_object_get_type(a) != json_type_array)
		return moem_errf(EINVAL, "\"%s\" missing or not an array", key);
	return rows_of(a, key, tokens, cols, exact, ints, iv, fv, cnt);
}

/* "pregate": D arrays of the record's token rows of expert ids. */
static int get_pregate(struct json_object *o, const struct moem_trace_info *in, uint32_t tokens,
		       int32_t *pg)
{
	struct json_object *a;
	int ret = 0;

	if (!json_object_object_get_ex(o, "pregate", &a) ||
	    json_object_get_type(a) != json_type_array ||
	    json_object_array_length(a) != in->pregate_depth)
		return moem_errf(EINVAL, "\"pregate\" missing or not %u arrays", in->pregate_depth);
	for (uint32_t d = 0; d < in->pregate_depth && !ret; d++) {
		struct json_object *rows = json_object_array_get_idx(a, d);
		uint32_t n = tokens;

		if (json_object_get_type(rows) != json_type_array)
			return moem_errf(EINVAL, "\"pregate\" %u is not an array", d + 1);
		ret = rows_of(rows, "pregate", &n, in->top_k, false, true,
			      pg + (size_t)d * tokens * in->top_k, NULL, NULL);
	}
	for (size_t i = 0; !ret && i < (size_t)in->pregate_depth * tokens * in->top_k; i++)
		if (pg[i] > 65535)
			ret = moem_errf(EINVAL, "\"pregate\": expert id out of range");
	return ret;
}

static int rows_of(struct json_object *a, const char *key, uint32_t *tokens, uint32_t cols,
		   bool exact, bool ints, int32_t *iv, float *fv, uint32_t *cnt)
{
	size_t n;

	n = json_object_array_length(a);
	if (*tokens == 0) {
		if (!n || n > MOEM_TRACE_MAX_TOKENS)
			return moem_errf(EINVAL, "\"%s\": %zu tokens, want 1..%u", key, n,
					 MOEM_TRACE_MAX_TOKENS);
		*tokens = (uint32_t)n;
	} else if (n != *tokens) {
		return moem_errf(EINVAL, "\"%s\" has %zu rows, \"ids\" has %u", key, n, *tokens);
	}
	for (size_t t = 0; t < n; t++) {
		struct json_object *row = json_object_array_get_idx(a, t);
		size_t m;

		if (json_object_get_type(row) != json_type_array)
			return moem_errf(EINVAL, "\"%s\" row %zu is not an array", key, t);
		m = json_object_array_length(row);
		if (m > cols || (exact && m != cols) || (cnt && !ints && m != cnt[t]))
			return moem_errf(EINVAL, "\"%s\" row %zu has %zu entries", key, t, m);
		for (size_t j = 0; j < cols; j++) {
			struct json_object *x = j < m ? json_object_array_get_idx(row, j) : NULL;
			enum json_type ty = x ? json_object_get_type(x) : json_type_null;

			if (x && ty != json_type_int && (ints || ty != json_type_double))
				return moem_errf(EINVAL, "\"%s\" row %zu: not a number", key, t);
			if (ints) {
				int64_t e = x ? json_object_get_int64(x) : -1;

				iv[t * cols + j] = e < -1 || e > 65535 ? 65536 : (int32_t)e;
				if (x && e >= 0 && cnt)
					cnt[t] = (uint32_t)(j + 1);
			} else {
				fv[t * cols + j] = x ? (float)json_object_get_double(x) : 0.0f;
			}
		}
	}
	return 0;
}

struct bufs {
	uint32_t cap;
	int32_t *ids, *pg;
	float *wt, *lg;
	uint32_t *cnt;
};

/* Room for the record's tokens (counted from "ids", bounded). */
static int grow_bufs(struct bufs *b, const struct moem_trace_info *in, struct json_object *o)
{
	const bool logits = in->flags & MOEM_TRACE_F_LOGITS;
	struct json_object *a;
	size_t n;
	void *p;

	if (!json_object_object_get_ex(o, "ids", &a) || json_object_get_type(a) != json_type_array)
		return moem_errf(EINVAL, "\"ids\" missing or not an array");
	n = json_object_array_length(a);
	if (!n || n > MOEM_TRACE_MAX_TOKENS)
		return moem_errf(EINVAL, "\"ids\": %zu tokens, want 1..%u", n,
				 MOEM_TRACE_MAX_TOKENS);
	if (n <= b->cap)
		return 0;
	if (!(p = realloc(b->ids, n * in->top_k * sizeof(*b->ids))))
		return -ENOMEM;
	b->ids = p;
	if (!(p = realloc(b->wt, n * in->top_k * sizeof(*b->wt))))
		return -ENOMEM;
	b->wt = p;
	if (!(p = realloc(b->cnt, n * sizeof(*b->cnt))))
		return -ENOMEM;
	b->cnt = p;
	if (logits) {
		if (!(p = realloc(b->lg, n * in->n_experts * sizeof(*b->lg))))
			return -ENOMEM;
		b->lg = p;
	}
	if (in->pregate_depth) {
		if (!(p = realloc(b->pg, in->pregate_depth * n * in->top_k * sizeof(*b->pg))))
			return -ENOMEM;
		b->pg = p;
	}
	b->cap = (uint32_t)n;
	return 0;
}

int moem_trace_import_json(FILE *f, const char *in_name, const char *out_path, uint64_t *records)
{
	struct moem_trace_writer *w = NULL;
	struct moem_trace_info in;
	struct bufs b = {0};
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	struct stat si, so;
	ssize_t len;
	int ret = 0;

	/* the trace is renamed over out_path: never over the JSON being read */
	if (!fstat(fileno(f), &si) && !stat(out_path, &so) && si.st_dev == so.st_dev &&
	    si.st_ino == so.st_ino)
		return moem_errf(EINVAL, "%s: it is the input %s: writing would destroy it",
				 out_path, in_name);

	while ((len = moem_getline(&line, &cap, f, NULL, JSON_LINE_MAX)) >= 0) {
		struct json_object *o;
		uint32_t tokens = 0;
		uint64_t step = 0, layer = 0;

		lineno++;
		if (len <= 1 && (len == 0 || line[0] == '\n'))
			continue;
		o = json_tokener_parse(line);
		if (!o || json_object_get_type(o) != json_type_object) {
			json_object_put(o);
			ret = moem_errf(EINVAL, "not a JSON object");
			goto err;
		}
		if (!w) {
			ret = parse_header(o, &in);
			json_object_put(o);
			if (!ret)
				ret = moem_trace_writer_open(out_path, &in, &w);
			if (ret)
				goto err;
			continue;
		}
		ret = grow_bufs(&b, &in, o);
		if (ret) {
			json_object_put(o);
			goto err;
		}
		memset(b.cnt, 0, b.cap * sizeof(*b.cnt));
		ret = get_u64(o, "step", true, UINT64_MAX, &step);
		if (!ret)
			ret = get_u64(o, "layer", true, MOEM_TRACE_MAX_LAYERS, &layer);
		if (!ret)
			ret = get_rows(o, "ids", &tokens, in.top_k, false, true, b.ids, NULL,
				       b.cnt);
		for (size_t i = 0; !ret && i < (size_t)tokens * in.top_k; i++)
			if (b.ids[i] > 65535)
				ret = moem_errf(EINVAL, "\"ids\": expert id out of range");
		if (!ret)
			ret = get_rows(o, "w", &tokens, in.top_k, false, false, NULL, b.wt, b.cnt);
		if (!ret && (in.flags & MOEM_TRACE_F_LOGITS))
			ret = get_rows(o, "logits", &tokens, in.n_experts, true, false, NULL, b.lg,
				       NULL);
		if (!ret && in.pregate_depth)
			ret = get_pregate(o, &in, tokens, b.pg);
		json_object_put(o);
		if (!ret) {
			struct moem_trace_rec r = {
				step,	(uint32_t)layer,
				tokens, b.ids,
				b.wt,	(in.flags & MOEM_TRACE_F_LOGITS) ? b.lg : NULL,
				NULL,	in.pregate_depth ? b.pg : NULL};

			ret = moem_trace_write(w, &r);
		}
		if (ret)
			goto err;
	}
	if (len != -ENODATA) {
		/* a line longer than JSON_LINE_MAX (an endless one stops there), an error */
		ret = (int)len;
		lineno++;
		goto err;
	}
	if (!w) {
		ret = moem_errf(EINVAL, "%s: no header line", in_name);
		goto out;
	}
	if (records)
		*records = moem_trace_writer_count(w);
	ret = moem_trace_writer_close(w);
	w = NULL;
	goto out;
err:
	moem_err_prefix(-ret, "%s:%zu", in_name, lineno);
out:
	moem_trace_writer_abort(w);
	free(line);
	free(b.ids);
	free(b.pg);
	free(b.wt);
	free(b.cnt);
	free(b.lg);
	return ret;
}
