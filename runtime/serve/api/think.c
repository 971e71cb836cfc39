// SPDX-License-Identifier: GPL-2.0-only
/*
 * Reasoning split from content (openai.h, "reasoning"): a small state
 * machine over streamed text. It holds back only what could still be a
 * <think> or </think> tag (and, before the content, whitespace), so what
 * it holds is bounded by the tags' length plus that whitespace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/openai.h>

static const char open_tag[] = "<think>";
static const char close_tag[] = "</think>";
#define OPEN_LEN  (sizeof(open_tag) - 1)
#define CLOSE_LEN (sizeof(close_tag) - 1)

enum {
	T_START,   /* deciding whether the text opens with <think> */
	T_REASON,  /* inside the block */
	T_AFTER,   /* after </think>: dropping the whitespace before the content */
	T_CONTENT, /* content to the end */
};

int moem_oai_reasoning_parse(const char *name, enum moem_oai_reasoning *out)
{
	if (!strcmp(name, "none"))
		*out = MOEM_OAI_REASONING_NONE;
	else if (!strcmp(name, "qwen3"))
		*out = MOEM_OAI_REASONING_QWEN3;
	else if (!strcmp(name, "deepseek_r1"))
		*out = MOEM_OAI_REASONING_DEEPSEEK_R1;
	else
		return -EINVAL;
	return 0;
}

void moem_oai_think_init(struct moem_oai_think *f, enum moem_oai_reasoning mode)
{
	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->state = mode == MOEM_OAI_REASONING_NONE ? T_CONTENT : T_START;
}

void moem_oai_think_free(struct moem_oai_think *f)
{
	free(f->buf);
	free(f->reason);
	free(f->content);
	memset(f, 0, sizeof(*f));
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int put(char **p, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (!n)
		return 0;
	if (*len + n + 1 > *cap) {
		size_t c = (*len + n + 1) * 2;
		char *b = realloc(*p, c);

		if (!b)
			return -ENOMEM;
		*p = b;
		*cap = c;
	}
	memcpy(*p + *len, s, n);
	*len += n;
	(*p)[*len] = 0;
	return 0;
}

static int reason(struct moem_oai_think *f, const char *s, size_t n)
{
	return put(&f->reason, &f->reason_len, &f->reason_cap, s, n);
}

static int content(struct moem_oai_think *f, const char *s, size_t n)
{
	return put(&f->content, &f->content_len, &f->content_cap, s, n);
}

static void consume(struct moem_oai_think *f, size_t n)
{
	if (!n)
		return;
	memmove(f->buf, f->buf + n, f->len - n);
	f->len -= n;
}

/* How many bytes at the end of buf could begin tag. */
static size_t held(const struct moem_oai_think *f, const char *tag, size_t tl)
{
	for (size_t k = tl - 1 < f->len ? tl - 1 : f->len; k; k--)
		if (!memcmp(f->buf + f->len - k, tag, k))
			return k;
	return 0;
}

static int run(struct moem_oai_think *f, bool flush)
{
	for (;;) {
		const char *p;
		size_t ws, k;
		int ret;

		switch (f->state) {
		case T_START:
			for (ws = 0; ws < f->len && is_ws(f->buf[ws]); ws++)
				;
			k = f->len - ws < OPEN_LEN ? f->len - ws : OPEN_LEN;
			if (memcmp(f->buf + ws, open_tag, k)) {
				/* no block at the start */
				f->state =
					f->mode == MOEM_OAI_REASONING_QWEN3 ? T_CONTENT : T_REASON;
				continue;
			}
			if (k == OPEN_LEN) {
				consume(f, ws + OPEN_LEN);
				f->state = T_REASON;
				continue;
			}
			if (!flush)
				return 0; /* a prefix of <think>: wait */
			f->state = f->mode == MOEM_OAI_REASONING_QWEN3 ? T_CONTENT : T_REASON;
			continue;
		case T_REASON:
			p = f->len ? memmem(f->buf, f->len, close_tag, CLOSE_LEN) : NULL;
			if (p) {
				ret = reason(f, f->buf, (size_t)(p - f->buf));
				if (ret)
					return ret;
				consume(f, (size_t)(p - f->buf) + CLOSE_LEN);
				f->state = T_AFTER;
				continue;
			}
			k = flush ? f->len : f->len - held(f, close_tag, CLOSE_LEN);
			ret = reason(f, f->buf, k);
			if (!ret)
				consume(f, k);
			return ret;
		case T_AFTER:
			for (ws = 0; ws < f->len && is_ws(f->buf[ws]); ws++)
				;
			consume(f, ws);
			if (!f->len)
				return 0;
			f->state = T_CONTENT;
			continue;
		default:
			ret = content(f, f->buf, f->len);
			if (!ret)
				consume(f, f->len);
			return ret;
		}
	}
}

int moem_oai_think_feed(struct moem_oai_think *f, const char *text, size_t len, bool flush)
{
	f->reason_len = 0;
	f->content_len = 0;
	/* buf is allocated from the first call on, so that no NULL is offset */
	if (len || !f->buf) {
		if (f->len + len + 1 > f->cap) {
			size_t c = (f->len + len + 1) * 2;
			char *b = realloc(f->buf, c);

			if (!b)
				return -ENOMEM;
			f->buf = b;
			f->cap = c;
		}
		if (len)
			memcpy(f->buf + f->len, text, len);
		f->len += len;
	}
	return run(f, flush);
}
