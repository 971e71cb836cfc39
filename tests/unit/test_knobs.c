// SPDX-License-Identifier: GPL-2.0-only
/*
 * The knob table (<linux/moem_knobs.h>) against libmoem: every row has a
 * name moemctl and the control socket take (moem_budget_lookup() is what
 * moemd's "get"/"set" and moemctl's --via paths call), which names it
 * back, the row's unit, range, who and apply, and values parsed, checked
 * and formatted by its range: min and max pass, max + 1 and garbage are
 * refused, and what is formatted parses back; an ENUM knob takes each
 * name of its own value list (reroute's, exec's) and no other's. The
 * table is expanded here on its own, so a library that drifted from it
 * fails.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>

#include "kselftest_harness.h"

struct row {
	const char *name;
	int nr;
	enum moem_knob_unit unit;
	uint64_t min, max;
	enum moem_knob_who who;
	enum moem_knob_apply apply;
	const char *const *values; /* its value list, NULL-terminated */
	int n_values;
};

#define VAL(id, nm, n) [n] = nm,
/* The knob's value list as a NULL-terminated array, and its length. */
#define VALUES(vals)   ((const char *const[]){vals(VAL) NULL})
#define N_VALUES(vals) ((int)(sizeof(VALUES(vals)) / sizeof(char *)) - 1)
#define ROW(id, nm, n, u, lo, hi, w, a, vals) \
	{#nm,                                 \
	 n,                                   \
	 MOEM_KNOB_UNIT_##u,                  \
	 lo,                                  \
	 hi,                                  \
	 MOEM_KNOB_WHO_##w,                   \
	 MOEM_KNOB_APPLY_##a,                 \
	 VALUES(vals),                        \
	 N_VALUES(vals)},
static const struct row rows[] = {MOEM_KNOBS(ROW)};

/* A value as a user writes it: a number, or the name from the knob's list. */
static void spell(const struct row *r, uint64_t v, char *buf, size_t len)
{
	if (r->unit == MOEM_KNOB_UNIT_ENUM)
		snprintf(buf, len, "%s", v < (uint64_t)r->n_values ? r->values[v] : "?");
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
}

TEST(every_knob_has_one_name)
{
	ASSERT_EQ(MOEM_BUDGET_NR, sizeof(rows) / sizeof(rows[0]));
	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		enum moem_budget_knob k = MOEM_BUDGET_NR;

		/* ABI values are dense: 0..NR-1, each once */
		EXPECT_EQ(i, rows[i].nr);
		ASSERT_EQ(0, moem_budget_lookup(rows[i].name, &k)) TH_LOG("%s", rows[i].name);
		EXPECT_EQ(rows[i].nr, (int)k);
		EXPECT_STREQ(rows[i].name, moem_budget_name(k));
		/* a name sysfs can hold and the socket's JSON carries as is */
		EXPECT_EQ(strspn(rows[i].name, "abcdefghijklmnopqrstuvwxyz_"),
			  strlen(rows[i].name));
		for (int j = 0; j < i; j++) {
			EXPECT_STRNE(rows[i].name, rows[j].name);
		}
	}
	EXPECT_STREQ("?", moem_budget_name(MOEM_BUDGET_NR));
	EXPECT_EQ(NULL, moem_knob_info(MOEM_BUDGET_NR));
}

TEST(library_rows_are_the_table)
{
	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		const struct moem_knob_info *ki = moem_knob_info((enum moem_budget_knob)i);

		ASSERT_NE(NULL, ki);
		EXPECT_STREQ(rows[i].name, ki->name);
		EXPECT_EQ(rows[i].unit, ki->unit);
		EXPECT_EQ(rows[i].min, ki->min);
		EXPECT_EQ(rows[i].max, ki->max);
		EXPECT_EQ(rows[i].who, ki->who);
		EXPECT_EQ(rows[i].apply, ki->apply);
		EXPECT_STRNE("?", moem_knob_apply_text(ki->apply));
		EXPECT_STRNE("?", moem_knob_unit_name(ki->unit));
		/* an ENUM knob's range is its value list; the others have none */
		if (rows[i].unit == MOEM_KNOB_UNIT_ENUM) {
			EXPECT_EQ(0u, rows[i].min);
			EXPECT_EQ((uint64_t)rows[i].n_values - 1, rows[i].max)
			TH_LOG("%s", ki->name);
		} else {
			EXPECT_EQ(0, rows[i].n_values) TH_LOG("%s", ki->name);
		}
		ASSERT_NE(NULL, ki->values);
		for (int v = 0; v < rows[i].n_values; v++) {
			EXPECT_STREQ(rows[i].values[v], ki->values[v]);
		}
		EXPECT_EQ(NULL, ki->values[rows[i].n_values]) TH_LOG("%s", ki->name);
	}
}

/*
 * Every name of an ENUM knob's list parses to its index, is how the value
 * is formatted and named, and the names of another knob's list are refused
 * with a message listing this knob's names.
 */
TEST(enum_knobs_take_their_own_names)
{
	int n_enum = 0;

	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		enum moem_budget_knob k = (enum moem_budget_knob)i;
		const struct row *r = &rows[i];
		char out[64];
		uint64_t v;

		if (r->unit != MOEM_KNOB_UNIT_ENUM) {
			EXPECT_STREQ("?", moem_knob_value_name(k, 0));
			continue;
		}
		n_enum++;
		ASSERT_GT(r->n_values, 1) TH_LOG("%s", r->name);
		for (int x = 0; x < r->n_values; x++) {
			v = ~0ull;
			ASSERT_EQ(0, moem_budget_parse(k, r->values[x], &v))
			TH_LOG("%s %s: %s", r->name, r->values[x], moem_last_error());
			EXPECT_EQ((uint64_t)x, v);
			EXPECT_STREQ(r->values[x], moem_knob_value_name(k, v));
			moem_budget_format(k, v, out, sizeof(out));
			EXPECT_STREQ(r->values[x], out);
			for (int y = 0; y < x; y++) {
				EXPECT_STRNE(r->values[x], r->values[y]);
			}
		}
		EXPECT_STREQ("?", moem_knob_value_name(k, r->max + 1));
		for (int j = 0; j < MOEM_BUDGET_NR; j++) {
			const struct row *o = &rows[j];

			for (int x = 0; j != i && x < o->n_values; x++) {
				moem_clear_error();
				v = 7;
				EXPECT_EQ(-EINVAL, moem_budget_parse(k, o->values[x], &v))
				TH_LOG("%s took %s's %s", r->name, o->name, o->values[x]);
				EXPECT_EQ(7u, v);
				for (int y = 0; y < r->n_values; y++) {
					EXPECT_NE(NULL, strstr(moem_last_error(), r->values[y]))
					TH_LOG("%s", moem_last_error());
				}
			}
		}
	}
	EXPECT_GE(n_enum, 2); /* reroute and exec */
}

/* exec spells its values as --exec does, cpu_moe_layers spans a pack's layers. */
TEST(hybrid_switches)
{
	enum moem_budget_knob k;
	uint64_t v = 9;

	ASSERT_EQ(0, moem_budget_lookup("exec", &k));
	EXPECT_EQ(MOEM_BUDGET_EXEC, k);
	EXPECT_EQ(6, (int)k); /* ABI values never change */
	EXPECT_EQ(MOEM_KNOB_UNIT_ENUM, moem_knob_info(k)->unit);
	EXPECT_EQ(MOEM_KNOB_APPLY_LAYER, moem_knob_info(k)->apply);
	ASSERT_EQ(0, moem_budget_parse(k, "gpu", &v));
	EXPECT_EQ((uint64_t)MOEM_EXEC_MODE_GPU, v);
	ASSERT_EQ(0, moem_budget_parse(k, "hybrid", &v));
	EXPECT_EQ((uint64_t)MOEM_EXEC_MODE_HYBRID, v);
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "transfer", &v));
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "1", &v));
	EXPECT_EQ(-ERANGE, moem_budget_validate(k, MOEM_EXEC_MODE_NR));
	ASSERT_EQ(0, moem_budget_lookup("cpu_moe_layers", &k));
	EXPECT_EQ(MOEM_BUDGET_CPU_MOE_LAYERS, k);
	EXPECT_EQ(7, (int)k);
	EXPECT_EQ(MOEM_KNOB_UNIT_LAYERS, moem_knob_info(k)->unit);
	EXPECT_EQ(MOEM_KNOB_APPLY_LAYER, moem_knob_info(k)->apply);
	ASSERT_EQ(0, moem_budget_parse(k, "256", &v));
	EXPECT_EQ(256u, v);
	EXPECT_EQ(-ERANGE, moem_budget_parse(k, "257", &v));
	EXPECT_EQ(256u, v);
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "2 layers", &v));
}

TEST(ranges_parse_validate_format)
{
	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		enum moem_budget_knob k = (enum moem_budget_knob)i;
		const struct row *r = &rows[i];
		char buf[64], out[64];
		uint64_t v = 1;

		spell(r, r->min, buf, sizeof(buf));
		ASSERT_EQ(0, moem_budget_parse(k, buf, &v)) TH_LOG("%s %s", r->name, buf);
		EXPECT_EQ(r->min, v);
		spell(r, r->max, buf, sizeof(buf));
		ASSERT_EQ(0, moem_budget_parse(k, buf, &v)) TH_LOG("%s %s", r->name, buf);
		EXPECT_EQ(r->max, v);
		moem_budget_format(k, v, out, sizeof(out));
		EXPECT_STREQ(buf, out);
		EXPECT_EQ(0, moem_budget_validate(k, r->max));
		EXPECT_EQ(-ERANGE, moem_budget_validate(k, r->max + 1)) TH_LOG("%s", r->name);
		if (r->unit != MOEM_KNOB_UNIT_ENUM) {
			snprintf(buf, sizeof(buf), "%llu", (unsigned long long)r->max + 1);
			EXPECT_EQ(-ERANGE, moem_budget_parse(k, buf, &v)) TH_LOG("%s", r->name);
			EXPECT_EQ(r->max, v); /* a refused value changes nothing */
		}
		moem_clear_error();
		EXPECT_EQ(-EINVAL, moem_budget_parse(k, "x1", &v)) TH_LOG("%s", r->name);
		EXPECT_NE(NULL, strstr(moem_last_error(), r->name))
		TH_LOG("%s: %s", r->name, moem_last_error());
		EXPECT_EQ(-EINVAL, moem_budget_parse(k, "-1", &v)) TH_LOG("%s", r->name);
	}
}

TEST(reroute_names_are_the_table)
{
#define RR(id, nm, n) {nm, n},
	static const struct {
		const char *name;
		int nr;
	} rr[] = {MOEM_REROUTES(RR)};

	ASSERT_EQ(MOEM_REROUTE_NR, sizeof(rr) / sizeof(rr[0]));
	for (int i = 0; i < MOEM_REROUTE_NR; i++) {
		uint64_t r;

		EXPECT_EQ(i, rr[i].nr);
		ASSERT_EQ(0, moem_budget_parse(MOEM_BUDGET_REROUTE, rr[i].name, &r));
		EXPECT_EQ(rr[i].nr, (int)r);
		EXPECT_STREQ(rr[i].name, moem_knob_value_name(MOEM_BUDGET_REROUTE, r));
	}
}

TEST(unknown_knob_lists_every_name)
{
	enum moem_budget_knob k;

	moem_clear_error();
	ASSERT_EQ(-EINVAL, moem_budget_lookup("vram", &k));
	for (int i = 0; i < MOEM_BUDGET_NR; i++) {
		EXPECT_NE(NULL, strstr(moem_last_error(), rows[i].name)) TH_LOG("%s", rows[i].name);
	}
}

TEST_HARNESS_MAIN
