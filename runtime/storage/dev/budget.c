// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budget knob names, parsing and validation. The rules mirror moem.ko's
 * (kmod/budget.c) so a value refused here is refused there and the other
 * way round; tests/unit/test_budget.c pins them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

static const char *const knob_names[MOEM_BUDGET_NR] = {
	[MOEM_BUDGET_HBM_BYTES] = "hbm_bytes",
	[MOEM_BUDGET_DRAM_BYTES] = "dram_bytes",
	[MOEM_BUDGET_HI_PRECISION_PERMILLE] = "hi_precision_permille",
	[MOEM_BUDGET_PREFETCH_DEPTH] = "prefetch_depth",
	[MOEM_BUDGET_REROUTE] = "reroute",
};

static const char *const reroute_names[MOEM_REROUTE_NR] = {
	[MOEM_REROUTE_NONE] = "none",
	[MOEM_REROUTE_LYNX] = "lynx",
	[MOEM_REROUTE_OEA] = "oea",
	[MOEM_REROUTE_CACHE_AWARE] = "cache-aware",
	[MOEM_REROUTE_PIGGYBACK] = "piggyback",
};

const char *moem_budget_name(enum moem_budget_knob knob)
{
	return (unsigned int)knob < MOEM_BUDGET_NR ? knob_names[knob] : "?";
}

int moem_budget_lookup(const char *name, enum moem_budget_knob *out)
{
	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		if (!strcmp(name, knob_names[i])) {
			*out = (enum moem_budget_knob)i;
			return 0;
		}
	}
	return moem_errf(EINVAL,
			 "unknown knob '%s' (hbm_bytes, dram_bytes, hi_precision_permille, "
			 "prefetch_depth, reroute)",
			 name);
}

const char *moem_reroute_name(enum moem_reroute r)
{
	return (unsigned int)r < MOEM_REROUTE_NR ? reroute_names[r] : "?";
}

int moem_reroute_parse(const char *s, enum moem_reroute *out)
{
	for (int i = 0; i < MOEM_REROUTE_NR; i++) {
		if (!strcmp(s, reroute_names[i])) {
			*out = (enum moem_reroute)i;
			return 0;
		}
	}
	return moem_errf(
		EINVAL, "unknown reroute policy '%s' (none, lynx, oea, cache-aware, piggyback)", s);
}

int moem_budget_validate(enum moem_budget_knob knob, uint64_t v)
{
	switch (knob) {
	case MOEM_BUDGET_HBM_BYTES:
	case MOEM_BUDGET_DRAM_BYTES:
		if (v > MOEM_BUDGET_BYTES_MAX)
			return moem_errf(ERANGE, "%s: %llu is above the 2^50-byte limit",
					 knob_names[knob], (unsigned long long)v);
		return 0;
	case MOEM_BUDGET_HI_PRECISION_PERMILLE:
		if (v > MOEM_BUDGET_PERMILLE_MAX)
			return moem_errf(ERANGE, "%s: %llu is not in 0..1000", knob_names[knob],
					 (unsigned long long)v);
		return 0;
	case MOEM_BUDGET_PREFETCH_DEPTH:
		if (v > MOEM_BUDGET_PREFETCH_MAX)
			return moem_errf(ERANGE, "%s: %llu is not in 0..%d", knob_names[knob],
					 (unsigned long long)v, MOEM_BUDGET_PREFETCH_MAX);
		return 0;
	case MOEM_BUDGET_REROUTE:
		if (v >= MOEM_REROUTE_NR)
			return moem_errf(ERANGE, "reroute: %llu is not a policy",
					 (unsigned long long)v);
		return 0;
	default:
		return moem_errf(EINVAL, "unknown knob %d", (int)knob);
	}
}

int moem_budget_parse(enum moem_budget_knob knob, const char *s, uint64_t *value)
{
	enum moem_reroute r;
	int ret;

	if (knob == MOEM_BUDGET_REROUTE) {
		ret = moem_reroute_parse(s, &r);
		if (ret)
			return ret;
		*value = r;
		return 0;
	}
	if (knob == MOEM_BUDGET_HBM_BYTES || knob == MOEM_BUDGET_DRAM_BYTES) {
		ret = moem_parse_size(s, NULL, value);
		if (ret)
			return moem_err_prefix(-ret, "%s", moem_budget_name(knob));
	} else {
		char *end;
		unsigned long long v;

		if (!*s || *s == '-' || *s == '+')
			return moem_errf(EINVAL, "%s: '%s' is not a number", moem_budget_name(knob),
					 s);
		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno || *end)
			return moem_errf(EINVAL, "%s: '%s' is not a number", moem_budget_name(knob),
					 s);
		*value = v;
	}
	return moem_budget_validate(knob, *value);
}

void moem_budget_format(enum moem_budget_knob knob, uint64_t value, char *buf, size_t len)
{
	if (knob == MOEM_BUDGET_REROUTE)
		snprintf(buf, len, "%s", moem_reroute_name((enum moem_reroute)value));
	else
		snprintf(buf, len, "%llu", (unsigned long long)value);
}
