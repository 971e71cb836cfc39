// SPDX-License-Identifier: GPL-2.0-only
/*
 * The control protocol's pieces (ctl.h) and the shared engine settings
 * (engine_args.h): line framing over arbitrary read boundaries, request
 * checks (malformed JSON, missing fields, versions), typed getters, and
 * the settings parser's acceptance and refusals.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <moem/ctl.h>
#include <moem/engine_args.h>
#include <moem/error.h>

#include "kselftest_harness.h"

TEST(lines_split_across_reads)
{
	const char *in = "{\"a\":1}\r\n\n{\"b\":2}\n{\"c\"";
	struct moem_ctl_lines l;
	char *line;
	size_t len;
	int got = 0;

	moem_ctl_lines_init(&l, 64);
	/* One byte at a time: lines come out whole, CR stripped. */
	for (size_t i = 0; i < strlen(in); i++) {
		ASSERT_EQ(0, moem_ctl_lines_feed(&l, in + i, 1));
		while (moem_ctl_lines_next(&l, &line, &len) == 1) {
			if (got == 0)
				EXPECT_STREQ("{\"a\":1}", line);
			if (got == 1)
				EXPECT_EQ(0u, len);
			if (got == 2)
				EXPECT_STREQ("{\"b\":2}", line);
			got++;
		}
	}
	EXPECT_EQ(3, got);
	EXPECT_EQ(0, moem_ctl_lines_next(&l, &line, &len)); /* "{\"c\"" waits */
	ASSERT_EQ(0, moem_ctl_lines_feed(&l, "}\n", 2));
	ASSERT_EQ(1, moem_ctl_lines_next(&l, &line, &len));
	EXPECT_STREQ("{\"c\"}", line);
	moem_ctl_lines_free(&l);
}

TEST(lines_too_long)
{
	struct moem_ctl_lines l;
	char big[100], *line;
	size_t len;

	memset(big, 'x', sizeof(big));
	moem_ctl_lines_init(&l, 64);
	ASSERT_EQ(0, moem_ctl_lines_feed(&l, big, 60));
	EXPECT_EQ(0, moem_ctl_lines_next(&l, &line, &len));
	ASSERT_EQ(0, moem_ctl_lines_feed(&l, big, 10));
	EXPECT_EQ(-E2BIG, moem_ctl_lines_next(&l, &line, &len));
	EXPECT_NE(NULL, strstr(moem_last_error(), "longer than 64 bytes"));
	/* Feeding more does not grow the buffer without bound. */
	for (int i = 0; i < 10; i++)
		if (moem_ctl_lines_feed(&l, big, sizeof(big)))
			break;
	EXPECT_LE(l.len, 64u + 1 + sizeof(big));
	moem_ctl_lines_free(&l);

	/* A complete line over the limit is refused too. */
	moem_ctl_lines_init(&l, 8);
	ASSERT_EQ(0, moem_ctl_lines_feed(&l, "0123456789\n", 11));
	EXPECT_EQ(-E2BIG, moem_ctl_lines_next(&l, &line, &len));
	moem_ctl_lines_free(&l);
}

static int parse(const char *s, int64_t *id, const char **cmd, struct json_object **req)
{
	return moem_ctl_parse_request(s, strlen(s), req, id, cmd);
}

TEST(requests)
{
	struct json_object *req;
	const char *cmd;
	int64_t id;

	ASSERT_EQ(0,
		  parse("{\"v\":1,\"id\":7,\"cmd\":\"status\",\"extra\":[1,2]} ", &id, &cmd, &req));
	EXPECT_EQ(7, id);
	EXPECT_STREQ("status", cmd);
	json_object_put(req);

	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"id\":7,\"cmd\":\"status\"", &id, &cmd, &req));
	EXPECT_NE(NULL, strstr(moem_last_error(), "malformed request"));
	EXPECT_EQ(NULL, req);
	EXPECT_EQ(-EINVAL, parse("not json", &id, &cmd, &req));
	EXPECT_EQ(-EINVAL, parse("[1,2]", &id, &cmd, &req));
	EXPECT_NE(NULL, strstr(moem_last_error(), "JSON object"));
	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"id\":1,\"cmd\":\"x\"} trailing", &id, &cmd, &req));
	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"cmd\":\"status\"}", &id, &cmd, &req));
	EXPECT_NE(NULL, strstr(moem_last_error(), "\"id\""));
	EXPECT_EQ(-1, id);
	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"id\":-3,\"cmd\":\"status\"}", &id, &cmd, &req));
	/* The id is known from here on: errors carry it. */
	EXPECT_EQ(-EINVAL, parse("{\"id\":4,\"cmd\":\"status\"}", &id, &cmd, &req));
	EXPECT_EQ(4, id);
	EXPECT_NE(NULL, strstr(moem_last_error(), "\"v\""));
	EXPECT_EQ(-EPROTONOSUPPORT,
		  parse("{\"v\":2,\"id\":5,\"cmd\":\"status\"}", &id, &cmd, &req));
	EXPECT_NE(NULL, strstr(moem_last_error(), "version 2 is not supported"));
	EXPECT_EQ(-EINVAL, parse("{\"v\":\"1\",\"id\":5,\"cmd\":\"status\"}", &id, &cmd, &req));
	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"id\":5,\"cmd\":3}", &id, &cmd, &req));
	EXPECT_EQ(-EINVAL, moem_ctl_parse_request("{\"v\":1}\0x", 9, &req, &id, &cmd));
	EXPECT_NE(NULL, strstr(moem_last_error(), "NUL"));
	/* Deep nesting is refused by the tokenizer, not by a crash. */
	{
		char deep[2200];
		int n = 0;

		n += sprintf(deep, "{\"v\":1,\"id\":1,\"cmd\":\"x\",\"a\":");
		for (int i = 0; i < 1000; i++)
			deep[n++] = '[';
		deep[n] = 0;
		EXPECT_EQ(-EINVAL, parse(deep, &id, &cmd, &req));
	}
}

/*
 * Every JSON value that is not an object is refused with its type named.
 * The type used to be read after the value was released: the test-valgrind
 * suite runs this program under valgrind, which sees such a read inside
 * json-c where ASan cannot.
 */
TEST(requests_not_objects)
{
	static const struct {
		const char *line, *type;
	} cases[] = {
		{"[1,2]", "array"},  {"[]", "array"},	   {"\"x\"", "string"},
		{"12", "int"},	     {"-7", "int"},	   {"1.5", "double"},
		{"true", "boolean"}, {"false", "boolean"}, {"  \"status\"  ", "string"},
	};
	struct json_object *req;
	const char *cmd;
	int64_t id;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "a request is a JSON object, not %s", cases[i].type);
		EXPECT_EQ(-EINVAL, parse(cases[i].line, &id, &cmd, &req))
		TH_LOG("%s", cases[i].line);
		EXPECT_EQ(NULL, req);
		EXPECT_EQ(-1, id);
		EXPECT_STREQ(want, moem_last_error()) TH_LOG("%s", cases[i].line);
	}
	/* null is no value at all: malformed. */
	EXPECT_EQ(-EINVAL, parse("null", &id, &cmd, &req));
	EXPECT_NE(NULL, strstr(moem_last_error(), "malformed request"));
}

/* An id is answered as it was sent: one that does not fit is refused. */
TEST(request_ids_that_do_not_fit)
{
	static const char *const too_big[] = {
		"{\"v\":1,\"id\":18446744073709551616,\"cmd\":\"status\"}", /* 2^64 */
		"{\"v\":1,\"id\":18446744073709551615,\"cmd\":\"status\"}",
		"{\"v\":1,\"id\":9223372036854775808,\"cmd\":\"status\"}", /* 2^63 */
		"{\"v\":1,\"id\":123456789012345678901234567890,\"cmd\":\"status\"}",
	};
	struct json_object *req;
	const char *cmd;
	int64_t id;

	for (size_t i = 0; i < sizeof(too_big) / sizeof(too_big[0]); i++) {
		EXPECT_EQ(-EINVAL, parse(too_big[i], &id, &cmd, &req)) TH_LOG("%s", too_big[i]);
		EXPECT_EQ(-1, id);
		EXPECT_EQ(NULL, req);
		EXPECT_NE(NULL, strstr(moem_last_error(), "does not fit"));
	}
	ASSERT_EQ(0, parse("{\"v\":1,\"id\":9223372036854775807,\"cmd\":\"status\"}", &id, &cmd,
			   &req));
	EXPECT_EQ(INT64_MAX, id);
	json_object_put(req);
	EXPECT_EQ(-EINVAL, parse("{\"v\":1,\"id\":1e3,\"cmd\":\"status\"}", &id, &cmd, &req));
}

TEST(responses_and_getters)
{
	struct json_object *o = moem_ctl_error(9, EINVAL, "bad \"thing\"\n"), *req;
	char *line, buf[16];
	const char *s, *cmd;
	size_t len;
	int64_t id;
	bool b;

	line = moem_ctl_line(o, &len);
	ASSERT_NE(NULL, line);
	EXPECT_EQ('\n', line[len - 1]);
	EXPECT_EQ(NULL, memchr(line, '\n', len - 1)); /* one line, escapes inside */
	EXPECT_NE(NULL, strstr(line, "\"ok\":false"));
	EXPECT_NE(NULL, strstr(line, "\"errno\":22"));
	free(line);
	json_object_put(o);

	ASSERT_EQ(0, parse("{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":123,"
			   "\"s\":\"12G\",\"b\":true,\"n\":null,\"f\":1.5,\"neg\":-4}",
			   &id, &cmd, &req));
	EXPECT_EQ(0, moem_ctl_get_str(req, "knob", &s));
	EXPECT_STREQ("hbm_bytes", s);
	EXPECT_EQ(-EINVAL, moem_ctl_get_str(req, "value", &s));
	EXPECT_EQ(-ENOENT, moem_ctl_get_str(req, "n", &s));
	EXPECT_EQ(-ENOENT, moem_ctl_get_str(req, "absent", &s));
	EXPECT_EQ(0, moem_ctl_get_scalar(req, "value", buf, sizeof(buf)));
	EXPECT_STREQ("123", buf);
	EXPECT_EQ(0, moem_ctl_get_scalar(req, "s", buf, sizeof(buf)));
	EXPECT_STREQ("12G", buf);
	EXPECT_EQ(0, moem_ctl_get_scalar(req, "neg", buf, sizeof(buf)));
	EXPECT_STREQ("-4", buf);
	EXPECT_EQ(-EINVAL, moem_ctl_get_scalar(req, "f", buf, sizeof(buf)));
	EXPECT_EQ(-EINVAL, moem_ctl_get_scalar(req, "knob", buf, 4)); /* too long */
	EXPECT_EQ(0, moem_ctl_get_bool(req, "b", &b));
	EXPECT_TRUE(b);
	EXPECT_EQ(-EINVAL, moem_ctl_get_bool(req, "value", &b));
	json_object_put(req);
}

/*
 * moemd refuses a connection it does not take (too many from one uid) with
 * an error line and closes it. A client that sends after the close got
 * "send to moemd: Broken pipe"; it says what moemd said.
 */
TEST(refused_connection)
{
	static const char refusal[] = "{\"v\":1,\"id\":null,\"ok\":false,\"error\":\"too many "
				      "control connections from uid 1001 (4 at once)\","
				      "\"errno\":16}\n";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/moem-ctl-XXXXXX";
	struct json_object *r = (void *)1;
	struct moem_ctl *c;
	int lfd, fd, ret;

	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s.sock", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	ASSERT_LE(0, lfd);
	ASSERT_EQ(0, bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_EQ(0, listen(lfd, 1));
	ASSERT_EQ(0, moem_ctl_connect(sa.sun_path, &c));
	fd = accept(lfd, NULL, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)strlen(refusal), write(fd, refusal, strlen(refusal)));
	close(fd); /* before the client sends: its send fails with EPIPE */
	ret = moem_ctl_call(c, "hello", NULL, 2000, &r);
	EXPECT_EQ(-EBUSY, ret);
	EXPECT_NE(NULL, strstr(moem_last_error(), "too many control connections from uid 1001"));
	EXPECT_EQ(NULL, r);
	moem_ctl_close(c);
	close(lfd);
	unlink(sa.sun_path);
	rmdir(dir);
}

TEST(engine_args)
{
	struct moem_engine_args a, b;

	moem_engine_args_init(&a);
	EXPECT_EQ(-ENOENT, moem_engine_args_set(&a, "socket", "/x"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "route", "oea:k0=2"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "route", "lynx")); /* replaces, no leak */
	EXPECT_STREQ("lynx", a.o.route);
	EXPECT_EQ(0, moem_engine_args_set(&a, "workload", "trace:/t/x.trace"));
	EXPECT_EQ(MOEM_WL_TRACE, a.w.kind);
	EXPECT_STREQ("/t/x.trace", a.w.path);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "workload", "hidden:"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "batch", "0"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "batch", "65"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "steps", "-1"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "steps", "99999999999999999999"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "steps", "2000000000000"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "steps"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "steps", "100"));
	EXPECT_EQ(100u, a.w.steps);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "fallback", "maybe"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "fallback", ""));
	EXPECT_TRUE(a.o.allow_fallback);
	EXPECT_EQ(0, moem_engine_args_set(&a, "fallback", "no"));
	EXPECT_FALSE(a.o.allow_fallback);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "region", ""));
	EXPECT_EQ(0, moem_engine_args_set(&a, "region", "r1"));
	EXPECT_STREQ("r1", a.o.pool.name);
	EXPECT_TRUE(a.o.pool.attach);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "link-gbps", "0"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "pool", "nvram"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "hbm", "12M"));
	/* kv: the kv_bytes knob's own rules (the knob table's range) */
	EXPECT_EQ(0, moem_engine_args_set(&a, "kv", "64K"));
	EXPECT_EQ(65536u, a.o.kv_budget);
	EXPECT_EQ(-ERANGE, moem_engine_args_set(&a, "kv", "2048T"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "kv", "25%"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "kv_bytes")) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(65536u, a.o.kv_budget);
	/* 0 means what the knob's 0 means: no limit, the whole model. */
	EXPECT_EQ(0, moem_engine_args_set(&a, "dram", "0"));
	EXPECT_EQ(0, moem_engine_args_resolve(&a)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, a.o.dram_budget);
	EXPECT_EQ(0, moem_engine_args_set(&a, "mem-reserve", "lots"));
	EXPECT_EQ(-EINVAL, moem_engine_args_resolve(&a));
	EXPECT_NE(NULL, strstr(moem_last_error(), "mem-reserve"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "mem-reserve", "512M"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "dram", "1G"));
	/* HI[,LO]: two at most, LO with fewer bits */
	EXPECT_EQ(0, moem_engine_args_set(&a, "precisions", "bf16,q4,q8"));
	EXPECT_EQ(-EINVAL, moem_engine_args_resolve(&a));
	EXPECT_NE(NULL, strstr(moem_last_error(), "two at most")) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0, moem_engine_args_set(&a, "precisions", "q4,bf16"));
	EXPECT_EQ(-EINVAL, moem_engine_args_resolve(&a));
	EXPECT_NE(NULL, strstr(moem_last_error(), "LO (bf16) must have fewer bits than HI (q4)"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0, moem_engine_args_set(&a, "precisions", "q4,q2"));
	ASSERT_EQ(0, moem_engine_args_resolve(&a));
	EXPECT_EQ(12u << 20, a.o.hbm_budget);
	EXPECT_EQ(512u << 20, a.o.pool.mem_reserve);
	EXPECT_TRUE(a.o.pool.fit);
	EXPECT_EQ(MOEM_PREC_Q4, a.o.hi);
	EXPECT_EQ(MOEM_PREC_Q2, a.o.lo);
	EXPECT_TRUE(a.o.two_prec);
	/* A percentage needs the pack. */
	EXPECT_EQ(0, moem_engine_args_set(&a, "hbm", "25%"));
	EXPECT_EQ(-EINVAL, moem_engine_args_resolve(&a));

	/* A copy owns its own strings. */
	ASSERT_EQ(0, moem_engine_args_copy(&b, &a));
	EXPECT_NE(a.o.route, b.o.route);
	EXPECT_STREQ(a.o.route, b.o.route);
	EXPECT_EQ(b.region, b.o.pool.name);
	moem_engine_args_free(&a);
	EXPECT_STREQ("lynx", b.o.route);
	moem_engine_args_free(&b);
}

TEST_HARNESS_MAIN
