// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: moemd's control-protocol input path (runtime/serve/ctl/
 * proto.c) as the daemon drives it on untrusted socket bytes: the input
 * is fed to the line buffer in pieces (sizes taken from the input), each
 * complete line is checked as a request, and the arguments of accepted
 * requests are read with the typed getters. Nothing may crash, leak or
 * hand out a line longer than the limit.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/ctl.h>

#define LIMIT 4096 /* a small line limit, so that over-long lines are reached */

static void one_line(const char *line, size_t len)
{
	struct json_object *req;
	const char *cmd, *s;
	char buf[64];
	int64_t id;
	bool b;

	if (len > LIMIT)
		abort();
	if (moem_ctl_parse_request(line, len, &req, &id, &cmd))
		return;
	if (!cmd || id < 0)
		abort();
	moem_ctl_get_str(req, "knob", &s);
	moem_ctl_get_scalar(req, "value", buf, sizeof(buf));
	moem_ctl_get_bool(req, "on", &b);
	{
		struct json_object *wl;

		if (json_object_object_get_ex(req, "workload", &wl) &&
		    json_object_is_type(wl, json_type_object))
			moem_ctl_get_scalar(wl, "steps", buf, sizeof(buf));
	}
	json_object_put(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct moem_ctl_lines l;
	size_t off = 1, step;
	char *line;
	size_t len;

	if (!size)
		return 0;
	step = (size_t)data[0] + 1; /* how the bytes arrive */
	moem_ctl_lines_init(&l, LIMIT);
	while (off < size) {
		size_t n = size - off < step ? size - off : step;
		int ret;

		if (moem_ctl_lines_feed(&l, data + off, n))
			break;
		off += n;
		while ((ret = moem_ctl_lines_next(&l, &line, &len)) == 1)
			one_line(line, len);
		if (ret < 0)
			break; /* the daemon closes such a connection */
	}
	moem_ctl_lines_free(&l);
	return 0;
}
