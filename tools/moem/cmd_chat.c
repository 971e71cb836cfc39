// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem chat: a conversation with the model through its own chat template.
 * Interactive: each line of standard input is a user message; the reply
 * streams back and joins the conversation, which is rendered whole with
 * the template for every turn (as transformers' apply_chat_template with
 * add_generation_prompt). --conversation FILE instead answers a
 * conversation read from a JSON file and exits.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/chat.h>
#include <moem/error.h>
#include <moem/util.h>

#include "cmd.h"
#include "gen_util.h"
#include "tok_source.h"

/* Largest line read as one user message. */
#define CHAT_LINE_MAX (1u << 20)

struct chat {
	struct moem_gen g;
	struct moem_chat_template *ct;
	struct json_object *msgs; /* the conversation so far */
	struct json_object *base; /* what /reset returns to (the system prompt) */
	const char *vars;	  /* --vars JSON */
	bool tty;
};

static void chat_usage(FILE *f)
{
	fprintf(f, "usage: moem chat --pack FILE [--system TEXT] [--conversation FILE] [options]\n"
		   "Talk with the model through its chat template: each line of standard input "
		   "is a\n"
		   "user message, the reply is streamed back. Lines: /reset starts over, /quit "
		   "ends\n"
		   "(as does end of input).\n"
		   "  --system TEXT            a system message first\n"
		   "  --conversation FILE      answer the conversation in FILE (a JSON array of\n"
		   "                           {\"role\", \"content\"} messages, or an object with "
		   "\"messages\")\n"
		   "                           and exit; - reads it from standard input\n"
		   "  --template FILE          this Jinja chat template instead of the pack's\n"
		   "  --vars JSON              more template variables, e.g. "
		   "'{\"enable_thinking\": false}'\n" MOEM_GEN_USAGE);
}

static struct json_object *message(const char *role, const char *content, size_t len)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "role", json_object_new_string(role));
	json_object_object_add(m, "content", json_object_new_string_len(content, (int)len));
	return m;
}

/* Render the conversation with the generation prompt and encode it as apply_chat_template. */
static int render(struct chat *c, int32_t **ids, uint32_t *n)
{
	struct moem_chat_args a = {0};
	char *text;
	size_t len;
	int ret;

	a.messages_json = json_object_to_json_string_ext(c->msgs, JSON_C_TO_STRING_PLAIN);
	a.messages_len = strlen(a.messages_json);
	if (c->vars) {
		a.extra_json = c->vars;
		a.extra_len = strlen(c->vars);
	}
	a.bos_token = moem_tok_special_str(c->g.tok, "bos_token");
	a.eos_token = moem_tok_special_str(c->g.tok, "eos_token");
	a.add_generation_prompt = true;
	ret = moem_chat_render(c->ct, &a, &text, &len);
	if (ret)
		return ret;
	ret = moem_gen_encode(&c->g, text, len, false, ids, n);
	free(text);
	return ret;
}

/*
 * Answer the conversation: stream the reply (or print its JSON) and add
 * it as the assistant's message. 0, or -errno with the conversation as
 * it was.
 */
static int answer(struct chat *c)
{
	struct moem_gen_out o = {0};
	int32_t *ids = NULL;
	uint32_t n = 0;
	int ret = render(c, &ids, &n);

	if (!ret)
		ret = moem_gen_run(&c->g, ids, n, c->g.r.json && !c->g.json_stream ? NULL : stdout,
				   &o);
	free(ids);
	if (ret) {
		if (o.len)
			putchar('\n');
		moem_gen_out_free(&o);
		return ret;
	}
	if (c->g.r.json) {
		struct json_object *j = moem_gen_json(&c->g, &o);

		puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(j);
	} else {
		putchar('\n');
		if (!c->g.r.quiet)
			moem_gen_summary(&c->g, &o, "chat");
	}
	fflush(stdout);
	json_object_array_add(c->msgs, message("assistant", o.text, o.len));
	moem_gen_out_free(&o);
	return 0;
}

/* --conversation: an array of messages, or {"messages": [...]}. */
static int load_conversation(struct chat *c, const char *path)
{
	struct json_object *o, *m = NULL;
	char *buf;
	size_t len;
	int ret = tok_read_all(path, &buf, &len);

	if (ret)
		return ret;
	o = json_tokener_parse(buf);
	free(buf);
	if (o && json_object_is_type(o, json_type_object))
		json_object_object_get_ex(o, "messages", &m);
	else if (o && json_object_is_type(o, json_type_array))
		m = o;
	if (!m || !json_object_is_type(m, json_type_array) || !json_object_array_length(m)) {
		json_object_put(o);
		return moem_errf(EINVAL,
				 "%s: want a JSON array of {\"role\", \"content\"} messages (or an "
				 "object with \"messages\")",
				 path);
	}
	for (size_t i = 0; i < json_object_array_length(m); i++)
		json_object_array_add(c->msgs, json_object_get(json_object_array_get_idx(m, i)));
	json_object_put(o);
	return 0;
}

static void reset(struct chat *c)
{
	json_object_put(c->msgs);
	c->msgs = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(c->base); i++)
		json_object_array_add(c->msgs,
				      json_object_get(json_object_array_get_idx(c->base, i)));
}

/*
 * Read one line (without its newline); 0 at end of input, -1 on error (a
 * message set), -2 for a line over CHAT_LINE_MAX (skipped up to its
 * newline, for at most CHAT_SKIP_MAX bytes more: past that, an error, as
 * endless input without newlines is no conversation), else its length + 1.
 */
#define CHAT_SKIP_MAX (64ul << 20)
static long read_line(char **line, size_t *cap)
{
	ssize_t n = moem_getline(line, cap, stdin, "standard input", CHAT_LINE_MAX);

	if (n == -EFBIG) {
		for (size_t k = 0; k < CHAT_SKIP_MAX; k++) {
			int ch = getc(stdin);

			if (ch == '\n' || ch == EOF)
				return ferror(stdin) ? -1 : -2;
		}
		moem_errf(EFBIG, "standard input: a line of more than %lu bytes", CHAT_SKIP_MAX);
		return -1;
	}
	if (n < 0)
		return n == -ENODATA ? 0 : -1;
	if (n && (*line)[n - 1] == '\n')
		(*line)[--n] = 0;
	if (n && (*line)[n - 1] == '\r')
		(*line)[--n] = 0;
	return (long)n + 1;
}

/* A message must be UTF-8: the tokenizer says where it is not. */
static int check_text(struct chat *c, const char *s, size_t len)
{
	struct moem_tok_ids ids = {0};
	int ret = moem_tok_encode(c->g.tok, s, len, 0, &ids);

	moem_tok_ids_free(&ids);
	return ret;
}

static int interactive(struct chat *c)
{
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;

	if (c->tty)
		fprintf(stderr,
			"moem chat: one message per line; /reset starts over, /quit ends\n");
	for (;;) {
		long n;
		int ret;

		if (c->tty) {
			fputs("> ", stderr);
			fflush(stderr);
		}
		n = read_line(&line, &cap);
		if (n == -2) {
			fprintf(stderr, "moem chat: a message of more than %u bytes (dropped)\n",
				CHAT_LINE_MAX);
			rc = 1;
			continue;
		}
		if (n <= 0) {
			if (n < 0)
				fprintf(stderr, "moem chat: %s\n", moem_last_error());
			rc |= n < 0;
			break;
		}
		if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
			break;
		if (!strcmp(line, "/reset")) {
			reset(c);
			continue;
		}
		if (!line[0])
			continue;
		ret = check_text(c, line, (size_t)(n - 1));
		if (!ret) {
			json_object_array_add(c->msgs, message("user", line, (size_t)(n - 1)));
			ret = answer(c);
			if (ret) /* the conversation stays as it was */
				json_object_array_del_idx(c->msgs,
							  json_object_array_length(c->msgs) - 1, 1);
		}
		if (ret) {
			fprintf(stderr, "moem chat: %s (message dropped)\n", moem_strerror(ret));
			rc = 1;
		}
	}
	free(line);
	return rc;
}

static int cmd_chat(int argc, char **argv)
{
	static const struct option own[] = {
		{"system", required_argument, NULL, 's'},
		{"conversation", required_argument, NULL, 'c'},
		{"template", required_argument, NULL, 'T'},
		{"vars", required_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct option opts[MOEM_GEN_N_OPTS + MOEM_ARRAY_SIZE(own)];
	struct chat c = {0};
	const char *system = NULL, *conv = NULL, *tmpl = NULL;
	char *tsrc = NULL;
	size_t tlen;
	int opt, idx, ret, rc = 1;

	moem_gen_init(&c.g);
	moem_gen_options(opts);
	memcpy(opts + MOEM_GEN_N_OPTS, own, sizeof(own));
	c.msgs = json_object_new_array();
	c.base = json_object_new_array();
	while ((opt = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
		switch (opt) {
		case 0:
			ret = moem_gen_set(&c.g, opts[idx].name, optarg ? optarg : "");
			if (ret) {
				moem_tool_fail("chat", ret, NULL);
				goto out;
			}
			break;
		case 's':
			system = optarg;
			break;
		case 'c':
			conv = optarg;
			break;
		case 'T':
			tmpl = optarg;
			break;
		case 'v':
			c.vars = optarg;
			break;
		case 'h':
			chat_usage(stdout);
			rc = 0;
			goto out;
		default:
			chat_usage(stderr);
			rc = 2;
			goto out;
		}
	}
	if (optind != argc || !c.g.r.ea.o.pack_path) {
		fprintf(stderr, "moem chat: %s\n",
			optind != argc ? "unexpected argument" : "--pack is required");
		chat_usage(stderr);
		rc = 2;
		goto out;
	}
	if (system)
		json_object_array_add(c.base, message("system", system, strlen(system)));
	reset(&c);
	ret = conv ? load_conversation(&c, conv) : 0;
	if (!ret && tmpl)
		ret = tok_read_all(tmpl, &tsrc, &tlen);
	if (!ret && tmpl)
		ret = moem_chat_parse(tsrc, tlen, &c.ct);
	if (!ret)
		ret = moem_gen_open(&c.g);
	if (!ret && !tmpl)
		ret = moem_chat_from_tokenizer(c.g.tok, &c.ct);
	if (ret) {
		moem_tool_fail("chat", ret, NULL);
		goto out;
	}
	if (c.g.synthetic && !c.g.r.quiet && !c.g.r.json)
		fprintf(stderr,
			"moem chat: %s is a synthetic model (random weights): its "
			"replies are gibberish\n",
			c.g.r.ea.o.pack_path);
	c.tty = isatty(STDIN_FILENO) && !conv;
	if (conv) {
		ret = answer(&c);
		rc = ret ? moem_tool_fail("chat", ret, NULL) : 0;
	} else {
		rc = interactive(&c);
	}
out:
	json_object_put(c.msgs);
	json_object_put(c.base);
	moem_chat_free(c.ct);
	free(tsrc);
	moem_gen_free(&c.g);
	return rc;
}

MOEM_CMD(chat_cmd, "chat", "talk with the model through its chat template (full decode)", cmd_chat);
