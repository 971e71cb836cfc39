// SPDX-License-Identifier: GPL-2.0-only
/* Per-tier byte budget (policy.h): reservations never exceed the limit. */
#include <errno.h>

#include <moem/error.h>
#include <moem/policy.h>
#include <moem/util.h>

void moem_tier_budget_init(struct moem_tier_budget *b, uint64_t limit)
{
	b->limit = limit;
	b->used = 0;
	b->peak = 0;
	b->refused = 0;
}

bool moem_tier_budget_try_reserve(struct moem_tier_budget *b, uint64_t bytes)
{
	uint64_t n;

	if (moem_add_overflow(b->used, bytes, &n) || n > b->limit) {
		b->refused++;
		return false;
	}
	b->used = n;
	if (n > b->peak)
		b->peak = n;
	return true;
}

int moem_tier_budget_release(struct moem_tier_budget *b, uint64_t bytes)
{
	if (bytes > b->used)
		return moem_errf(EINVAL, "budget: releasing %llu bytes, only %llu reserved",
				 (unsigned long long)bytes, (unsigned long long)b->used);
	b->used -= bytes;
	return 0;
}

void moem_tier_budget_set_limit(struct moem_tier_budget *b, uint64_t limit)
{
	b->limit = limit;
}

uint64_t moem_tier_budget_excess(const struct moem_tier_budget *b)
{
	return b->used > b->limit ? b->used - b->limit : 0;
}

uint64_t moem_tier_budget_avail(const struct moem_tier_budget *b)
{
	return b->used < b->limit ? b->limit - b->used : 0;
}
