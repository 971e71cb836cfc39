// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemctl: talk to moemd over its control socket (Documentation/protocol.md)
 * and to moem.ko's budget knobs. Human output by default, --json for
 * scripts (the daemon's response, one line).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>
#include <moem/version.h>

#include "moemctl.h"

struct ctl_opts g = {.timeout_ms = 10000};

int fail(const char *what, int err)
{
	fprintf(stderr, "moemctl %s: %s\n", what, moem_strerror(err));
	return 1;
}

struct moem_ctl *ctl_connect(void)
{
	struct moem_ctl *c;
	int ret = moem_ctl_connect(g.socket, &c);

	if (ret) {
		fail("connect", ret);
		return NULL;
	}
	return c;
}

int ctl_call(struct moem_ctl *c, const char *cmd, struct json_object *args, int timeout_ms,
	     struct json_object **resp)
{
	int ret = moem_ctl_call(c, cmd, args, timeout_ms, resp);

	if (ret) {
		if (g.json && *resp)
			print_json(*resp);
		return fail(cmd, ret);
	}
	return 0;
}

void print_json(struct json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								 JSON_C_TO_STRING_NOSLASHESCAPE));
}

struct json_object *jobj(struct json_object *o, const char *key)
{
	struct json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

uint64_t ju64(struct json_object *o, const char *key)
{
	struct json_object *v = jobj(o, key);

	return v ? json_object_get_uint64(v) : 0;
}

double jdbl(struct json_object *o, const char *key)
{
	struct json_object *v = jobj(o, key);

	return v ? json_object_get_double(v) : 0;
}

const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v = jobj(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
}

bool jbool(struct json_object *o, const char *key)
{
	struct json_object *v = jobj(o, key);

	return v && json_object_get_boolean(v);
}

bool janswer(struct json_object *o, const char *cmd, const char *key, unsigned int types)
{
	struct json_object *v = jobj(o, key);

	if (v && (types & (1u << json_object_get_type(v))))
		return true;
	fprintf(stderr, "moemctl %s: moemd's answer has %s '%s'\n", cmd, v ? "an odd" : "no", key);
	g.bad_answer = true;
	return false;
}

/* A knob's value: a number or a name. */
#define SCALAR (JT(int) | JT(double) | JT(string))

/* Call cmd with args; print the response as JSON or run human(). */
static int simple(const char *cmd, struct json_object *args, void (*human)(struct json_object *))
{
	struct moem_ctl *c = ctl_connect();
	struct json_object *r = NULL;
	int rc;

	if (!c) {
		json_object_put(args);
		return 1;
	}
	rc = ctl_call(c, cmd, args, g.timeout_ms, &r);
	moem_ctl_close(c);
	if (!rc) {
		if (g.json)
			print_json(r);
		else if (human)
			human(r);
		if (g.bad_answer)
			rc = 1;
	}
	json_object_put(r);
	return rc;
}

/* Without moemd, status still says what moem.ko has. */
static int kernel_only_status(void)
{
	uint64_t v;
	char buf[64];
	int fd;

	for (int k = 0; k < MOEM_BUDGET_NR; k++) {
		char path[128];
		ssize_t n;

		snprintf(path, sizeof(path), "%s/budgets/%s", MOEM_SYSFS_ROOT,
			 moem_budget_name((enum moem_budget_knob)k));
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (!k)
				fprintf(stderr, "moemctl: moem.ko is not loaded either\n");
			return 1;
		}
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = 0;
		if (!k)
			fprintf(stderr, "moemctl: moem.ko budgets (sysfs):");
		fprintf(stderr, " %s %s", moem_budget_name((enum moem_budget_knob)k),
			strtok(buf, "\n") ? buf : "?");
		(void)v;
	}
	fprintf(stderr, "\n");
	return 1;
}

static void human_status(struct json_object *r)
{
	print_status(r);
}

static int cmd_status(int argc, char **argv)
{
	struct moem_ctl *c;
	struct json_object *r = NULL;
	int rc, ret;

	if (argc != 1)
		return 2;
	ret = moem_ctl_connect(g.socket, &c);
	if (ret) {
		fail("status", ret);
		return kernel_only_status();
	}
	rc = ctl_call(c, "status", NULL, g.timeout_ms, &r);
	moem_ctl_close(c);
	if (!rc)
		g.json ? print_json(r) : human_status(r);
	json_object_put(r);
	return rc ? rc : g.bad_answer;
}

static void human_get(struct json_object *r)
{
	struct json_object *k = jobj(r, "knobs");

	/* an answer not shaped as the protocol says is an error, not a crash */
	if (!k) {
		if (janswer(r, "get", "knob", JT(string)) && janswer(r, "get", "value", SCALAR))
			printf("%s %s\n", jstr(r, "knob"),
			       json_object_get_string(jobj(r, "value")));
		return;
	}
	if (!janswer(r, "get", "knobs", JT(object)))
		return;
	for (struct json_object_iterator it = json_object_iter_begin(k),
					 end = json_object_iter_end(k);
	     !json_object_iter_equal(&it, &end); json_object_iter_next(&it))
		printf("%s %s\n", json_object_iter_peek_name(&it),
		       json_object_get_string(json_object_iter_peek_value(&it)));
}

static int cmd_get(int argc, char **argv)
{
	struct json_object *args;

	if (argc > 2)
		return 2;
	args = json_object_new_object();
	if (argc == 2)
		json_object_object_add(args, "knob", json_object_new_string(argv[1]));
	return simple("get", args, human_get);
}

/* moemctl set --via ioctl|sysfs: write moem.ko's knob; moemd follows. */
static int set_kernel(const char *via, const char *knob, const char *value)
{
	enum moem_budget_knob k;
	char path[128], buf[64];
	uint64_t v;
	int ret, fd;

	ret = moem_budget_lookup(knob, &k);
	if (!ret && strchr(value, '%'))
		ret = moem_errf(EINVAL,
				"%s %s: moem.ko does not know the pack, so it takes bytes; a "
				"percentage goes through moemd (moemctl set %s %s)",
				knob, value, knob, value);
	if (!ret)
		ret = moem_budget_parse(k, value, &v);
	if (ret)
		return fail("set", ret);
	if (!strcmp(via, "ioctl")) {
		ret = moem_dev_open(NULL, &fd);
		if (!ret) {
			ret = moem_dev_budget_set(fd, k, v);
			close(fd);
		}
		if (ret)
			return fail("set --via ioctl", ret);
	} else {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/budgets/%s", MOEM_SYSFS_ROOT, knob);
		moem_budget_format(k, v, buf, sizeof(buf));
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			int err = errno;
			const char *why = "";

			/* the budgets directory there but not the file: an older module */
			if (err == ENOENT && !access(MOEM_SYSFS_ROOT "/budgets", F_OK))
				why = " (the loaded moem.ko predates this knob)";
			else if (err == ENOENT)
				why = " (moem.ko not loaded)";
			return fail("set --via sysfs",
				    moem_errf(err, "%s: %s%s", path, strerror(err), why));
		}
		n = write(fd, buf, strlen(buf));
		ret = n < 0 ? -errno : 0;
		close(fd);
		if (ret)
			return fail("set --via sysfs", moem_errf(-ret, "write '%s' to %s: %s", buf,
								 path, strerror(-ret)));
	}
	moem_budget_format(k, v, buf, sizeof(buf));
	if (g.json)
		printf("{\"ok\":true,\"knob\":\"%s\",\"value\":\"%s\",\"via\":\"%s\"}\n", knob, buf,
		       via);
	else
		printf("%s = %s (moem.ko, via %s; moemd follows)\n", knob, buf, via);
	return 0;
}

static void human_set(struct json_object *r)
{
	if (!janswer(r, "set", "knob", JT(string)) || !janswer(r, "set", "value", SCALAR) ||
	    !janswer(r, "set", "applied", JT(string)))
		return;
	printf("%s = %s (applied %s)\n", jstr(r, "knob"), json_object_get_string(jobj(r, "value")),
	       jstr(r, "applied"));
}

static int cmd_set(int argc, char **argv)
{
	static const struct option o[] = {{"via", required_argument, NULL, 'v'}, {0}};
	const char *via = "socket";
	struct json_object *args;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (ch != 'v')
			return 2;
		via = optarg;
	}
	if (argc - optind != 2)
		return 2;
	if (!strcmp(via, "ioctl") || !strcmp(via, "sysfs"))
		return set_kernel(via, argv[optind], argv[optind + 1]);
	if (strcmp(via, "socket")) {
		fprintf(stderr, "moemctl set: --via socket, ioctl or sysfs\n");
		return 2;
	}
	args = json_object_new_object();
	json_object_object_add(args, "knob", json_object_new_string(argv[optind]));
	json_object_object_add(args, "value", json_object_new_string(argv[optind + 1]));
	return simple("set", args, human_set);
}

static void human_trace(struct json_object *r)
{
	if (!janswer(r, "trace", "on", JT(boolean)) ||
	    (jbool(r, "on") && !janswer(r, "trace", "path", JT(string))))
		return;
	if (jbool(r, "on"))
		printf("trace on: %s (from the next run)\n", jstr(r, "path"));
	else
		printf("trace off\n");
}

static int cmd_trace(int argc, char **argv)
{
	struct json_object *args = json_object_new_object();
	bool logits = argc == 4 && !strcmp(argv[3], "--logits");

	if (argc >= 3 && !strcmp(argv[1], "on") && (argc == 3 || logits)) {
		/* A name: moemd writes it inside its trace-dir, nowhere else. */
		json_object_object_add(args, "on", json_object_new_boolean(1));
		json_object_object_add(args, "name", json_object_new_string(argv[2]));
		if (logits)
			json_object_object_add(args, "logits", json_object_new_boolean(1));
	} else if (argc == 2 && !strcmp(argv[1], "off")) {
		json_object_object_add(args, "on", json_object_new_boolean(0));
	} else {
		json_object_put(args);
		return 2;
	}
	return simple("trace", args, human_trace);
}

static void human_verify(struct json_object *r)
{
	if (!janswer(r, "verify", "checked", JT(int)))
		return;
	printf("%llu staged expert versions match the pack\n",
	       (unsigned long long)ju64(r, "checked"));
}

static int cmd_verify(int argc, char **argv)
{
	int saved = g.timeout_ms;
	int rc;

	(void)argv;
	if (argc != 1)
		return 2;
	g.timeout_ms = -1; /* reads every staged byte */
	rc = simple("verify", NULL, human_verify);
	g.timeout_ms = saved;
	return rc;
}

static void human_stop_run(struct json_object *r)
{
	if (!janswer(r, "stop-run", "stopping", JT(boolean)))
		return;
	printf("%s\n", jbool(r, "stopping") ? "the run stops after its current step"
					    : "no run in progress");
}

static int cmd_stop_run(int argc, char **argv)
{
	(void)argv;
	if (argc != 1)
		return 2;
	return simple("stop-run", NULL, human_stop_run);
}

/* Ask moemd to exit and wait until it has (its socket closes). */
static int cmd_stop(int argc, char **argv)
{
	struct moem_ctl *c;
	struct json_object *r = NULL;
	char *line;
	int rc;

	/* "moemctl stop run" (for stop-run) must not stop the daemon */
	(void)argv;
	if (argc != 1)
		return 2;
	c = ctl_connect();
	if (!c)
		return 1;
	rc = ctl_call(c, "shutdown", NULL, g.timeout_ms, &r);
	json_object_put(r);
	if (!rc) {
		/* moemd closes every connection when it exits. */
		while (moem_ctl_recv_line(c, 15000, &line) == 0)
			free(line);
		if (!g.json)
			printf("moemd stopped\n");
		else
			printf("{\"ok\":true,\"stopped\":true}\n");
	}
	moem_ctl_close(c);
	return rc;
}

static void human_hello(struct json_object *r)
{
	static const char *const strs[] = {"moemd", "protocol", "state", "pack", "pack_id"};

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(strs); i++)
		if (!janswer(r, "hello", strs[i], JT(string)))
			return;
	if (!janswer(r, "hello", "pid", JT(int)))
		return;
	printf("moemd %s, protocol %s, pid %llu, %s; pack %s (id %s)\n", jstr(r, "moemd"),
	       jstr(r, "protocol"), (unsigned long long)ju64(r, "pid"), jstr(r, "state"),
	       jstr(r, "pack"), jstr(r, "pack_id"));
}

static int cmd_hello(int argc, char **argv)
{
	(void)argv;
	if (argc != 1)
		return 2;
	return simple("hello", NULL, human_hello);
}

/* Send lines as they are (arguments, or stdin) and print every answer:
 * for scripts and for testing the daemon's handling of bad input. */
/* One line out, its answer in: moemd drops a client that does not read. */
static int raw_one(struct moem_ctl *c, const char *l, size_t len)
{
	char *ans;
	int rc;

	/* moemd ignores blank lines: no answer would come */
	if (strspn(l, " \t\r\n") == len)
		return 0;
	rc = moem_ctl_send_line(c, l, len);
	if (rc == -ECONNRESET && !moem_ctl_recv_line(c, 1000, &ans)) {
		/* moemd refused the connection (a line, then close): show why */
		printf("%s\n", ans);
		free(ans);
		return moem_errf(ECONNRESET, "moemd closed the connection");
	}
	if (!rc)
		rc = moem_ctl_recv_line(c, g.timeout_ms, &ans);
	if (!rc) {
		printf("%s\n", ans);
		free(ans);
	}
	return rc;
}

static int cmd_raw(int argc, char **argv)
{
	struct moem_ctl *c = ctl_connect();
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;

	if (!c)
		return 1;
	if (argc > 1) {
		for (int i = 1; i < argc && !rc; i++)
			rc = raw_one(c, argv[i], strlen(argv[i]));
	} else {
		ssize_t len;

		/* a line moemd would refuse (MOEM_CTL_LINE_MAX) is not read whole */
		while (!rc) {
			len = moem_getline(&line, &cap, stdin, "standard input",
					   MOEM_CTL_LINE_MAX + 2);
			if (len < 0) {
				rc = len == -ENODATA ? 0 : (int)len;
				break;
			}
			rc = raw_one(c, line, (size_t)len);
		}
		free(line);
	}
	moem_ctl_close(c);
	return rc ? fail("raw", rc) : 0;
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *args, *help;
} commands[] = {
	{"status", cmd_status, "", "pool, tiers, hit rates, stalls, policies, budgets, run"},
	{"get", cmd_get, "[KNOB]", "budget knobs, batching and hybrid settings in force"},
	{"set", cmd_set, "[--via socket|ioctl|sysfs] KNOB VALUE",
	 "change a knob (below; hbm_bytes and dram_bytes also take 40% of the expert\n"
	 "      bytes, socket only; the model server's max_batch, max_queue,\n"
	 "      step_tokens, prefill_chunk, socket only; hybrid execution's exec\n"
	 "      gpu|hybrid and cpu_moe_layers N, socket only)"},
	{"run", cmd_run, "[--workload W] [--batch B] [--steps N] [--mix M] [--seed S]",
	 "submit a workload and show its result"},
	{"stop-run", cmd_stop_run, "", "end the run in progress after its current step"},
	{"trace", cmd_trace, "on NAME [--logits] | off",
	 "write the routing trace of later runs to NAME in moemd's trace-dir"},
	{"verify", cmd_verify, "", "check staged experts against the pack's checksums"},
	{"stop", cmd_stop, "", "drain and stop moemd (like SIGTERM)"},
	{"hello", cmd_hello, "", "versions and pack id"},
	{"raw", cmd_raw, "[LINE...]", "send protocol lines (or stdin) as they are"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: moemctl [--socket PATH] [--json] [--timeout MS] COMMAND [ARGS]\n"
		   "Talk to moemd over its control socket, and to moem.ko's budget knobs.\n\n");
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(commands); i++)
		fprintf(f, "  %s %s\n      %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(f, "\nBudget knobs (moem.ko's sysfs files and ioctl, moemd's socket):\n");
	for (int k = 0; k < MOEM_BUDGET_NR; k++) {
		const struct moem_knob_info *ki = moem_knob_info((enum moem_budget_knob)k);

		if (ki->unit == MOEM_KNOB_UNIT_ENUM)
			fprintf(f, "  %-22s one of", ki->name);
		else
			fprintf(f, "  %-22s %s %llu..%llu%s", ki->name,
				moem_knob_unit_name(ki->unit), (unsigned long long)ki->min,
				(unsigned long long)ki->max,
				ki->unit == MOEM_KNOB_UNIT_BYTES ? " (K/M/G/T suffixes; 0: unset)"
								 : "");
		for (int r = 0; ki->unit == MOEM_KNOB_UNIT_ENUM && r <= (int)ki->max; r++)
			fprintf(f, " %s", ki->values[r]);
		fprintf(f, "; applied %s\n", moem_knob_apply_text(ki->apply));
	}
	fprintf(f, "\nThe socket defaults to %s (or $MOEMD_SOCKET).\n", MOEM_CTL_SOCKET);
	fprintf(f, "  --version   the version of moemctl and its protocol\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},  {"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},	   {0},
	};
	int ch;

	g.socket = getenv("MOEMD_SOCKET");
	while ((ch = getopt_long(argc, argv, "+s:jt:hV", opts, NULL)) != -1) {
		switch (ch) {
		case 's':
			g.socket = optarg;
			break;
		case 'j':
			g.json = true;
			break;
		case 't': {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 86400000) {
				fprintf(stderr,
					"moemctl: --timeout '%s': milliseconds, 1..86400000\n",
					optarg);
				return 2;
			}
			g.timeout_ms = (int)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("moemctl %s (control protocol %d.%d)\n", MOEM_VERSION,
			       MOEM_CTL_VERSION_MAJOR, MOEM_CTL_VERSION_MINOR);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(commands); i++) {
		int rc;

		if (strcmp(argv[optind], commands[i].name))
			continue;
		rc = commands[i].fn(argc - optind, argv + optind);
		if (rc == 2)
			fprintf(stderr, "usage: moemctl %s %s\n", commands[i].name,
				commands[i].args);
		return rc;
	}
	fprintf(stderr, "moemctl: unknown command '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}
