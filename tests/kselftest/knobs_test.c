// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem.ko against the knob table (<linux/moem_knobs.h>, expanded here on
 * its own): for every row, budgets/<name> exists (0644), takes the row's
 * min and max, refuses max + 1 and garbage and keeps its value, and the
 * ioctl agrees both ways (reads what sysfs wrote, refuses what sysfs
 * refused, writes what sysfs then shows); an ENUM knob takes every name
 * of its own value list and none of another knob's. The module has no
 * knob file the table lacks, and a caller the table's "who" excludes
 * writes none.
 */
#include <dirent.h>

#include "moem_test.h"

struct row {
	const char *name;
	uint32_t nr;
	int unit; /* enum moem_knob_unit */
	uint64_t min, max;
	const char *const *values;
};

/* An ENUM knob's value names, [0..max], NULL-terminated. */
#define VAL(id, nm, n) [n] = nm,
#define ROW(id, nm, n, u, lo, hi, w, a, vals) \
	{#nm, n, MOEM_KNOB_UNIT_##u, lo, hi, (const char *const[]){vals(VAL) NULL}},
static const struct row rows[] = {MOEM_KNOBS(ROW)};
#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

/* A value as sysfs spells it: plain decimal, or the name from the knob's own list. */
static void spell(const struct row *r, uint64_t v, char *buf, size_t len)
{
	if (r->unit == MOEM_KNOB_UNIT_ENUM && v <= r->max)
		snprintf(buf, len, "%s", r->values[v]);
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
}

static int knob_get(int dev, uint32_t knob, uint64_t *v)
{
	struct moem_budget b = {.knob = knob};
	int ret = ioc(dev, MOEM_IOC_BUDGET_GET, &b);

	*v = b.value;
	return ret;
}

static int knob_set(int dev, uint32_t knob, uint64_t v)
{
	struct moem_budget b = {.knob = knob, .value = v};

	return ioc(dev, MOEM_IOC_BUDGET_SET, &b);
}

/* sysfs shows what the ioctl reads, spelled as the table says. */
static void expect_shows(struct __test_metadata *_metadata, int dev, const struct row *r,
			 uint64_t want)
{
	char path[128], buf[64], sp[64];
	uint64_t v = ~0ULL;

	snprintf(path, sizeof(path), SYSFS "/budgets/%s", r->name);
	ASSERT_EQ(0, knob_get(dev, r->nr, &v));
	EXPECT_EQ(want, v) TH_LOG("%s", r->name);
	ASSERT_EQ(0, sysfs_read(path, buf, sizeof(buf)));
	spell(r, want, sp, sizeof(sp));
	EXPECT_STREQ(sp, buf) TH_LOG("%s", r->name);
}

TEST_F(moem, knob_table_matches_module)
{
	char path[128], sp[64];
	struct stat st;
	uint64_t saved;

	REQUIRE_ROOT();
	ASSERT_EQ(MOEM_BUDGET_NR, N_ROWS);
	for (size_t i = 0; i < N_ROWS; i++) {
		const struct row *r = &rows[i];

		snprintf(path, sizeof(path), SYSFS "/budgets/%s", r->name);
		ASSERT_EQ(0, stat(path, &st)) TH_LOG("%s: %s", path, strerror(errno));
		EXPECT_EQ(0644, st.st_mode & 0777);
		ASSERT_EQ(0, knob_get(self->dev, r->nr, &saved));

		/* min and max through sysfs, read back through the ioctl */
		spell(r, r->min, sp, sizeof(sp));
		EXPECT_EQ(0, sysfs_write(path, sp)) TH_LOG("%s <- %s", r->name, sp);
		expect_shows(_metadata, self->dev, r, r->min);
		spell(r, r->max, sp, sizeof(sp));
		EXPECT_EQ(0, sysfs_write(path, sp)) TH_LOG("%s <- %s", r->name, sp);
		expect_shows(_metadata, self->dev, r, r->max);

		/* an ENUM knob: each of its names; another knob's names refused */
		for (uint64_t x = 0; r->unit == MOEM_KNOB_UNIT_ENUM && x <= r->max; x++) {
			EXPECT_EQ(0, sysfs_write(path, r->values[x]))
			TH_LOG("%s <- %s", r->name, r->values[x]);
			expect_shows(_metadata, self->dev, r, x);
			for (size_t j = 0; j < N_ROWS; j++) {
				for (size_t y = 0; j != i && rows[j].values[y]; y++) {
					EXPECT_EQ(-EINVAL, sysfs_write(path, rows[j].values[y]))
					TH_LOG("%s <- %s's %s", r->name, rows[j].name,
					       rows[j].values[y]);
				}
			}
			expect_shows(_metadata, self->dev, r, x);
		}
		spell(r, r->max, sp, sizeof(sp));
		EXPECT_EQ(0, sysfs_write(path, sp)) TH_LOG("%s <- %s", r->name, sp);

		/* max + 1 and garbage: refused, the value kept */
		snprintf(sp, sizeof(sp), "%llu", (unsigned long long)r->max + 1);
		EXPECT_EQ(-EINVAL, sysfs_write(path, sp)) TH_LOG("%s <- %s", r->name, sp);
		EXPECT_EQ(-EINVAL, sysfs_write(path, "x1")) TH_LOG("%s", r->name);
		EXPECT_EQ(-EINVAL, sysfs_write(path, "-1")) TH_LOG("%s", r->name);
		expect_shows(_metadata, self->dev, r, r->max);
		EXPECT_EQ(-EINVAL, knob_set(self->dev, r->nr, r->max + 1)) TH_LOG("%s", r->name);
		if (r->min > 0) {
			EXPECT_EQ(-EINVAL, knob_set(self->dev, r->nr, r->min - 1));
		}
		expect_shows(_metadata, self->dev, r, r->max);

		/* the ioctl's min, shown by sysfs */
		EXPECT_EQ(0, knob_set(self->dev, r->nr, r->min));
		expect_shows(_metadata, self->dev, r, r->min);

		ASSERT_EQ(0, knob_set(self->dev, r->nr, saved));
	}
	/* one past the table is no knob */
	EXPECT_EQ(-EINVAL, knob_set(self->dev, MOEM_BUDGET_NR, 0));
	EXPECT_EQ(-EINVAL, knob_get(self->dev, MOEM_BUDGET_NR, &saved));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, knob_files_are_the_table)
{
	struct dirent *de;
	size_t found = 0;
	DIR *d = opendir(SYSFS "/budgets");

	ASSERT_NE(NULL, d) TH_LOG("%s", strerror(errno));
	while ((de = readdir(d))) {
		bool known = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
			     !strcmp(de->d_name, "seq");

		for (size_t i = 0; i < N_ROWS && !known; i++)
			if (!strcmp(de->d_name, rows[i].name)) {
				known = true;
				found++;
			}
		EXPECT_TRUE(known) TH_LOG("budgets/%s is not in the table", de->d_name);
	}
	closedir(d);
	EXPECT_EQ(N_ROWS, found);
}

/* Every knob's "who" is ADMIN: a caller without CAP_SYS_ADMIN writes none. */
TEST_F(moem, knob_who_admin)
{
	char path[128], buf[64];
	uint64_t v;

	if (geteuid() == 0)
		SKIP(return, "runs in the unprivileged phase");
	for (size_t i = 0; i < N_ROWS; i++) {
		const struct row *r = &rows[i];

		ASSERT_EQ(0, knob_get(self->dev, r->nr, &v)); /* anyone reads */
		EXPECT_EQ(-EPERM, knob_set(self->dev, r->nr, v)) TH_LOG("%s", r->name);
		snprintf(path, sizeof(path), SYSFS "/budgets/%s", r->name);
		EXPECT_EQ(0, sysfs_read(path, buf, sizeof(buf)));
		EXPECT_EQ(-EACCES, sysfs_write(path, buf)) TH_LOG("%s", r->name);
	}
}

TEST_HARNESS_MAIN
