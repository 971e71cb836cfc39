// SPDX-License-Identifier: GPL-2.0-only
/* moem info: summarise a .moem pack (or a checkpoint directory). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/store.h>
#include <moem/tokenizer.h>
#include <moem/util.h>

#include "cmd.h"
#include "qerr_report.h"

static void info_usage(FILE *f)
{
	fprintf(f, "usage: moem info [--json] [--verify] [--quant-error] [--experts N]\n"
		   "                 [--tensors] [--blobs] PACK|CHECKPOINT_DIR\n"
		   "Summarise a .moem pack: format, id, model config, precisions, sizes.\n"
		   "  --verify        check every tensor and blob checksum\n"
		   "  --quant-error   expert FFN output error of each precision vs bf16\n"
		   "  --experts N     experts sampled by --quant-error (default 8)\n"
		   "  --tensors       list tensors;  --blobs  list blobs\n");
}

static void print_model(const struct moem_model_config *c, bool synthetic)
{
	uint32_t n_moe = moem_n_moe_layers(c);

	printf("model:      %s%s, %u layers (%u MoE, %u dense), %u experts, top-%u\n",
	       moem_arch_name(c->arch), synthetic ? " (synthetic)" : "", c->n_layers, n_moe,
	       c->n_layers - n_moe, c->n_experts, c->top_k);
	printf("shapes:     hidden %u, expert width %u", c->hidden, c->moe_inter);
	if (c->n_shared)
		printf(", %u shared experts x %u", c->n_shared, c->shared_inter);
	if (n_moe < c->n_layers)
		printf(", dense width %u", c->dense_inter);
	printf(", vocab %u, %u heads (%u kv) x %u\n", c->vocab, c->n_heads, c->n_kv_heads,
	       c->head_dim);
	printf("routing:    norm_topk_prob %s, routed scaling %g", c->norm_topk_prob ? "yes" : "no",
	       (double)c->routed_scaling);
	if (c->n_group)
		printf(", within the best %u of %u expert groups", c->topk_group, c->n_group);
	printf("; source dtype %s\n", moem_dtype_name(c->dtype));
}

static struct json_object *config_json(const struct moem_model_config *c)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "arch", json_object_new_string(moem_arch_name(c->arch)));
	json_object_object_add(o, "n_layers", json_object_new_int64(c->n_layers));
	json_object_object_add(o, "n_moe_layers", json_object_new_int64(moem_n_moe_layers(c)));
	json_object_object_add(o, "n_experts", json_object_new_int64(c->n_experts));
	json_object_object_add(o, "top_k", json_object_new_int64(c->top_k));
	json_object_object_add(o, "hidden", json_object_new_int64(c->hidden));
	json_object_object_add(o, "moe_inter", json_object_new_int64(c->moe_inter));
	json_object_object_add(o, "dense_inter", json_object_new_int64(c->dense_inter));
	json_object_object_add(o, "n_shared", json_object_new_int64(c->n_shared));
	json_object_object_add(o, "norm_topk_prob", json_object_new_boolean(c->norm_topk_prob));
	json_object_object_add(o, "n_group", json_object_new_int64(c->n_group));
	json_object_object_add(o, "topk_group", json_object_new_int64(c->topk_group));
	json_object_object_add(o, "dtype", json_object_new_string(moem_dtype_name(c->dtype)));
	return o;
}

/* The pack's tokenizer: kind, vocabulary, special tokens, chat template. */
static void print_tokenizer(const struct moem_pack *p)
{
	struct moem_tokenizer *t;
	struct moem_tok_info ti;
	int ret = moem_pack_has_tokenizer(p);

	if (ret <= 0) {
		printf("tokenizer:  %s\n",
		       ret < 0 ? moem_strerror(ret) : "none (the pack has no tokenizer section)");
		return;
	}
	ret = moem_tok_load_pack(&t, p);
	if (ret) {
		printf("tokenizer:  present but not usable: %s\n", moem_strerror(ret));
		return;
	}
	moem_tok_info(t, &ti);
	printf("tokenizer:  %s, vocab %u (%u model + %u added, %u merges), chat template %s\n",
	       moem_tok_kind_name(ti.kind), ti.vocab_size, ti.n_model, ti.n_added, ti.n_merges,
	       ti.chat_template ? "yes" : "no");
	printf("special:   ");
	for (uint32_t i = 0, shown = 0; i < ti.n_added; i++) {
		uint32_t id;
		bool special;
		const char *s = moem_tok_added(t, i, &id, &special);

		if (!special)
			continue;
		if (shown++ == 8) {
			printf(" ... (%u special)", ti.n_special);
			break;
		}
		printf(" %s=%u", s, id);
	}
	printf("\n");
	moem_tok_free(t);
}

static int info_pack(const char *path, int json, int verify, int qerr, uint32_t experts,
		     int tensors, int blobs)
{
	uint64_t bytes[4][MOEM_PREC_NR] = {0}, count[4][MOEM_PREC_NR] = {0}, tbytes = 0;
	struct moem_progress prog;
	struct moem_synth_params sp;
	struct moem_pack_id id;
	struct moem_pack *p;
	const struct moem_model_config *c;
	uint32_t major, minor, mask;
	char b1[32], idbuf[33], desc[96];
	bool synthetic;
	int ret;

	ret = moem_pack_open(path, &p);
	if (ret)
		return moem_tool_fail("info", ret, NULL);
	c = moem_pack_config(p);
	mask = moem_pack_precisions(p);
	synthetic = !moem_pack_synth(p, &sp);
	moem_pack_get_id(p, &id);
	moem_pack_version(p, &major, &minor);
	for (uint32_t i = 0; i < moem_pack_n_blobs(p); i++) {
		const struct moem_pack_blob *b = moem_pack_blob_at(p, i);

		bytes[b->kind][b->prec] += b->size;
		count[b->kind][b->prec]++;
	}
	for (uint32_t i = 0; i < moem_pack_n_tensors(p); i++)
		tbytes += moem_pack_tensor_at(p, i)->size;
	if (json) {
		struct json_object *o = json_object_new_object(), *pr = json_object_new_object();
		char fmt[24];

		json_object_object_add(o, "path", json_object_new_string(path));
		/* the version the pack says, as the text output prints it */
		snprintf(fmt, sizeof(fmt), "%u.%u", major, minor);
		json_object_object_add(o, "format", json_object_new_string(fmt));
		json_object_object_add(o, "id",
				       json_object_new_string(moem_pack_id_str(&id, idbuf)));
		json_object_object_add(o, "file_size",
				       json_object_new_int64((int64_t)moem_pack_file_size(p)));
		json_object_object_add(o, "synthetic", json_object_new_boolean(synthetic));
		json_object_object_add(o, "config", config_json(c));
		for (int q = 0; q < MOEM_PREC_NR; q++)
			if (mask & (1u << q))
				json_object_object_add(
					pr, moem_prec_name((enum moem_prec)q),
					json_object_new_int64((int64_t)bytes[MOEM_BLOB_ROUTED][q]));
		json_object_object_add(o, "routed_bytes", pr);
		json_object_object_add(o, "n_tensors",
				       json_object_new_int64(moem_pack_n_tensors(p)));
		json_object_object_add(o, "n_blobs", json_object_new_int64(moem_pack_n_blobs(p)));
		json_object_object_add(o, "tokenizer",
				       json_object_new_boolean(moem_pack_has_tokenizer(p) > 0));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
									 JSON_C_TO_STRING_SPACED));
		json_object_put(o);
	} else {
		printf("pack:       %s, format %u.%u, %s\n", path, major, minor,
		       moem_fmt_bytes(moem_pack_file_size(p), b1, sizeof(b1)));
		printf("id:         %s\n", moem_pack_id_str(&id, idbuf));
		print_model(c, synthetic);
		print_tokenizer(p);
		printf("tensors:    %u non-expert, %s\n", moem_pack_n_tensors(p),
		       moem_fmt_bytes(tbytes, b1, sizeof(b1)));
		for (int q = 0; q < MOEM_PREC_NR; q++) {
			if (!count[MOEM_BLOB_ROUTED][q])
				continue;
			printf("experts:    %-4s %6llu blobs, %s (%.2f bits/weight)\n",
			       moem_prec_name((enum moem_prec)q),
			       (unsigned long long)count[MOEM_BLOB_ROUTED][q],
			       moem_fmt_bytes(bytes[MOEM_BLOB_ROUTED][q], b1, sizeof(b1)),
			       moem_prec_bits_per_weight((enum moem_prec)q));
		}
		if (count[MOEM_BLOB_SHARED][MOEM_PREC_BF16])
			printf("shared:     %llu blobs, %s\n",
			       (unsigned long long)count[MOEM_BLOB_SHARED][MOEM_PREC_BF16],
			       moem_fmt_bytes(bytes[MOEM_BLOB_SHARED][MOEM_PREC_BF16], b1,
					      sizeof(b1)));
		if (count[MOEM_BLOB_DENSE][MOEM_PREC_BF16])
			printf("dense:      %llu blobs, %s\n",
			       (unsigned long long)count[MOEM_BLOB_DENSE][MOEM_PREC_BF16],
			       moem_fmt_bytes(bytes[MOEM_BLOB_DENSE][MOEM_PREC_BF16], b1,
					      sizeof(b1)));
		if (synthetic) {
			printf("workload:   synthetic, %u workloads (", sp.n_workloads);
			for (uint32_t w = 0; w < sp.n_workloads; w++)
				printf("%s%s", w ? ", " : "", sp.workload[w]);
			printf("), zipf %g, seed %llu\n", sp.zipf_s, (unsigned long long)sp.seed);
		}
	}
	for (uint32_t i = 0; tensors && i < moem_pack_n_tensors(p); i++) {
		const struct moem_pack_tensor *t = moem_pack_tensor_at(p, i);

		printf("  tensor %-60s %-8s %-10s [%llu", t->name, moem_dtype_name(t->dtype),
		       moem_tensor_role_name(t->role), (unsigned long long)t->shape[0]);
		for (uint32_t d = 1; d < t->ndim; d++)
			printf(", %llu", (unsigned long long)t->shape[d]);
		printf("] @%llu\n", (unsigned long long)t->offset);
	}
	for (uint32_t i = 0; blobs && i < moem_pack_n_blobs(p); i++) {
		const struct moem_pack_blob *b = moem_pack_blob_at(p, i);

		printf("  blob %-28s @%-12llu %10llu bytes xxh3 %016llx\n",
		       moem_pack_blob_desc(b, desc, sizeof(desc)), (unsigned long long)b->offset,
		       (unsigned long long)b->size, (unsigned long long)b->xxh3);
	}
	if (verify) {
		ret = moem_pack_verify(p, &prog);
		if (ret) {
			moem_pack_close(p);
			return moem_tool_fail("info", ret, "verify");
		}
		printf("verify:     every tensor and blob checksum matches\n");
	}
	if (qerr) {
		ret = moem_tool_qerr_report(p, experts, 4, 1, 0);
		if (ret) {
			moem_pack_close(p);
			return moem_tool_fail("info", ret, "--quant-error");
		}
	}
	moem_pack_close(p);
	return 0;
}

static int info_ckpt(const char *dir)
{
	struct moem_synth_params sp;
	struct moem_ckpt *ck;
	char b1[32];
	int ret;

	ret = moem_ckpt_open(dir, &ck);
	if (ret)
		return moem_tool_fail("info", ret, NULL);
	printf("checkpoint: %s, %u safetensors file%s, %zu tensors, %s\n", dir,
	       moem_ckpt_n_files(ck), moem_ckpt_n_files(ck) == 1 ? "" : "s", moem_ckpt_n_specs(ck),
	       moem_fmt_bytes(moem_ckpt_tensor_bytes(ck), b1, sizeof(b1)));
	print_model(moem_ckpt_config(ck), !moem_ckpt_synth(ck, &sp));
	moem_ckpt_close(ck);
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},	 {"verify", no_argument, NULL, 'v'},
		{"quant-error", no_argument, NULL, 'q'}, {"experts", required_argument, NULL, 'e'},
		{"tensors", no_argument, NULL, 't'},	 {"blobs", no_argument, NULL, 'b'},
		{"help", no_argument, NULL, 'h'},	 {0},
	};
	int c, json = 0, verify = 0, qerr = 0, tensors = 0, blobs = 0;
	unsigned long experts = 8;
	struct stat st;
	char *end;

	while ((c = getopt_long(argc, argv, "jvqe:tbh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = 1;
			break;
		case 'v':
			verify = 1;
			break;
		case 'q':
			qerr = 1;
			break;
		case 'e':
			errno = 0;
			experts = strtoul(optarg, &end, 10);
			if (!*optarg || *end || errno || !experts || experts > 100000) {
				fprintf(stderr, "moem info: --experts: '%s' is not 1..100000\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			tensors = 1;
			break;
		case 'b':
			blobs = 1;
			break;
		case 'h':
			info_usage(stdout);
			return 0;
		default:
			info_usage(stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		info_usage(stderr);
		return 2;
	}
	if (!stat(argv[optind], &st) && S_ISDIR(st.st_mode))
		return info_ckpt(argv[optind]);
	return info_pack(argv[optind], json, verify, qerr, (uint32_t)experts, tensors, blobs);
}

MOEM_CMD(info_cmd, "info", "summarise a .moem pack or a checkpoint directory", cmd_info);
