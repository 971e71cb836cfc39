// SPDX-License-Identifier: GPL-2.0-only
/*
 * Encode throughput of moem's tokenizer: every corpus line (a JSON string
 * per line) encoded once per repetition, one call per text as a server
 * encodes prompts, on one thread; the best repetition is reported as
 * {"impl": "moem", "bytes", "seconds", "lines", "tokens"} for
 * tests/text/bench_report.mjs to set against the JavaScript tokenizers.
 * Then one document: the corpus lines joined with newlines until it holds
 * at least 100,000 tokens, encoded in one call (best of the repetitions):
 * "doc_bytes", "doc_tokens", "doc_seconds".
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/tokenizer.h>
#include <moem/util.h>

int main(int argc, char **argv)
{
	const char *tok_path = NULL, *corpus = NULL;
	struct moem_tokenizer *t;
	struct moem_tok_ids ids = {0};
	char **text = NULL;
	size_t *len = NULL, n = 0, cap = 0, bytes = 0, tokens = 0;
	double best = 1e30;
	int reps = 3, c, ret;
	char line[1 << 16];
	FILE *f;

	static const struct option opts[] = {
		{"tokenizer", required_argument, NULL, 't'},
		{"corpus", required_argument, NULL, 'c'},
		{"reps", required_argument, NULL, 'r'},
		{0},
	};

	while ((c = getopt_long(argc, argv, "t:c:r:", opts, NULL)) != -1) {
		if (c == 't')
			tok_path = optarg;
		else if (c == 'c')
			corpus = optarg;
		else if (c == 'r')
			reps = atoi(optarg);
		else
			return 2;
	}
	if (!tok_path || !corpus || reps < 1) {
		fprintf(stderr,
			"usage: bench-tok --tokenizer DIR --corpus FILE.jsonl [--reps N]\n");
		return 2;
	}
	ret = moem_tok_load_path(&t, tok_path);
	if (ret) {
		fprintf(stderr, "bench-tok: %s\n", moem_strerror(ret));
		return 1;
	}
	f = fopen(corpus, "r");
	if (!f) {
		perror(corpus);
		return 1;
	}
	/* Lines longer than the buffer are skipped (the corpus has none). */
	while (fgets(line, sizeof(line), f)) {
		struct json_object *o = json_tokener_parse(line);

		if (o && json_object_is_type(o, json_type_string)) {
			if (n == cap) {
				cap = cap ? cap * 2 : 1024;
				text = realloc(text, cap * sizeof(*text));
				len = realloc(len, cap * sizeof(*len));
				if (!text || !len)
					return 1;
			}
			len[n] = (size_t)json_object_get_string_len(o);
			text[n] = malloc(len[n] + 1);
			if (!text[n])
				return 1;
			memcpy(text[n], json_object_get_string(o), len[n] + 1);
			bytes += len[n];
			n++;
		}
		json_object_put(o);
	}
	fclose(f);
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = moem_now_ns();

		tokens = 0;
		for (size_t i = 0; i < n; i++) {
			ids.n = 0;
			ret = moem_tok_encode(t, text[i], len[i], 0, &ids);
			if (ret) {
				fprintf(stderr, "bench-tok: line %zu: %s\n", i + 1,
					moem_strerror(ret));
				return 1;
			}
			tokens += ids.n;
		}
		best = moem_min(best, (double)(moem_now_ns() - t0) / 1e9);
	}
	{
		struct moem_tok_info ti;
		size_t dlen = 0, dcap = 1 << 20, dtok = 0, dlines = 0;
		char *doc = malloc(dcap);
		double dbest = 1e30;

		/*
		 * Join whole lines until the document has >= 100k tokens: the
		 * lines' own counts give the first guess; joined, tokens merge
		 * across the newlines, so it grows until the encode says so.
		 */
		while (doc && n) {
			size_t want = dlines;

			for (size_t i = dlines; dtok < 100000; i++) {
				ids.n = 0;
				if (moem_tok_encode(t, text[i % n], len[i % n], 0, &ids))
					return 1;
				dtok += ids.n + 1;
				want = i + 1;
			}
			for (; dlines < want; dlines++) {
				size_t i = dlines % n;

				if (dlen + len[i] + 1 > dcap) {
					char *nd = realloc(doc, dcap = 2 * (dlen + len[i] + 1));

					if (!nd) {
						free(doc);
						doc = NULL;
						break;
					}
					doc = nd;
				}
				memcpy(doc + dlen, text[i], len[i]);
				dlen += len[i];
				doc[dlen++] = '\n';
			}
			if (!doc)
				break;
			ids.n = 0;
			if (moem_tok_encode(t, doc, dlen, 0, &ids))
				return 1;
			if (ids.n >= 100000)
				break;
			dtok = ids.n; /* short: add lines until the estimate is 100k again */
		}
		if (!doc)
			return 1;
		moem_tok_info(t, &ti);
		for (int r = 0; r < reps; r++) {
			uint64_t t0 = moem_now_ns();

			ids.n = 0;
			ret = moem_tok_encode(t, doc, dlen, 0, &ids);
			if (ret) {
				fprintf(stderr, "bench-tok: document: %s\n", moem_strerror(ret));
				return 1;
			}
			dbest = moem_min(dbest, (double)(moem_now_ns() - t0) / 1e9);
		}
		printf("{\"impl\": \"moem\", \"bytes\": %zu, \"seconds\": %.6f, \"lines\": %zu, "
		       "\"tokens\": %zu, \"doc_bytes\": %zu, \"doc_tokens\": %zu, "
		       "\"doc_seconds\": %.6f, \"doc_lines\": %zu, \"vocab\": %u, \"kind\": "
		       "\"%s\"}\n",
		       bytes, best, n, tokens, dlen, ids.n, dbest, dlines, ti.vocab_size,
		       moem_tok_kind_name(ti.kind));
		free(doc);
	}
	for (size_t i = 0; i < n; i++)
		free(text[i]);
	free(text);
	free(len);
	moem_tok_ids_free(&ids);
	moem_tok_free(t);
	return 0;
}
