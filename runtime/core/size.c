// SPDX-License-Identifier: GPL-2.0-only
/* Human sizes in and out: "12G", "25%", "1.50 GiB". */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

int moem_parse_size(const char *s, const uint64_t *pct_of, uint64_t *out)
{
	char *end;
	double v, mult = 1;

	if (!s || !*s)
		return moem_errf(EINVAL, "empty size");
	/* strtod() would skip blanks and then take a sign: " -5" is no size */
	if (!isdigit((unsigned char)*s) && *s != '.')
		return moem_errf(EINVAL, "size '%s': want a number (no sign or blanks) and a unit",
				 s);
	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v < 0)
		return moem_errf(EINVAL, "size '%s': not a number", s);
	if (*end == '%') {
		double b;

		if (!pct_of)
			return moem_errf(EINVAL, "size '%s': a percentage is not accepted here", s);
		if (end[1] || v > 100000)
			return moem_errf(EINVAL, "size '%s': bad percentage", s);
		b = (double)*pct_of * v / 100.0;
		/* a share that rounds to no byte is not "0" (which means no limit) */
		if (v > 0 && *pct_of && b < 1)
			return moem_errf(ERANGE, "size '%s' is less than one byte of %llu", s,
					 (unsigned long long)*pct_of);
		*out = (uint64_t)b;
		return 0;
	}
	switch (*end) {
	case 0:
		break;
	case 'k':
	case 'K':
		mult = 0x1p10;
		end++;
		break;
	case 'm':
	case 'M':
		mult = 0x1p20;
		end++;
		break;
	case 'g':
	case 'G':
		mult = 0x1p30;
		end++;
		break;
	case 't':
	case 'T':
		mult = 0x1p40;
		end++;
		break;
	default:
		return moem_errf(EINVAL, "size '%s': unknown suffix '%s' (use K, M, G, T)", s, end);
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'i' && mult > 1)
		end++; /* "Mi", as Kubernetes writes it */
	else if (*end == 'B')
		end++;
	if (*end)
		return moem_errf(EINVAL, "size '%s': trailing characters '%s'", s, end);
	v *= mult;
	if (v >= 0x1p63)
		return moem_errf(ERANGE, "size '%s' is too large", s);
	if (v != floor(v))
		return moem_errf(EINVAL, "size '%s' is not a whole number of bytes", s);
	*out = (uint64_t)v;
	return 0;
}

char *moem_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < MOEM_ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, units[u]);
	return buf;
}
