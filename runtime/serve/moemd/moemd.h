/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moemd's internals, shared by its source files.
 *
 * Threads:
 *  - main: the event loop (loop.c): control socket clients, signals
 *    (signalfd), worker completions (eventfd); never blocks on the engine;
 *  - worker (worker.c): owns the engine: opens it, stages experts, runs
 *    workloads and verifications, one job at a time, and closes it;
 *  - sysfs watcher (sysfs.c): poll() on the files under
 *    /sys/kernel/moem/budgets, applies kernel knob changes to the engine;
 *  - watchdog (notify.c): WATCHDOG=1 to systemd while the loop is healthy.
 * The engine's own threads (loader, copy engine) live inside it.
 */
#ifndef MOEMD_H
#define MOEMD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include <moem/ctl.h>
#include <moem/engine.h>
#include <moem/engine_args.h>
#include <moem/log.h>
#include <moem/progress.h>
#include <moem/version.h>
#include <moem/sched.h>

#include "serve.h"

#define MOEMD_VERSION MOEM_VERSION

/* Exit statuses (Documentation/admin-guide.md, "moemd exit status"). */
#define MOEMD_EXIT_OK	  0
#define MOEMD_EXIT_FAIL	  1  /* runtime failure: restart it */
#define MOEMD_EXIT_USAGE  64 /* bad command line */
#define MOEMD_EXIT_DEVICE 75 /* sticky device error: restart it */
#define MOEMD_EXIT_CONFIG 78 /* bad configuration, foreign region */

#define MOEMD_MAX_CLIENTS  64 /* connections of any uid */
#define MOEMD_ROOT_SLOTS   2  /* more, for uid 0 only (status, stop) */
#define MOEMD_CLIENT_SLOTS (MOEMD_MAX_CLIENTS + MOEMD_ROOT_SLOTS)
#define MOEMD_PER_UID	   16		       /* default clients-per-uid */
#define MOEMD_IDLE_MS	   30000	       /* default client-idle-timeout (30 s) */
#define MOEMD_OUT_MAX	   (4u << 20)	       /* a client that reads nothing is dropped */
#define MOEMD_DRAIN_NS	   (9ULL * 1000000000) /* SIGTERM to exit, at most */

enum moemd_state {
	MOEMD_STARTING = 0, /* opening the pack, pool, backend */
	MOEMD_STAGING,	    /* warm-up: NVMe -> DRAM -> HBM */
	MOEMD_READY,
	MOEMD_DRAINING, /* SIGTERM or shutdown: no new work */
};

/* Settings: the engine's (engine_args.h) and the daemon's own. */
struct moemd_cfg {
	struct moem_engine_args ea;
	char *socket;
	char *config; /* the config file, or NULL */
	enum moem_log_level log_level;
	bool no_warmup;
	bool cold;	   /* destroy the region first: no warm restart */
	bool sysfs_knobs;  /* follow /sys/kernel/moem/budgets (default yes) */
	bool region_given; /* region came from the user, not the pack id */
	/* Where clients may name files (NULL: nowhere), and admission. */
	char *trace_dir;	      /* trace on NAME writes here */
	char *workload_dir;	      /* run's hidden:NAME / trace:NAME are read here */
	uint32_t idle_timeout_ms;     /* 0: never close an idle client */
	uint32_t clients_per_uid;     /* 0: no per-uid limit */
	struct moemd_http_cfg http;   /* the OpenAI API (serve.h) */
	struct moem_sched_opts sched; /* continuous batching */
};

enum moemd_job_kind { JOB_OPEN, JOB_RUN, JOB_VERIFY };

struct moemd_job {
	enum moemd_job_kind kind;
	uint64_t client; /* serial of the client to answer (0: none) */
	int64_t req_id;
	uint64_t run_id;
	struct moem_engine_args wl; /* JOB_RUN: the workload (wl.w) */
	int wl_fd;		    /* a client-named input file, held open (or -1) */
	/* results */
	int ret;
	bool fatal;
	char err[768];
	struct moem_run_stats rs;
	uint64_t checked, bad;
	uint64_t submit_ns, first_step_ns, done_ns;
	struct moemd_job *next;
};

struct moemd_client;
struct moemd_sysfs;

struct moemd_knob_stats {
	uint64_t sysfs_changes; /* kernel knob changes applied */
	uint64_t sysfs_refused; /* ... refused by the engine */
	uint64_t last_wake_ns;	/* poll() woke (moem_now_ns) */
	uint64_t last_set_ns;	/* handed to the engine */
	char last_knob[32];
};

struct moemd {
	struct moemd_cfg cfg;
	int argc;
	char **argv;
	struct moem_engine *e;
	/* the hbm_bytes knob as the engine opened: the experts' share asked
	 * for, or all of them with no budget (serve.c adds the KV pool) */
	uint64_t hbm_at_open;
	int state; /* enum moemd_state, atomic */
	uint64_t start_ns, ready_ns;
	uint64_t open_ns, warmup_ns; /* how long engine open and warm-up took */
	struct moem_progress prog;
	char pack_id[33];

	/* worker */
	pthread_t worker;
	bool worker_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct moemd_job *queue, *cur, *done;
	bool worker_exit;
	int done_efd;
	uint64_t run_steps_done, run_steps; /* of cur, atomic */
	uint64_t next_run_id;
	uint64_t runs_done, runs_failed;

	/* control socket */
	int lfd, lock_fd;
	struct moemd_client *clients[MOEMD_CLIENT_SLOTS];
	uint64_t next_client;
	uint64_t requests, bad_requests;

	/* signals, systemd */
	int sfd;
	uint64_t heartbeat_ns; /* the loop's last pass, atomic */
	pthread_t watchdog;
	bool watchdog_started;
	uint64_t watchdog_usec;
	int watchdog_efd;

	/* the model server (serve.h) */
	struct moemd_srv *srv;

	/* kernel budgets */
	struct moemd_sysfs *sysfs;
	pthread_mutex_t kstats_lock;
	struct moemd_knob_stats kstats;

	int exit_code;
	bool exiting;
	int exit_from; /* the state when the exit began */
	bool abandon;  /* leave the worker as it is (_exit) */
	uint64_t drain_deadline;
	uint64_t last_progress_log_ns;
};

/* config.c */
void moemd_cfg_init(struct moemd_cfg *c);
void moemd_cfg_free(struct moemd_cfg *c);
/* Parse argv (and the --config file, flags winning); 0, or an exit status. */
int moemd_cfg_parse(struct moemd_cfg *c, int argc, char **argv);
/* SIGHUP: read the config again and apply what can change live. */
void moemd_reload(struct moemd *d);

/* worker.c */
int moemd_worker_start(struct moemd *d);
/* Queue a job (-EBUSY if one is queued or running: one at a time). */
int moemd_worker_submit(struct moemd *d, struct moemd_job *j);
/* Completed jobs, oldest first (the caller frees them). */
struct moemd_job *moemd_worker_take_done(struct moemd *d);
void moemd_worker_stop(struct moemd *d);
bool moemd_worker_idle(struct moemd *d);
void moemd_job_free(struct moemd_job *j);

/* loop.c */
int moemd_loop(struct moemd *d);
void moemd_begin_exit(struct moemd *d, int code, const char *why);

/* server.c: the control socket */
int moemd_server_open(struct moemd *d);
void moemd_server_close(struct moemd *d);
void moemd_server_accept(struct moemd *d);
/* Handle I/O on a client; false if it was closed. */
bool moemd_client_io(struct moemd *d, struct moemd_client *c, short revents);
int moemd_client_fd(const struct moemd_client *c);
/* The poll() events a client waits for. */
short moemd_client_events(const struct moemd_client *c);
uint64_t moemd_client_serial(const struct moemd_client *c);
uid_t moemd_client_uid(const struct moemd_client *c);
struct moemd_client *moemd_client_find(struct moemd *d, uint64_t serial);
unsigned int moemd_client_count(const struct moemd *d);
/* A job will answer c (it is not idle meanwhile); the job is done. */
void moemd_client_hold(struct moemd_client *c);
void moemd_client_release(struct moemd *d, struct moemd_client *c);
/* Send what is queued; closes a half-closed client with nothing left
 * to answer (c may be freed: do not use it after). */
void moemd_client_settle(struct moemd *d, struct moemd_client *c);
/* Close clients idle for longer than cfg.idle_timeout_ms. */
void moemd_server_reap_idle(struct moemd *d, uint64_t now);
/* Queue a response line (obj is put). */
void moemd_client_send(struct moemd *d, struct moemd_client *c, struct json_object *obj);
/* Try to write everything queued, for up to ms milliseconds. */
void moemd_server_flush(struct moemd *d, int ms);

/* cmds.c */
/*
 * A file a client names: NAME (no '/', not starting with '.') inside dir,
 * the directory the daemon's owner configured for what (NULL: clients may
 * name none). The full path in out, or -errno with a message.
 */
int moemd_client_path(const char *dir, const char *setting, const char *what, const char *name,
		      char *out, size_t len);
void moemd_dispatch(struct moemd *d, struct moemd_client *c, struct json_object *req, int64_t id,
		    const char *cmd);
void moemd_job_done(struct moemd *d, struct moemd_job *j);
/* status.c */
struct json_object *moemd_status_json(struct moemd *d);
struct json_object *moemd_run_json(const struct moemd_job *j);
const char *moemd_state_name(int state);

/* sysfs.c */
int moemd_sysfs_open(struct moemd *d);
/* Adopt knobs an administrator set before we started (after engine open). */
void moemd_sysfs_adopt(struct moemd *d);
int moemd_sysfs_start(struct moemd *d);
void moemd_sysfs_close(struct moemd *d);
bool moemd_sysfs_present(const struct moemd *d);
/* Kernel knob values and pool numbers for status (false without moem.ko);
 * MOEMD_KNOB_ABSENT for a knob an older moem.ko lacks. */
#define MOEMD_KNOB_ABSENT UINT64_MAX
bool moemd_sysfs_read(struct moemd *d, uint64_t knob[MOEM_BUDGET_NR], uint64_t *seq);

/* notify.c: the sd_notify protocol without libsystemd */
void moemd_notify(const char *fmt, ...) MOEM_PRINTF(1, 2);
int moemd_watchdog_start(struct moemd *d);
void moemd_watchdog_stop(struct moemd *d);

static inline int moemd_state_get(struct moemd *d)
{
	return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
}

static inline void moemd_state_set(struct moemd *d, int s)
{
	__atomic_store_n(&d->state, s, __ATOMIC_RELEASE);
}

#endif /* MOEMD_H */
