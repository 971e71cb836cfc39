/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Chat templates: a conversation rendered with the model's own
 * chat_template (tokenizer_config.json), as transformers'
 * apply_chat_template renders it (jinja2 with trim_blocks and
 * lstrip_blocks). The Jinja subset is what the supported families'
 * templates use: if/elif/else, for (loop.*, else, filter), set, namespace,
 * macros, break/continue, filters (trim, tojson, length, default, join,
 * ...), tests (defined, none, string, ...), string and dict methods,
 * slicing, raise_exception, strftime_now, {% generation %}. Anything else is refused with an error naming
 * it (Documentation/tokenizers.md lists the subset).
 */
#ifndef MOEM_CHAT_H
#define MOEM_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct moem_chat_template;
struct moem_tokenizer;

/* Parse a template; -EINVAL with "template line N: ..." on a syntax error. */
int moem_chat_parse(const char *src, size_t len, struct moem_chat_template **out);
/* The tokenizer's chat_template; -ENOENT (with a message) if it has none. */
int moem_chat_from_tokenizer(const struct moem_tokenizer *t, struct moem_chat_template **out);
void moem_chat_free(struct moem_chat_template *t);

struct moem_chat_args {
	/* A JSON array of messages: [{"role": "user", "content": "..."}, ...]. */
	const char *messages_json;
	size_t messages_len;
	/* Optional JSON object of more variables ({"tools": [...], "enable_thinking": false}). */
	const char *extra_json;
	size_t extra_len;
	const char *bos_token, *eos_token; /* NULL: undefined in the template */
	bool add_generation_prompt;
	/*
	 * The time strftime_now() formats (in the local time zone, as
	 * transformers' does), in seconds since the epoch; 0: the time of
	 * the call.
	 */
	int64_t now;
};

/*
 * Render into a malloc'ed NUL-terminated string (*len bytes). Errors:
 * -EINVAL for bad JSON or a template error (raise_exception's message is
 * kept: "template line N raised: ..."), -E2BIG when the output or the
 * work would exceed moem's bounds. A template is read-only: threads may
 * render the same one at once.
 */
int moem_chat_render(const struct moem_chat_template *t, const struct moem_chat_args *a, char **out,
		     size_t *len);

#endif /* MOEM_CHAT_H */
