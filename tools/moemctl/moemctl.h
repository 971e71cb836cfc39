/* SPDX-License-Identifier: GPL-2.0-only */
/* moemctl's shared pieces: global options, the connection, output helpers. */
#ifndef MOEMCTL_H
#define MOEMCTL_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include <moem/ctl.h>

struct ctl_opts {
	const char *socket;
	bool json;
	int timeout_ms;	 /* per request; runs wait without a limit */
	bool bad_answer; /* a human printer found moemd's answer malformed: exit 1 */
};

extern struct ctl_opts g;

/* Connect or print why not (and return NULL). */
struct moem_ctl *ctl_connect(void);
/* Call cmd; print the error and return 1 on failure (resp may still be
 * set, for --json). */
int ctl_call(struct moem_ctl *c, const char *cmd, struct json_object *args, int timeout_ms,
	     struct json_object **resp);
/* Print a response as one JSON line. */
void print_json(struct json_object *o);
int fail(const char *what, int err);

/* Field getters that tolerate absence (0, "", false). */
struct json_object *jobj(struct json_object *o, const char *key);
uint64_t ju64(struct json_object *o, const char *key);
double jdbl(struct json_object *o, const char *key);
const char *jstr(struct json_object *o, const char *key);
bool jbool(struct json_object *o, const char *key);
/* A human printer's check that moemd's answer has key, of one of the types
 * (JT(int) | JT(string), ...); else it says so and sets g.bad_answer. */
#define JT(t) (1u << json_type_##t)
bool janswer(struct json_object *o, const char *cmd, const char *key, unsigned int types);

/* status.c */
void print_status(struct json_object *st);
/* run.c */
int cmd_run(int argc, char **argv);
void print_run(struct json_object *r);

#endif /* MOEMCTL_H */
