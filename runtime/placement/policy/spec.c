// SPDX-License-Identifier: GPL-2.0-only
/* "name:key=value,..." policy specs (policy.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

int moem_spec_parse(const char *s, struct moem_spec *sp)
{
	const char *colon = strchr(s, ':'), *p;
	size_t nl = colon ? (size_t)(colon - s) : strlen(s);

	memset(sp, 0, sizeof(*sp));
	if (!nl || nl >= MOEM_SPEC_NAME_MAX)
		return moem_errf(EINVAL, "policy '%s': empty or over-long name", s);
	memcpy(sp->name, s, nl);
	if (!colon)
		return 0;
	p = colon + 1;
	while (*p) {
		const char *comma = strchr(p, ','), *eq;
		size_t len = comma ? (size_t)(comma - p) : strlen(p), kl, vl;

		eq = memchr(p, '=', len);
		if (!eq || eq == p || eq == p + len - 1)
			return moem_errf(EINVAL, "policy '%s': expected key=value, got '%.*s'", s,
					 (int)len, p);
		kl = (size_t)(eq - p);
		vl = len - kl - 1;
		if (kl >= MOEM_SPEC_KEY_MAX || vl >= MOEM_SPEC_VAL_MAX)
			return moem_errf(EINVAL, "policy '%s': parameter '%.*s' too long", s,
					 (int)len, p);
		if (sp->n == MOEM_SPEC_MAX_PARAMS)
			return moem_errf(EINVAL, "policy '%s': more than %d parameters", s,
					 MOEM_SPEC_MAX_PARAMS);
		memcpy(sp->p[sp->n].key, p, kl);
		memcpy(sp->p[sp->n].val, eq + 1, vl);
		for (uint32_t i = 0; i < sp->n; i++)
			if (!strcmp(sp->p[i].key, sp->p[sp->n].key))
				return moem_errf(EINVAL, "policy '%s': parameter '%s' given twice",
						 s, sp->p[i].key);
		sp->n++;
		if (!comma)
			break;
		p = comma + 1;
		if (!*p)
			return moem_errf(EINVAL, "policy '%s': trailing comma", s);
	}
	return 0;
}

static int find(struct moem_spec *sp, const char *key)
{
	for (uint32_t i = 0; i < sp->n; i++)
		if (!strcmp(sp->p[i].key, key)) {
			sp->p[i].used = true;
			return (int)i;
		}
	return -1;
}

int moem_spec_f64(struct moem_spec *sp, const char *key, double lo, double hi, double *v)
{
	int i = find(sp, key);
	char *end;
	double x;

	if (i < 0)
		return 0;
	x = strtod(sp->p[i].val, &end);
	if (*end || !isfinite(x) || x < lo || x > hi)
		return moem_errf(EINVAL, "policy %s: %s=%s, want a number in [%g, %g]", sp->name,
				 key, sp->p[i].val, lo, hi);
	*v = x;
	return 0;
}

int moem_spec_u32(struct moem_spec *sp, const char *key, uint32_t lo, uint32_t hi, uint32_t *v)
{
	int i = find(sp, key);
	char *end;
	unsigned long x;

	if (i < 0)
		return 0;
	errno = 0;
	x = strtoul(sp->p[i].val, &end, 10);
	if (*end || errno || sp->p[i].val[0] == '-' || x < lo || x > hi)
		return moem_errf(EINVAL, "policy %s: %s=%s, want an integer in %u..%u", sp->name,
				 key, sp->p[i].val, lo, hi);
	*v = (uint32_t)x;
	return 0;
}

int moem_spec_bool(struct moem_spec *sp, const char *key, bool *v)
{
	int i = find(sp, key);
	const char *s;

	if (i < 0)
		return 0;
	s = sp->p[i].val;
	if (!strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "on"))
		*v = true;
	else if (!strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "off"))
		*v = false;
	else
		return moem_errf(EINVAL, "policy %s: %s=%s, want 0 or 1", sp->name, key, s);
	return 0;
}

const char *moem_spec_str(struct moem_spec *sp, const char *key)
{
	int i = find(sp, key);

	return i < 0 ? NULL : sp->p[i].val;
}

int moem_spec_done(const struct moem_spec *sp)
{
	for (uint32_t i = 0; i < sp->n; i++)
		if (!sp->p[i].used)
			return moem_errf(EINVAL, "policy %s: unknown parameter '%s'", sp->name,
					 sp->p[i].key);
	return 0;
}
