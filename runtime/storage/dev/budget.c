// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budget knob names, parsing and validation, all derived from the table
 * in <linux/moem_knobs.h> that moem.ko's kmod/budget.c derives its files
 * and checks from: a value refused here is refused there and the other
 * way round (tests/unit/test_knobs.c, tests/kselftest/knobs_test.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/model.h>
#include <moem/util.h>

#define VALUE_NAME(id, nm, nr) [nr] = nm,
#define KNOB_INFO(id, nm, nr, u, lo, hi, w, a, vals) \
	[nr] = {.name = #nm,                         \
		.unit = MOEM_KNOB_UNIT_##u,          \
		.min = lo,                           \
		.max = hi,                           \
		.who = MOEM_KNOB_WHO_##w,            \
		.apply = MOEM_KNOB_APPLY_##a,        \
		.values = (const char *const[]){vals(VALUE_NAME) NULL}},
static const struct moem_knob_info knobs[MOEM_BUDGET_NR] = {MOEM_KNOBS(KNOB_INFO)};

/* moem.ko cannot include model.h: the bound it takes is spelled twice. */
_Static_assert(MOEM_BUDGET_MOE_LAYERS_MAX == MOEM_MAX_LAYERS,
	       "cpu_moe_layers' range is the layers a pack holds");

const struct moem_knob_info *moem_knob_info(enum moem_budget_knob knob)
{
	return (unsigned int)knob < MOEM_BUDGET_NR ? &knobs[knob] : NULL;
}

const char *moem_knob_apply_text(enum moem_knob_apply a)
{
	switch (a) {
	case MOEM_KNOB_APPLY_NOW:
		return "now";
	case MOEM_KNOB_APPLY_LAYER:
		return "at the next layer boundary";
	case MOEM_KNOB_APPLY_STEP:
		return "before the next decode step";
	}
	return "?";
}

const char *moem_knob_unit_name(enum moem_knob_unit u)
{
	static const char *const n[] = {"bytes", "permille", "layers", "name"};

	return (unsigned int)u < MOEM_ARRAY_SIZE(n) ? n[u] : "?";
}

/* "a, b, c" from a table of names, for error messages. */
static const char *name_list(const char *const *names, size_t n, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
	return buf;
}

const char *moem_budget_name(enum moem_budget_knob knob)
{
	return (unsigned int)knob < MOEM_BUDGET_NR ? knobs[knob].name : "?";
}

int moem_budget_lookup(const char *name, enum moem_budget_knob *out)
{
	const char *names[MOEM_BUDGET_NR];
	char list[256];

	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		if (!strcmp(name, knobs[i].name)) {
			*out = (enum moem_budget_knob)i;
			return 0;
		}
		names[i] = knobs[i].name;
	}
	return moem_errf(EINVAL, "unknown knob '%s' (%s)", name,
			 name_list(names, MOEM_BUDGET_NR, list, sizeof(list)));
}

const char *moem_knob_value_name(enum moem_budget_knob knob, uint64_t v)
{
	const struct moem_knob_info *k = moem_knob_info(knob);

	if (!k || k->unit != MOEM_KNOB_UNIT_ENUM || v > k->max)
		return "?";
	return k->values[v];
}

/* An ENUM knob's value by name; the error lists the names. */
static int value_parse(const struct moem_knob_info *k, const char *s, uint64_t *out)
{
	char list[160];

	for (uint64_t i = 0; i <= k->max; i++) {
		if (!strcmp(s, k->values[i])) {
			*out = i;
			return 0;
		}
	}
	return moem_errf(EINVAL, "%s: unknown value '%s' (%s)", k->name, s,
			 name_list(k->values, (size_t)k->max + 1, list, sizeof(list)));
}

int moem_budget_validate(enum moem_budget_knob knob, uint64_t v)
{
	const struct moem_knob_info *k = moem_knob_info(knob);

	if (!k)
		return moem_errf(EINVAL, "unknown knob %d", (int)knob);
	if (v >= k->min && v <= k->max)
		return 0;
	if (k->unit == MOEM_KNOB_UNIT_ENUM)
		return moem_errf(ERANGE, "%s: %llu is not one of its %llu values", k->name,
				 (unsigned long long)v, (unsigned long long)k->max + 1);
	if (k->unit == MOEM_KNOB_UNIT_BYTES && k->max == MOEM_BUDGET_BYTES_MAX)
		return moem_errf(ERANGE, "%s: %llu is above the 2^50-byte limit", k->name,
				 (unsigned long long)v);
	return moem_errf(ERANGE, "%s: %llu is not in %llu..%llu", k->name, (unsigned long long)v,
			 (unsigned long long)k->min, (unsigned long long)k->max);
}

int moem_budget_parse(enum moem_budget_knob knob, const char *s, uint64_t *value)
{
	const struct moem_knob_info *k = moem_knob_info(knob);
	unsigned long long n;
	uint64_t v;
	char *end;
	int ret;

	if (!k)
		return moem_errf(EINVAL, "unknown knob %d", (int)knob);
	switch (k->unit) {
	case MOEM_KNOB_UNIT_ENUM:
		ret = value_parse(k, s, &v);
		if (ret)
			return ret;
		break;
	case MOEM_KNOB_UNIT_BYTES:
		ret = moem_parse_size(s, NULL, &v);
		if (ret)
			return moem_err_prefix(-ret, "%s", k->name);
		break;
	default:
		if (!*s || *s == '-' || *s == '+')
			return moem_errf(EINVAL, "%s: '%s' is not a number", k->name, s);
		errno = 0;
		n = strtoull(s, &end, 10);
		if (errno || *end)
			return moem_errf(EINVAL, "%s: '%s' is not a number", k->name, s);
		v = n;
		break;
	}
	ret = moem_budget_validate(knob, v);
	if (ret)
		return ret; /* *value as it was: a refused value changes nothing */
	*value = v;
	return 0;
}

void moem_budget_format(enum moem_budget_knob knob, uint64_t value, char *buf, size_t len)
{
	const struct moem_knob_info *k = moem_knob_info(knob);

	if (k && k->unit == MOEM_KNOB_UNIT_ENUM)
		snprintf(buf, len, "%s", moem_knob_value_name(knob, value));
	else
		snprintf(buf, len, "%llu", (unsigned long long)value);
}
