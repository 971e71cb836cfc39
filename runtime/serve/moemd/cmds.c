// SPDX-License-Identifier: GPL-2.0-only
/*
 * The control commands (Documentation/protocol.md). Everything here runs
 * on the event loop and returns at once: status, knobs and trace settings
 * go straight to the engine (which takes them from any thread); runs and
 * verifications become worker jobs whose responses are sent when they
 * finish (moemd_job_done).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/trace.h>
#include <moem/util.h>

#include "moemd.h"

static const char *const command_names[] = {
	"hello", "status", "get", "set", "run", "stop-run", "trace", "verify", "shutdown",
};

static bool run_active(struct moemd *d)
{
	bool r;

	pthread_mutex_lock(&d->lock);
	r = d->cur && d->cur->kind == JOB_RUN;
	pthread_mutex_unlock(&d->lock);
	return r;
}

static void reply_err(struct moemd *d, struct moemd_client *c, int64_t id, int err, const char *fmt,
		      ...) MOEM_PRINTF(5, 6);

static void reply_err(struct moemd *d, struct moemd_client *c, int64_t id, int err, const char *fmt,
		      ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	moemd_client_send(d, c, moem_ctl_error(id, err, msg));
}

/* The engine is there and may take work; else answer why not. */
static bool need_ready(struct moemd *d, struct moemd_client *c, int64_t id)
{
	int s = moemd_state_get(d);

	if (s == MOEMD_READY)
		return true;
	if (s == MOEMD_STAGING) {
		uint64_t done = __atomic_load_n(&d->prog.done, __ATOMIC_RELAXED),
			 total = d->prog.total;

		reply_err(d, c, id, EAGAIN, "not ready: staging experts (%.0f%%)",
			  total ? 100.0 * (double)done / (double)total : 0.0);
	} else {
		reply_err(d, c, id, EAGAIN, "not ready: moemd is %s", moemd_state_name(s));
	}
	return false;
}

static void cmd_hello(struct moemd *d, struct moemd_client *c, int64_t id)
{
	struct json_object *r = moem_ctl_ok(id), *cmds = json_object_new_array();

	json_object_object_add(r, "moemd", json_object_new_string(MOEMD_VERSION));
	json_object_object_add(r, "protocol", json_object_new_string("1.0"));
	json_object_object_add(r, "protocol_major", json_object_new_int(MOEM_CTL_VERSION_MAJOR));
	json_object_object_add(r, "protocol_minor", json_object_new_int(MOEM_CTL_VERSION_MINOR));
	json_object_object_add(r, "pid", json_object_new_int(getpid()));
	json_object_object_add(r, "state",
			       json_object_new_string(moemd_state_name(moemd_state_get(d))));
	json_object_object_add(r, "pack", json_object_new_string(d->cfg.ea.o.pack_path));
	json_object_object_add(r, "pack_id", json_object_new_string(d->pack_id));
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(command_names); i++)
		json_object_array_add(cmds, json_object_new_string(command_names[i]));
	json_object_object_add(r, "commands", cmds);
	moemd_client_send(d, c, r);
}

static void cmd_status(struct moemd *d, struct moemd_client *c, int64_t id)
{
	struct json_object *r = moemd_status_json(d);

	if (!r) {
		reply_err(d, c, id, ENOMEM, "out of memory");
		return;
	}
	json_object_object_add(r, "v", json_object_new_int(MOEM_CTL_VERSION_MAJOR));
	json_object_object_add(r, "id", json_object_new_int64(id));
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	moemd_client_send(d, c, r);
}

static struct json_object *knob_json(enum moem_budget_knob k, uint64_t v)
{
	if (moem_knob_info(k)->unit == MOEM_KNOB_UNIT_ENUM)
		return json_object_new_string(moem_knob_value_name(k, v));
	return json_object_new_uint64(v);
}

/* An engine knob by name; the error lists the batching settings too. */
static int knob_lookup(const char *name, enum moem_budget_knob *k)
{
	char why[320];

	if (!moem_budget_lookup(name, k))
		return 0;
	snprintf(why, sizeof(why), "%s", moem_last_error());
	return moem_errf(EINVAL, "%s; batching: max_batch, max_queue, step_tokens, prefill_chunk",
			 why);
}

static void cmd_get(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *req)
{
	struct json_object *r, *knobs;
	enum moem_budget_knob k;
	const char *name;
	uint32_t now;
	int ret;

	if (!need_ready(d, c, id))
		return;
	ret = moem_ctl_get_str(req, "knob", &name);
	if (ret == -ENOENT) {
		r = moem_ctl_ok(id);
		knobs = json_object_new_object();
		for (int i = 0; i < MOEM_BUDGET_NR; i++)
			json_object_object_add(
				knobs, moem_budget_name((enum moem_budget_knob)i),
				knob_json((enum moem_budget_knob)i,
					  moem_engine_get_knob(d->e, (enum moem_budget_knob)i)));
		moemd_serve_knobs_json(d->srv, knobs);
		json_object_object_add(r, "knobs", knobs);
		moemd_client_send(d, c, r);
		return;
	}
	if (!ret && !moemd_serve_knob(d->srv, name, NULL, &now)) {
		/* A batching setting of the model server. */
		r = moem_ctl_ok(id);
		json_object_object_add(r, "knob", json_object_new_string(name));
		json_object_object_add(r, "value", json_object_new_uint64(now));
		moemd_client_send(d, c, r);
		return;
	}
	if (!ret)
		ret = knob_lookup(name, &k);
	if (ret) {
		reply_err(d, c, id, -ret, "%s", moem_last_error());
		return;
	}
	r = moem_ctl_ok(id);
	json_object_object_add(r, "knob", json_object_new_string(name));
	json_object_object_add(r, "value", knob_json(k, moem_engine_get_knob(d->e, k)));
	moemd_client_send(d, c, r);
}

/* hbm_bytes / dram_bytes given as a percentage: of the pack's expert
 * bytes in the precisions served, as on the command line. */
static int budget_pct(struct moemd *d, enum moem_budget_knob k, const char *val, uint64_t *v)
{
	const struct moem_engine_opts *o = &d->cfg.ea.o;
	uint64_t total = 0, b;
	int ret;

	for (int p = 0; p < (o->two_prec ? 2 : 1); p++) {
		ret = moem_engine_pack_bytes(o->pack_path, p ? o->lo : o->hi, &b);
		if (ret)
			return ret;
		total += b;
	}
	ret = moem_parse_size(val, &total, v);
	if (ret)
		return moem_err_prefix(-ret, "%s", moem_budget_name(k));
	return moem_budget_validate(k, *v);
}

static void cmd_set(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *req)
{
	enum moem_budget_knob k = MOEM_BUDGET_NR; /* set by knob_lookup() */
	const char *name;
	struct json_object *r;
	char val[64];
	bool share = false; /* an HBM budget in %: the experts' share */
	uint64_t v;
	int ret;

	if (!need_ready(d, c, id))
		return;
	moem_clear_error();
	ret = moem_ctl_get_str(req, "knob", &name);
	if (ret == -ENOENT) {
		reply_err(d, c, id, EINVAL, "set needs \"knob\" and \"value\"");
		return;
	}
	if (!ret) {
		ret = moem_ctl_get_scalar(req, "value", val, sizeof(val));
		if (ret == -ENOENT)
			ret = moem_errf(EINVAL, "set %s: no \"value\"", name);
	}
	if (!ret) {
		/* The model server's batching settings, then the engine's knobs. */
		uint32_t now;

		ret = moemd_serve_knob(d->srv, name, val, &now);
		if (!ret) {
			moem_info("batching: %s = %u from the control socket", name, now);
			r = moem_ctl_ok(id);
			json_object_object_add(r, "knob", json_object_new_string(name));
			json_object_object_add(r, "value", json_object_new_uint64(now));
			json_object_object_add(r, "applied",
					       json_object_new_string("at the next step boundary"));
			moemd_client_send(d, c, r);
			return;
		}
		if (ret == -ENOENT)
			ret = knob_lookup(name, &k);
	}
	if (!ret && (k == MOEM_BUDGET_HBM_BYTES || k == MOEM_BUDGET_DRAM_BYTES) && strchr(val, '%'))
		ret = budget_pct(d, k, val, &v);
	else if (!ret)
		ret = moem_budget_parse(k, val, &v);
	share = !ret && k == MOEM_BUDGET_HBM_BYTES && strchr(val, '%');
	if (share) {
		/* the KV pool on top where it is device memory (engine.h) */
		ret = moem_engine_hbm_on_top(d->e, v);
		v = moem_engine_get_knob(d->e, k);
	} else if (!ret) {
		ret = moem_engine_set_knob(d->e, k, v);
		if (!ret)
			ret = moem_engine_apply_knobs(d->e);
	}
	if (ret) {
		reply_err(d, c, id, -ret, "%s", moem_last_error());
		return;
	}
	moem_budget_format(k, v, val, sizeof(val));
	moem_info("budgets: %s = %s from the control socket", name, val);
	moemd_serve_budget_changed(d);
	r = moem_ctl_ok(id);
	json_object_object_add(r, "knob", json_object_new_string(name));
	json_object_object_add(r, "value", knob_json(k, v));
	/* A layer-boundary knob takes effect now when no run holds the engine. */
	json_object_object_add(
		r, "applied",
		json_object_new_string(moem_knob_info(k)->apply == MOEM_KNOB_APPLY_LAYER &&
						       !run_active(d)
					       ? "now"
					       : moem_knob_apply_text(moem_knob_info(k)->apply)));
	moemd_client_send(d, c, r);
}

int moemd_client_path(const char *dir, const char *setting, const char *what, const char *name,
		      char *out, size_t len)
{
	size_t n = strlen(name);

	if (!dir)
		return moem_errf(EPERM,
				 "%s: refused: moemd's configuration has no %s, so clients may "
				 "name no file for this",
				 what, setting);
	if (!n || n > 255 || name[0] == '.' || strchr(name, '/'))
		return moem_errf(EINVAL,
				 "%s '%s': give a file name inside moemd's %s (%s), not a path: "
				 "no '/', not starting with '.'",
				 what, name, setting, dir);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return moem_errf(EINVAL, "%s: a control character in the name", what);
	if ((size_t)snprintf(out, len, "%s/%s", dir, name) >= len)
		return moem_errf(ENAMETOOLONG, "%s '%s': the path is too long", what, name);
	return 0;
}

/*
 * A run's input file named by a client: opened now, inside workload-dir,
 * without following a symbolic link and without blocking on a FIFO; the
 * engine reads it through the descriptor (/proc/self/fd/N), so what was
 * checked is what is read.
 */
static int client_input(struct moemd *d, struct moemd_job *j)
{
	const char *kind = j->wl.w.kind == MOEM_WL_HIDDEN ? "hidden" : "trace";
	char path[4096], proc[64], what[32];
	struct stat st;
	int fd, ret;

	snprintf(what, sizeof(what), "workload %s:", kind);
	ret = moemd_client_path(d->cfg.workload_dir, "workload-dir", what, j->wl.w.path, path,
				sizeof(path));
	if (ret)
		return ret;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return moem_errf(
			errno == ELOOP ? EPERM : errno, "workload %s:%s: %s", kind, j->wl.w.path,
			errno == ELOOP ? "a symbolic link (not followed)" : strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return moem_errf(EINVAL, "workload %s:%s: not a regular file", kind, j->wl.w.path);
	}
	j->wl_fd = fd;
	snprintf(proc, sizeof(proc), "%s:/proc/self/fd/%d", kind, fd);
	return moem_engine_args_set(&j->wl, "workload", proc);
}

/* The run's workload: the daemon's defaults, overridden by the request's
 * "workload" object (the same names as the config keys). */
static int build_workload(struct moemd *d, struct json_object *req, struct moemd_job *j)
{
	struct json_object *wl = NULL;
	bool named = false;
	int ret = moem_engine_args_copy(&j->wl, &d->cfg.ea);

	j->wl_fd = -1;
	if (ret)
		return ret;
	if (!json_object_object_get_ex(req, "workload", &wl) ||
	    json_object_is_type(wl, json_type_null))
		return 0;
	if (!json_object_is_type(wl, json_type_object))
		return moem_errf(EINVAL, "\"workload\" must be an object");
	for (struct json_object_iterator it = json_object_iter_begin(wl),
					 end = json_object_iter_end(wl);
	     !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		const char *key = json_object_iter_peek_name(&it);
		const struct moem_arg_def *def = moem_engine_arg_find(key);
		char buf[4096];

		if (!def || def->cls != MOEM_ARG_WORKLOAD)
			return moem_errf(EINVAL,
					 "workload: unknown setting '%s' (workload, batch, steps, "
					 "mix, seed)",
					 key);
		ret = moem_ctl_get_scalar(wl, key, buf, sizeof(buf));
		if (ret == -ENOENT)
			continue;
		if (!ret)
			ret = moem_engine_args_set(&j->wl, key, buf);
		if (ret)
			return moem_err_prefix(-ret, "workload");
		if (!strcmp(key, "workload"))
			named = j->wl.w.kind != MOEM_WL_SYNTH;
	}
	/* The configured default workload is the owner's; a client's names
	 * a file in workload-dir. */
	return named ? client_input(d, j) : 0;
}

static void cmd_run(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *req)
{
	struct moemd_job *j;
	int ret;

	if (!need_ready(d, c, id))
		return;
	/* A run takes the engine for its whole length: never under live
	 * API requests (requests that come during a run wait in the queue). */
	if (moemd_serve_live(d->srv)) {
		reply_err(d, c, id, EBUSY,
			  "serving: %u API requests in flight; a run takes the engine for "
			  "its whole length, so it starts only when none is",
			  moemd_serve_live(d->srv));
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		reply_err(d, c, id, ENOMEM, "out of memory");
		return;
	}
	j->kind = JOB_RUN;
	j->client = moemd_client_serial(c);
	j->req_id = id;
	j->wl_fd = -1;
	moem_clear_error();
	ret = build_workload(d, req, j);
	if (ret) {
		reply_err(d, c, id, -ret, "%s", moem_last_error());
		moemd_job_free(j);
		return;
	}
	j->run_id = d->next_run_id + 1;
	ret = moemd_worker_submit(d, j);
	if (!ret)
		moemd_client_hold(c);
	if (ret) {
		reply_err(d, c, id, EBUSY,
			  "busy: a run is in progress (%llu of %llu steps); one run at a time, "
			  "send stop-run or wait",
			  (unsigned long long)__atomic_load_n(&d->run_steps_done, __ATOMIC_RELAXED),
			  (unsigned long long)__atomic_load_n(&d->run_steps, __ATOMIC_RELAXED));
		moemd_job_free(j);
		return;
	}
	d->next_run_id++;
}

static void cmd_stop_run(struct moemd *d, struct moemd_client *c, int64_t id)
{
	struct json_object *r = moem_ctl_ok(id);
	bool running = run_active(d);

	if (running && d->e)
		moem_engine_stop(d->e);
	json_object_object_add(r, "stopping", json_object_new_boolean(running));
	moemd_client_send(d, c, r);
}

/*
 * trace on: a client names a file in the owner's trace-dir; the trace is
 * written there by later runs without replacing any file moemd did not
 * write (MOEM_TRACE_W_EXCL). The destination is checked now, so that a
 * refused name is refused here, not by every later run.
 */
static void cmd_trace(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *req)
{
	const char *name = NULL, *p;
	char path[4096];
	bool on, logits = false;
	struct json_object *r;
	int ret;

	if (!need_ready(d, c, id))
		return;
	moem_clear_error();
	ret = moem_ctl_get_bool(req, "on", &on);
	if (ret == -ENOENT)
		ret = moem_errf(EINVAL, "trace needs \"on\": true (with \"name\") or false");
	if (!ret && on && moem_ctl_get_str(req, "path", &p) != -ENOENT)
		ret = moem_errf(EINVAL,
				"trace: moemd takes no paths from clients: give \"name\", a file "
				"name inside its trace directory (%s)",
				d->cfg.trace_dir ? d->cfg.trace_dir : "none configured: trace-dir");
	if (!ret && on) {
		ret = moem_ctl_get_str(req, "name", &name);
		if (ret == -ENOENT)
			ret = moem_errf(EINVAL, "trace on needs a \"name\"");
	}
	if (!ret && on)
		ret = moemd_client_path(d->cfg.trace_dir, "trace-dir", "trace", name, path,
					sizeof(path));
	if (!ret && on)
		ret = moem_trace_dest_check(path);
	if (!ret && on) {
		ret = moem_ctl_get_bool(req, "logits", &logits);
		ret = ret == -ENOENT ? 0 : ret;
	}
	if (!ret)
		ret = moem_engine_set_trace_ex(d->e, on ? path : NULL, logits, MOEM_TRACE_W_EXCL);
	if (ret) {
		reply_err(d, c, id, -ret, "%s", moem_last_error());
		return;
	}
	moem_info("trace: %s%s (uid %u)", on ? path : "off", on ? " (from the next run)" : "",
		  (unsigned int)moemd_client_uid(c));
	r = moem_ctl_ok(id);
	json_object_object_add(r, "on", json_object_new_boolean(on));
	if (on) {
		json_object_object_add(r, "name", json_object_new_string(name));
		json_object_object_add(r, "path", json_object_new_string(path));
	}
	json_object_object_add(r, "from", json_object_new_string("the next run"));
	moemd_client_send(d, c, r);
}

static void cmd_verify(struct moemd *d, struct moemd_client *c, int64_t id)
{
	struct moemd_job *j;

	if (!need_ready(d, c, id))
		return;
	/* A run takes the engine for its whole length: never under live
	 * API requests (requests that come during a run wait in the queue). */
	if (moemd_serve_live(d->srv)) {
		reply_err(d, c, id, EBUSY,
			  "serving: %u API requests in flight; a run takes the engine for "
			  "its whole length, so it starts only when none is",
			  moemd_serve_live(d->srv));
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		reply_err(d, c, id, ENOMEM, "out of memory");
		return;
	}
	j->kind = JOB_VERIFY;
	j->client = moemd_client_serial(c);
	j->req_id = id;
	j->wl_fd = -1;
	if (moemd_worker_submit(d, j)) {
		reply_err(d, c, id, EBUSY, "busy: a run is in progress; verify when it is done");
		moemd_job_free(j);
		return;
	}
	moemd_client_hold(c);
}

static void cmd_shutdown(struct moemd *d, struct moemd_client *c, int64_t id)
{
	struct json_object *r = moem_ctl_ok(id);

	json_object_object_add(r, "state", json_object_new_string("draining"));
	moemd_client_send(d, c, r);
	moemd_begin_exit(d, MOEMD_EXIT_OK, "shutdown requested on the control socket");
}

typedef void (*cmd_fn)(struct moemd *d, struct moemd_client *c, int64_t id,
		       struct json_object *req);

static void cmd_hello_(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *r)
{
	cmd_hello(d, c, id);
}

static void cmd_status_(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *r)
{
	cmd_status(d, c, id);
}

static void cmd_stop_run_(struct moemd *d, struct moemd_client *c, int64_t id,
			  struct json_object *r)
{
	cmd_stop_run(d, c, id);
}

static void cmd_verify_(struct moemd *d, struct moemd_client *c, int64_t id, struct json_object *r)
{
	cmd_verify(d, c, id);
}

static void cmd_shutdown_(struct moemd *d, struct moemd_client *c, int64_t id,
			  struct json_object *r)
{
	cmd_shutdown(d, c, id);
}

static const struct {
	const char *name;
	cmd_fn fn;
	bool draining; /* served while shutting down */
} commands[] = {
	{"hello", cmd_hello_, true},
	{"status", cmd_status_, true},
	{"get", cmd_get, false},
	{"set", cmd_set, false},
	{"run", cmd_run, false},
	{"stop-run", cmd_stop_run_, false},
	{"trace", cmd_trace, false},
	{"verify", cmd_verify_, false},
	{"shutdown", cmd_shutdown_, false},
};

void moemd_dispatch(struct moemd *d, struct moemd_client *c, struct json_object *req, int64_t id,
		    const char *cmd)
{
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(commands); i++) {
		if (strcmp(cmd, commands[i].name))
			continue;
		if (!commands[i].draining && moemd_state_get(d) == MOEMD_DRAINING)
			reply_err(d, c, id, ESHUTDOWN, "moemd is shutting down");
		else
			commands[i].fn(d, c, id, req);
		return;
	}
	reply_err(d, c, id, EOPNOTSUPP,
		  "unknown command '%.64s' (hello, status, get, set, run, stop-run, trace, verify, "
		  "shutdown)",
		  cmd);
}

void moemd_job_done(struct moemd *d, struct moemd_job *j)
{
	struct moemd_client *c = j->client ? moemd_client_find(d, j->client) : NULL;
	struct json_object *r;

	if (j->kind == JOB_RUN && !j->ret)
		d->runs_done++;
	else if (j->kind == JOB_RUN)
		d->runs_failed++;
	if (!c)
		return; /* the client left: the result is in the log */
	moemd_client_release(d, c);
	if (j->ret) {
		r = moem_ctl_error(j->req_id, -j->ret, j->err);
		if (j->kind == JOB_VERIFY) {
			json_object_object_add(r, "checked", json_object_new_uint64(j->checked));
			json_object_object_add(r, "bad", json_object_new_uint64(j->bad));
		}
		moemd_client_send(d, c, r);
		moemd_client_settle(d, c);
		return;
	}
	if (j->kind == JOB_RUN) {
		r = moemd_run_json(j);
	} else {
		r = moem_ctl_ok(j->req_id);
		json_object_object_add(r, "checked", json_object_new_uint64(j->checked));
		json_object_object_add(r, "bad", json_object_new_uint64(j->bad));
	}
	moemd_client_send(d, c, r);
	moemd_client_settle(d, c);
}
