// SPDX-License-Identifier: GPL-2.0-only
/* Static expert placement rules (place.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/place.h>

#define SYNTAX	 "want [layers=LIST][,experts=LIST]:cpu|gpu|auto"
#define MAX_TEXT 256

const char *moem_place_name(enum moem_place w)
{
	return w == MOEM_PLACE_CPU ? "cpu" : w == MOEM_PLACE_GPU ? "gpu" : "auto";
}

/* s[0..n) without surrounding blanks, into buf (n < MAX_TEXT). */
static const char *trimmed(const char *s, size_t n, char *buf)
{
	while (n && isspace((unsigned char)*s)) {
		s++;
		n--;
	}
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	memcpy(buf, s, n);
	buf[n] = 0;
	return buf;
}

static int parse_index(const char *rule, const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!isdigit((unsigned char)*s))
		return moem_errf(EINVAL, "place '%s': '%s' is not a number", rule, s);
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*end)
		return moem_errf(EINVAL, "place '%s': '%s' is not a number", rule, s);
	if (errno || v > MOEM_PLACE_MAX_INDEX)
		return moem_errf(EINVAL, "place '%s': %s is above %u", rule, s,
				 MOEM_PLACE_MAX_INDEX);
	*out = (uint32_t)v;
	return 0;
}

/* One item of a list: N, N-M or *. */
static int parse_item(const char *rule, const char *key, const char *item,
		      struct moem_place_range *rg, uint8_t *n, bool *star)
{
	char lo[MAX_TEXT], hi[MAX_TEXT];
	const char *dash = strchr(item, '-');
	struct moem_place_range r;
	int ret;

	if (!*item)
		return moem_errf(EINVAL, "place '%s': an empty item in %s=", rule, key);
	if (!strcmp(item, "*")) {
		*star = true;
		return 0;
	}
	if (dash) {
		trimmed(item, (size_t)(dash - item), lo);
		trimmed(dash + 1, strlen(dash + 1), hi);
		ret = parse_index(rule, lo, &r.lo);
		if (!ret)
			ret = parse_index(rule, hi, &r.hi);
		if (ret)
			return ret;
		if (r.lo > r.hi)
			return moem_errf(EINVAL, "place '%s': the range %s is empty (%u > %u)",
					 rule, item, r.lo, r.hi);
	} else {
		ret = parse_index(rule, item, &r.lo);
		if (ret)
			return ret;
		r.hi = r.lo;
	}
	if (*n == MOEM_PLACE_MAX_RANGES)
		return moem_errf(EINVAL, "place '%s': more than %u items in %s=", rule,
				 MOEM_PLACE_MAX_RANGES, key);
	rg[(*n)++] = r;
	return 0;
}

int moem_place_parse(const char *text, struct moem_place_rule *out)
{
	struct moem_place_rule r = {0};
	bool seen[2] = {false, false}, star[2] = {false, false};
	char where[MAX_TEXT], tok[MAX_TEXT];
	const char *colon, *s, *end;
	int key = -1, ret;

	if (strlen(text) >= MAX_TEXT)
		return moem_errf(EINVAL, "place: a rule of %zu bytes (at most %d)", strlen(text),
				 MAX_TEXT - 1);
	colon = strrchr(text, ':');
	if (!colon)
		return moem_errf(EINVAL, "place '%s': no ':' before the placement: " SYNTAX, text);
	trimmed(colon + 1, strlen(colon + 1), where);
	if (!strcmp(where, "cpu"))
		r.where = MOEM_PLACE_CPU;
	else if (!strcmp(where, "gpu"))
		r.where = MOEM_PLACE_GPU;
	else if (!strcmp(where, "auto"))
		r.where = MOEM_PLACE_AUTO;
	else
		return moem_errf(EINVAL, "place '%s': '%s' is not cpu, gpu or auto", text, where);
	for (s = text; s <= colon; s = end + 1) {
		const char *eq;

		end = memchr(s, ',', (size_t)(colon - s));
		if (!end)
			end = colon;
		trimmed(s, (size_t)(end - s), tok);
		eq = strchr(tok, '=');
		if (eq) {
			char name[MAX_TEXT];

			trimmed(tok, (size_t)(eq - tok), name);
			if (!strcmp(name, "layers"))
				key = 0;
			else if (!strcmp(name, "experts"))
				key = 1;
			else
				return moem_errf(EINVAL, "place '%s': unknown key '%s': " SYNTAX,
						 text, name);
			if (seen[key])
				return moem_errf(EINVAL, "place '%s': %s= given twice", text, name);
			seen[key] = true;
			memmove(tok, eq + 1, strlen(eq + 1) + 1);
			trimmed(tok, strlen(tok), tok);
		} else if (key < 0) {
			return moem_errf(EINVAL,
					 "place '%s': '%s' before layers= or experts=: " SYNTAX,
					 text, tok);
		}
		ret = key ? parse_item(text, "experts", tok, r.experts, &r.n_experts, &star[1])
			  : parse_item(text, "layers", tok, r.layers, &r.n_layers, &star[0]);
		if (ret)
			return ret;
	}
	if (star[0])
		r.n_layers = 0;
	if (star[1])
		r.n_experts = 0;
	*out = r;
	return 0;
}

int moem_place_add(struct moem_place_rules *p, const char *text)
{
	struct moem_place_rule r;
	int ret;

	if (p->n >= MOEM_PLACE_MAX_RULES)
		return moem_errf(E2BIG, "place '%s': at most %d rules", text, MOEM_PLACE_MAX_RULES);
	ret = moem_place_parse(text, &r);
	if (ret)
		return ret;
	p->r[p->n++] = r;
	return 0;
}

/* Append to buf what snprintf would, keeping *len the full length. */
static void put_str(char *buf, size_t size, int *len, const char *s)
{
	size_t at = (size_t)*len < size ? (size_t)*len : size;

	*len += snprintf(buf + at, size - at, "%s", s);
}

static void put_range(char *buf, size_t size, int *len, const struct moem_place_range *r)
{
	size_t at = (size_t)*len < size ? (size_t)*len : size;

	if (r->lo == r->hi)
		*len += snprintf(buf + at, size - at, "%u", r->lo);
	else
		*len += snprintf(buf + at, size - at, "%u-%u", r->lo, r->hi);
}

static void put_list(char *buf, size_t size, int *len, const char *key,
		     const struct moem_place_range *rg, uint8_t n)
{
	put_str(buf, size, len, key);
	put_str(buf, size, len, "=");
	for (uint8_t i = 0; i < n; i++) {
		if (i)
			put_str(buf, size, len, ",");
		put_range(buf, size, len, &rg[i]);
	}
}

int moem_place_format(const struct moem_place_rule *r, char *buf, size_t size)
{
	int len = 0;

	if (size)
		buf[0] = 0;
	if (r->n_layers || !r->n_experts) {
		if (r->n_layers)
			put_list(buf, size, &len, "layers", r->layers, r->n_layers);
		else
			put_str(buf, size, &len, "layers=*");
	}
	if (r->n_experts) {
		if (len)
			put_str(buf, size, &len, ",");
		put_list(buf, size, &len, "experts", r->experts, r->n_experts);
	}
	put_str(buf, size, &len, ":");
	put_str(buf, size, &len, moem_place_name(r->where));
	return len;
}

int moem_place_format_all(const struct moem_place_rules *p, char *buf, size_t size)
{
	int len = 0;

	if (size)
		buf[0] = 0;
	for (uint32_t i = 0; i < p->n; i++) {
		size_t at;

		if (i)
			put_str(buf, size, &len, "; ");
		at = (size_t)len < size ? (size_t)len : size;
		len += moem_place_format(&p->r[i], buf + at, size - at);
	}
	return len;
}

static bool in(const struct moem_place_range *rg, uint8_t n, uint32_t v)
{
	if (!n)
		return true;
	for (uint8_t i = 0; i < n; i++)
		if (v >= rg[i].lo && v <= rg[i].hi)
			return true;
	return false;
}

bool moem_place_matches(const struct moem_place_rule *r, uint32_t m, uint32_t x)
{
	return in(r->layers, r->n_layers, m) && in(r->experts, r->n_experts, x);
}

static bool rule_equal(const struct moem_place_rule *a, const struct moem_place_rule *b)
{
	if (a->where != b->where || a->n_layers != b->n_layers || a->n_experts != b->n_experts)
		return false;
	for (uint8_t i = 0; i < a->n_layers; i++)
		if (a->layers[i].lo != b->layers[i].lo || a->layers[i].hi != b->layers[i].hi)
			return false;
	for (uint8_t i = 0; i < a->n_experts; i++)
		if (a->experts[i].lo != b->experts[i].lo || a->experts[i].hi != b->experts[i].hi)
			return false;
	return true;
}

bool moem_place_equal(const struct moem_place_rules *a, const struct moem_place_rules *b)
{
	if (a->n != b->n)
		return false;
	for (uint32_t i = 0; i < a->n; i++)
		if (!rule_equal(&a->r[i], &b->r[i]))
			return false;
	return true;
}

/* The highest index a list names, or -1 for every one. */
static int64_t top(const struct moem_place_range *rg, uint8_t n)
{
	int64_t t = -1;

	for (uint8_t i = 0; i < n; i++)
		if ((int64_t)rg[i].hi > t)
			t = rg[i].hi;
	return t;
}

int moem_place_map(const struct moem_place_rules *p, uint32_t cpu_moe_layers, uint32_t L,
		   uint32_t N, uint8_t *map, uint64_t *n_cpu)
{
	/* the rules, then --cpu-moe-layers as one more */
	uint64_t decided[MOEM_PLACE_MAX_RULES + 1] = {0}, cpu = 0;
	char txt[MAX_TEXT];
	uint32_t n = p->n;

	if (n > MOEM_PLACE_MAX_RULES)
		return moem_errf(EINVAL, "place: %u rules (at most %d)", n, MOEM_PLACE_MAX_RULES);
	if (cpu_moe_layers > L)
		return moem_errf(EINVAL, "--cpu-moe-layers %u: the model has %u MoE layer%s",
				 cpu_moe_layers, L, L == 1 ? "" : "s");
	for (uint32_t i = 0; i < n; i++) {
		const struct moem_place_rule *r = &p->r[i];
		int64_t tl = top(r->layers, r->n_layers), tx = top(r->experts, r->n_experts);

		moem_place_format(r, txt, sizeof(txt));
		if (tl >= (int64_t)L)
			return moem_errf(EINVAL,
					 "place '%s': MoE layer %lld is beyond the model's %u "
					 "(0-%u)",
					 txt, (long long)tl, L, L ? L - 1 : 0);
		if (tx >= (int64_t)N)
			return moem_errf(EINVAL,
					 "place '%s': expert %lld is beyond the model's %u per "
					 "layer (0-%u)",
					 txt, (long long)tx, N, N ? N - 1 : 0);
	}
	for (uint32_t m = 0; m < L; m++)
		for (uint32_t x = 0; x < N; x++) {
			enum moem_place w = MOEM_PLACE_AUTO;
			uint32_t i;

			for (i = 0; i < n && !moem_place_matches(&p->r[i], m, x); i++)
				;
			if (i < n)
				w = (enum moem_place)p->r[i].where;
			else if (m < cpu_moe_layers)
				w = MOEM_PLACE_CPU;
			if (i < n || m < cpu_moe_layers)
				decided[i]++;
			cpu += w == MOEM_PLACE_CPU;
			if (map)
				map[(uint64_t)m * N + x] = (uint8_t)w;
		}
	for (uint32_t i = 0; i < n; i++)
		if (!decided[i]) {
			moem_place_format(&p->r[i], txt, sizeof(txt));
			return moem_errf(EINVAL,
					 "place '%s' matches nothing: the rules before it place "
					 "every expert it names",
					 txt);
		}
	if (cpu_moe_layers && !decided[n])
		return moem_errf(EINVAL,
				 "--cpu-moe-layers %u matches nothing: the --place rules place "
				 "every expert of those layers",
				 cpu_moe_layers);
	if (n_cpu)
		*n_cpu = cpu;
	return 0;
}
