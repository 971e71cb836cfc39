// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd's settings: command-line flags and a config file with the same
 * names (flags win), the engine's settings shared with `moem run`
 * (engine_args.h) plus the daemon's own; SIGHUP reloads the file and
 * applies what can change while the engine runs.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <moem/settings.h>
#include <moem/error.h>
#include <moem/pack.h>
#include <moem/dev.h>

#include "moemd.h"

/* The daemon's own settings; "config" only on the command line. */
static const struct {
	const char *name;
	bool flag;
} daemon_opts[] = {
	{"config", false},
	{"socket", false},
	{"log-level", false},
	{"no-warmup", true},
	{"cold", true},
	{"sysfs-knobs", false},
	/* what control-socket clients may do */
	{"trace-dir", false},
	{"workload-dir", false},
	{"client-idle-timeout", false},
	{"clients-per-uid", false},
	/* the model server (http_cfg.c) */
	{"listen", false},
	{"api-key", false},
	{"api-key-file", false},
	{"model-name", false},
	{"reasoning-parser", false},
	{"max-queue", false},
	{"max-batch", false},
	{"step-tokens", false},
	{"prefill-chunk", false},
	{"dense-prec", false},
	{"prefix-cache", false},
	{"max-body", false},
	{"http-threads", false},
	{"http-connections", false},
	{"http-timeout", false},
	{"stream-buffer", false},
};

void moemd_cfg_init(struct moemd_cfg *c)
{
	memset(c, 0, sizeof(*c));
	moem_engine_args_init(&c->ea);
	/* A daemon keeps its staged experts across restarts when it can. */
	c->ea.o.pool.persistent = true;
	c->log_level = MOEM_LOG_INFO;
	c->sysfs_knobs = true;
	c->idle_timeout_ms = MOEMD_IDLE_MS;
	c->clients_per_uid = MOEMD_PER_UID;
	moemd_http_cfg_init(&c->http);
	moem_sched_opts_default(&c->sched);
}

void moemd_cfg_free(struct moemd_cfg *c)
{
	moem_engine_args_free(&c->ea);
	free(c->socket);
	free(c->config);
	free(c->trace_dir);
	free(c->workload_dir);
	moemd_http_cfg_free(&c->http);
	memset(c, 0, sizeof(*c));
}

static int set_str(char **field, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

/* A directory clients may name files in: absolute, so that it means the
 * same whatever the daemon's working directory; "" or "none" unsets it. */
static int set_dir(const char *name, char **field, const char *v)
{
	struct stat st;

	if (!*v || !strcmp(v, "none")) {
		free(*field);
		*field = NULL;
		return 0;
	}
	if (v[0] != '/')
		return moem_errf(EINVAL, "%s '%s': give an absolute directory", name, v);
	/*
	 * Said when the setting is read, not at a client's first use of it: a
	 * path that is no directory is refused; a missing one is taken (it
	 * may be made later: install.sh makes the example config's) and said.
	 */
	if (stat(v, &st))
		moem_warn("%s '%s': %s: clients' requests that name a file there will fail until "
			  "it exists",
			  name, v, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		return moem_errf(ENOTDIR, "%s '%s': not a directory", name, v);
	return set_str(field, v);
}

/* Seconds (decimals allowed) as milliseconds; 0 = never. */
static int set_seconds(const char *name, const char *v, uint32_t *ms)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= 0 && x <= 86400))
		return moem_errf(EINVAL, "%s '%s': want seconds in 0..86400 (0: never)", name, v);
	*ms = (uint32_t)(x * 1000 + 0.5);
	if (x > 0 && !*ms)
		*ms = 1;
	return 0;
}

static int set_count(const char *name, const char *v, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || end == v || *end || *v == '-' || x > max)
		return moem_errf(EINVAL, "%s '%s': want 0..%u (0: no limit)", name, v, max);
	*out = (uint32_t)x;
	return 0;
}

static int cfg_set(struct moemd_cfg *c, const char *name, const char *v)
{
	int ret = moem_engine_args_set(&c->ea, name, v);

	if (ret != -ENOENT) {
		if (!ret && !strcmp(name, "region"))
			c->region_given = true;
		return ret;
	}
	if (!strcmp(name, "socket")) {
		if (!*v || strlen(v) >= 108)
			return moem_errf(EINVAL, "socket '%s': a path of 1..107 bytes", v);
		return set_str(&c->socket, v);
	}
	if (!strcmp(name, "log-level"))
		return moem_log_level_parse(v, &c->log_level);
	if (!strcmp(name, "no-warmup"))
		return moem_arg_bool(name, v, &c->no_warmup);
	if (!strcmp(name, "cold"))
		return moem_arg_bool(name, v, &c->cold);
	if (!strcmp(name, "sysfs-knobs"))
		return moem_arg_bool(name, v, &c->sysfs_knobs);
	if (!strcmp(name, "trace-dir"))
		return set_dir(name, &c->trace_dir, v);
	if (!strcmp(name, "workload-dir"))
		return set_dir(name, &c->workload_dir, v);
	if (!strcmp(name, "client-idle-timeout"))
		return set_seconds(name, v, &c->idle_timeout_ms);
	if (!strcmp(name, "clients-per-uid"))
		return set_count(name, v, MOEMD_MAX_CLIENTS, &c->clients_per_uid);
	ret = moemd_http_cfg_set(&c->http, &c->sched, name, v);
	if (ret != -ENOENT)
		return ret;
	return moem_errf(EINVAL, "unknown setting '%s'", name);
}

static int file_entry(void *arg, const char *section, const char *key, const char *value)
{
	if (!strcmp(key, "config"))
		return moem_errf(EINVAL, "a config file cannot include another");
	return cfg_set(arg, key, value);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: moemd --pack FILE [options]     (or: moemd --config FILE)\n"
		"Serve a .moem pack: stage its experts, run workloads submitted on the\n"
		"control socket, follow budget changes. Runs in the foreground.\n\n"
		"daemon:\n"
		"  --config FILE        settings as 'name = value' lines (flags win)\n"
		"  --socket PATH        control socket (default %s)\n"
		"  --log-level L        err, warn, info (default), debug\n"
		"  --cold               destroy this pack's persistent region first\n"
		"  --no-warmup          do not stage experts before serving\n"
		"  --sysfs-knobs yes|no follow /sys/kernel/moem/budgets (default yes)\n"
		"what clients may do (admin guide, Security model):\n"
		"  --trace-dir DIR      'trace on NAME' writes DIR/NAME (default: refused)\n"
		"  --workload-dir DIR   'run' may read hidden:NAME, trace:NAME there (default: "
		"refused)\n"
		"  --client-idle-timeout S  close a client silent for S seconds (default %u, 0: "
		"never)\n"
		"  --clients-per-uid N  connections one uid may hold (default %u, 0: no limit)\n"
		"OpenAI-compatible HTTP API:\n"
		"  --listen ADDR:PORT   (default %s; 'none': off)\n"
		"  --api-key KEY | --api-key-file FILE   require 'Authorization: Bearer KEY'\n"
		"  --model-name NAME    the served model id (default: the pack's file name)\n"
		"  --reasoning-parser none|qwen3|deepseek_r1  chat's <think> block into\n"
		"                       reasoning_content (default none)\n"
		"  --max-queue N --max-batch N --step-tokens N --prefill-chunk N\n"
		"  --dense-prec bf16|q8|q4|q2  attention projections and lm_head, quantized when\n"
		"                       loaded (default bf16 as packed)\n"
		"  --prefix-cache yes|no  reuse the KV of prompts' common beginnings (default "
		"yes)\n"
		"  --max-body SIZE --http-threads N --http-connections N --http-timeout S\n"
		"  --stream-buffer SIZE\n"
		"engine (as in 'moem run'):\n"
		"  --pack FILE --hbm SIZE|PCT%% --dram SIZE|PCT%% --kv SIZE --precisions HI[,LO]\n"
		"  --fallback\n"
		"  --route SPEC --evict SPEC --prefetch SPEC --precision SPEC --paging SPEC\n"
		"  --exec gpu|hybrid --cpu-moe-layers N --cpu-gbps X --cpu-token-ns NS\n"
		"  --cpu-call-ns NS\n"
		"  --place RULE (repeatable; flags replace the config file's rules)\n"
		"  --calibration FILE|none  the CPU figures' cache (default: moem calibrate's)\n"
		"  --backend auto|cpu|cuda --cpu-threads N (--threads) --pool "
		"auto|kmod|hugetlb|thp\n"
		"  --region NAME (default moemd-<pack id>) --persistent[=no] --link-gbps X\n"
		"  --loader MODE --no-verify --no-cuda-graphs --trace-out FILE --trace-logits\n"
		"  --mem-reserve SIZE|PCT%% memory left to the machine (default 1/16 of RAM)\n"
		"  --dram-nodes all|LIST  NUMA nodes the pool spans (default all, e.g. 0,1)\n"
		"  --require-pinned     refuse to serve on a pool that is not pinned\n"
		"default workload of 'run' requests:\n"
		"  --workload synth|hidden:FILE|trace:FILE --batch B --steps N --mix W:x,.. --seed "
		"S\n"
		"  --version, --help\n",
		MOEM_CTL_SOCKET, (unsigned int)(MOEMD_IDLE_MS / 1000), (unsigned int)MOEMD_PER_UID,
		MOEMD_HTTP_DEFAULT_LISTEN);
}

/* Long options: the engine's, the daemon's, help and version. */
static struct option *build_opts(void)
{
	size_t n = 0, i = 0;
	struct option *o;

	while (moem_engine_arg_defs[n].name)
		n++;
	o = calloc(n + MOEM_ARRAY_SIZE(daemon_opts) + 3, sizeof(*o));
	if (!o)
		return NULL;
	for (const struct moem_arg_def *d = moem_engine_arg_defs; d->name; d++, i++)
		o[i] = (struct option){d->name, d->flag ? optional_argument : required_argument,
				       NULL, 0};
	for (size_t k = 0; k < MOEM_ARRAY_SIZE(daemon_opts); k++, i++)
		o[i] = (struct option){daemon_opts[k].name,
				       daemon_opts[k].flag ? optional_argument : required_argument,
				       NULL, 0};
	o[i++] = (struct option){"help", no_argument, NULL, 'h'};
	o[i++] = (struct option){"version", no_argument, NULL, 'V'};
	return o;
}

/* The region name a pack gets by default: its id's first 16 hex digits. */
static int default_region(struct moemd_cfg *c)
{
	struct moem_pack *p;
	struct moem_pack_id id;
	char hex[33], name[64];
	int ret;

	if (c->region_given || !c->ea.o.pack_path)
		return 0;
	ret = moem_pack_open(c->ea.o.pack_path, &p);
	if (ret)
		return ret;
	moem_pack_get_id(p, &id);
	moem_pack_close(p);
	snprintf(name, sizeof(name), "moemd-%.16s", moem_pack_id_str(&id, hex));
	ret = moem_engine_args_set(&c->ea, "region", name);
	return ret;
}

/* The daemon may change directory; keep the pack's absolute path. */
static int absolute_pack(struct moemd_cfg *c)
{
	char *abs = realpath(c->ea.o.pack_path, NULL);
	int ret;

	if (!abs)
		return moem_errf(errno, "pack %s: %s", c->ea.o.pack_path, strerror(errno));
	ret = moem_engine_args_set(&c->ea, "pack", abs);
	free(abs);
	return ret;
}

/* The served model's name from the pack's file name; the listen default. */
static int serve_defaults(struct moemd_cfg *c)
{
	const char *base = strrchr(c->ea.o.pack_path, '/');
	char name[129];
	size_t n;
	int ret;

	/* The default chunk follows a smaller step budget. */
	if (c->sched.prefill_chunk == 256 && c->sched.step_tokens < 256)
		c->sched.prefill_chunk = c->sched.step_tokens;
	ret = moem_sched_opts_check(&c->sched);
	if (ret)
		return ret;
	if (!c->http.listen) {
		c->http.listen = strdup(MOEMD_HTTP_DEFAULT_LISTEN);
		if (!c->http.listen)
			return -ENOMEM;
	}
	if (c->http.model_name)
		return 0;
	base = base ? base + 1 : c->ea.o.pack_path;
	snprintf(name, sizeof(name), "%s", base);
	n = strlen(name);
	if (n > 5 && !strcmp(name + n - 5, ".moem"))
		name[n - 5] = 0;
	return set_str(&c->http.model_name, name[0] ? name : "moem");
}

int moemd_cfg_parse(struct moemd_cfg *c, int argc, char **argv)
{
	struct option *opts = build_opts();
	int ch, idx, ret, rc = MOEMD_EXIT_CONFIG;
	bool place_flags = false;

	if (!opts)
		return MOEMD_EXIT_FAIL;
	/* Pass 1: the config file (and help), so that flags override it. */
	opterr = 0;
	optind = 0;
	while ((ch = getopt_long(argc, argv, "hV", opts, &idx)) != -1) {
		if (ch == 'h') {
			usage(stdout);
			rc = -1;
			goto out;
		}
		if (ch == 'V') {
			printf("moemd %s (control protocol %d.%d)\n", MOEMD_VERSION,
			       MOEM_CTL_VERSION_MAJOR, MOEM_CTL_VERSION_MINOR);
			rc = -1;
			goto out;
		}
		if (ch == 0 && !strcmp(opts[idx].name, "config")) {
			/* Absolute, for SIGHUP whatever the directory then. */
			char *abs = realpath(optarg, NULL);

			if (!abs) {
				ret = moem_errf(errno, "config %s: %s", optarg, strerror(errno));
				goto fail;
			}
			free(c->config);
			c->config = abs;
		}
	}
	if (c->config) {
		ret = moem_settings_load(c->config, file_entry, c);
		if (ret)
			goto fail;
	}
	/* Pass 2: every flag, in order. */
	opterr = 1;
	optind = 0;
	while ((ch = getopt_long(argc, argv, "hV", opts, &idx)) != -1) {
		if (ch != 0) {
			usage(stderr);
			rc = MOEMD_EXIT_USAGE;
			goto out;
		}
		if (!strcmp(opts[idx].name, "config"))
			continue;
		/* --place rules replace the file's (first match wins: else
		 * the file's rules would win over the flags) */
		if (!strcmp(opts[idx].name, "place") && !place_flags) {
			c->ea.o.place.n = 0;
			place_flags = true;
		}
		ret = cfg_set(c, opts[idx].name, optarg ? optarg : "");
		if (ret) {
			fprintf(stderr, "moemd: --%s: %s\n", opts[idx].name, moem_strerror(ret));
			rc = MOEMD_EXIT_USAGE;
			goto out;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "moemd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		rc = MOEMD_EXIT_USAGE;
		goto out;
	}
	if (!c->ea.o.pack_path) {
		fprintf(stderr,
			"moemd: no pack: give --pack FILE or 'pack = FILE' in the config\n");
		rc = MOEMD_EXIT_USAGE;
		goto out;
	}
	if (!c->socket) {
		ret = set_str(&c->socket, MOEM_CTL_SOCKET);
		if (ret)
			goto fail;
	}
	ret = serve_defaults(c);
	if (ret)
		goto fail;
	ret = absolute_pack(c);
	if (!ret)
		ret = moem_engine_args_resolve(&c->ea);
	if (!ret)
		ret = default_region(c);
	if (ret)
		goto fail;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "moemd: %s\n", moem_strerror(ret));
out:
	free(opts);
	return rc;
}

static bool str_differs(const char *a, const char *b)
{
	return (a == NULL) != (b == NULL) || (a && strcmp(a, b));
}

static bool pct(const char *budget)
{
	return budget && strchr(budget, '%');
}

/* Apply a budget from the config again (a change of the file). */
static void reload_budget(struct moemd *d, enum moem_budget_knob k, uint64_t now, uint64_t was)
{
	int ret;

	if (now == was)
		return;
	ret = moem_engine_set_knob(d->e, k, now);
	if (!ret)
		ret = moem_engine_apply_knobs(d->e);
	if (ret)
		moem_warn("reload: %s %llu refused: %s", moem_budget_name(k),
			  (unsigned long long)now, moem_strerror(ret));
	else
		moem_info("reload: %s = %llu", moem_budget_name(k), (unsigned long long)now);
	if (!ret)
		moemd_serve_budget_changed(d);
}

/* An HBM budget in %: the experts' share, the KV pool on top (engine.h). */
static void reload_share(struct moemd *d, uint64_t share)
{
	int ret = moem_engine_hbm_on_top(d->e, share);
	uint64_t now = moem_engine_get_knob(d->e, MOEM_BUDGET_HBM_BYTES);

	if (ret)
		moem_warn("reload: hbm_bytes for a share of %llu refused: %s",
			  (unsigned long long)share, moem_strerror(ret));
	else
		moem_info("reload: hbm_bytes = %llu", (unsigned long long)now);
	if (!ret)
		moemd_serve_budget_changed(d);
}

/* The route setting maps onto the reroute knob when it names a kind
 * with default parameters; anything else needs a restart. */
static void reload_route(struct moemd *d, const char *now, const char *was)
{
	const char *spec = now ? now : "none";
	uint64_t r;
	int ret;

	if (!str_differs(now, was))
		return;
	if (strchr(spec, ':') || moem_budget_parse(MOEM_BUDGET_REROUTE, spec, &r)) {
		moem_warn("reload: route '%s' is not a plain reroute kind (none, lynx, oea, "
			  "cache-aware, piggyback): restart moemd to apply it",
			  spec);
		return;
	}
	ret = moem_engine_set_knob(d->e, MOEM_BUDGET_REROUTE, r);
	if (!ret)
		ret = moem_engine_apply_knobs(d->e);
	if (ret)
		moem_warn("reload: route '%s' refused: %s", spec, moem_strerror(ret));
	else
		moem_info("reload: route = %s", spec);
}

void moemd_reload(struct moemd *d)
{
	struct moemd_cfg n, *o = &d->cfg;
	const struct moem_engine_opts *a, *b;
	const char *restart[32];
	int nr = 0, rc;

	if (!o->config) {
		moem_info("SIGHUP: no config file to reload (started without --config)");
		return;
	}
	moemd_cfg_init(&n);
	rc = moemd_cfg_parse(&n, d->argc, d->argv);
	if (rc) {
		moem_err("reload of %s failed: nothing changed", o->config);
		moemd_cfg_free(&n);
		return;
	}
	a = &n.ea.o;
	b = &o->ea.o;
	/* Live: log level, budgets, routing kind, defaults of later runs. */
	if (n.log_level != o->log_level) {
		moem_log_set_level(n.log_level);
		moem_info("reload: log-level changed");
	}
	if (moemd_state_get(d) == MOEMD_READY) {
		/* A share in % compared as a share, applied with the pool on top;
		 * the same bytes turned into a share (or back) apply too. */
		if (pct(n.ea.hbm)) {
			if (a->hbm_budget != b->hbm_budget || !pct(o->ea.hbm))
				reload_share(d, a->hbm_budget);
		} else if (a->hbm_budget != b->hbm_budget || pct(o->ea.hbm)) {
			reload_budget(d, MOEM_BUDGET_HBM_BYTES, a->hbm_budget, UINT64_MAX);
		}
		reload_budget(d, MOEM_BUDGET_DRAM_BYTES, a->dram_budget, b->dram_budget);
		reload_budget(d, MOEM_BUDGET_KV_BYTES, a->kv_budget, b->kv_budget);
		reload_route(d, a->route, b->route);
	}
	/* Settings fixed at start: name the ones that changed. */
#define RESTART_IF(cond, name)                  \
	do {                                    \
		if ((cond) && nr < 32)          \
			restart[nr++] = (name); \
	} while (0)
	RESTART_IF(str_differs(a->pack_path, b->pack_path), "pack");
	RESTART_IF(str_differs(n.ea.precisions, o->ea.precisions), "precisions");
	RESTART_IF(a->allow_fallback != b->allow_fallback, "fallback");
	RESTART_IF(str_differs(a->evict, b->evict), "evict");
	RESTART_IF(str_differs(a->dram_evict, b->dram_evict), "dram-evict");
	RESTART_IF(str_differs(a->prefetch, b->prefetch), "prefetch");
	RESTART_IF(str_differs(a->precision, b->precision), "precision");
	RESTART_IF(str_differs(a->paging, b->paging), "paging");
	RESTART_IF(str_differs(a->backend, b->backend), "backend");
	RESTART_IF(a->threads != b->threads, "threads");
	RESTART_IF(a->cpu_isa != b->cpu_isa, "cpu-isa");
	RESTART_IF(a->pool.provider != b->pool.provider, "pool");
	RESTART_IF(str_differs(n.ea.region, o->ea.region), "region");
	RESTART_IF(a->pool.persistent != b->pool.persistent, "persistent");
	RESTART_IF(a->link_gbps != b->link_gbps, "link-gbps");
	if ((a->exec_hybrid != b->exec_hybrid || a->cpu_moe_layers != b->cpu_moe_layers) &&
	    moemd_state_get(d) == MOEMD_READY) {
		/* Live, as moemctl set exec / cpu_moe_layers. */
		rc = moem_engine_set_hybrid(d->e, a->exec_hybrid, a->cpu_moe_layers);
		if (rc) {
			moem_warn("reload: exec %s, cpu-moe-layers %u refused: %s",
				  a->exec_hybrid ? "hybrid" : "gpu", a->cpu_moe_layers,
				  moem_strerror(rc));
		} else {
			moem_info("reload: exec %s, cpu-moe-layers %u",
				  a->exec_hybrid ? "hybrid" : "gpu", a->cpu_moe_layers);
			o->ea.o.exec_hybrid = a->exec_hybrid;
			o->ea.o.cpu_moe_layers = a->cpu_moe_layers;
		}
	}
	RESTART_IF(a->cpu_gbps != b->cpu_gbps, "cpu-gbps");
	RESTART_IF(a->cpu_token_ns != b->cpu_token_ns, "cpu-token-ns");
	RESTART_IF(a->cpu_call_ns != b->cpu_call_ns, "cpu-call-ns");
	RESTART_IF(!moem_place_equal(&a->place, &b->place), "place");
	RESTART_IF(str_differs(a->calibration, b->calibration), "calibration");
	RESTART_IF(a->loader.mode != b->loader.mode, "loader");
	RESTART_IF(a->no_verify != b->no_verify, "no-verify");
	RESTART_IF(a->no_graphs != b->no_graphs, "no-cuda-graphs");
	RESTART_IF(str_differs(a->hotness, b->hotness), "hotness");
	RESTART_IF(str_differs(n.socket, o->socket), "socket");
	RESTART_IF(n.sysfs_knobs != o->sysfs_knobs, "sysfs-knobs");
	RESTART_IF(a->pool.require_pinned != b->pool.require_pinned, "require-pinned");
	RESTART_IF(a->pool.mem_reserve != b->pool.mem_reserve, "mem-reserve");
	RESTART_IF(str_differs(a->pool.nodes, b->pool.nodes), "dram-nodes");
	RESTART_IF(str_differs(n.http.listen, o->http.listen), "listen");
	RESTART_IF(str_differs(n.http.api_key, o->http.api_key), "api-key");
	RESTART_IF(str_differs(n.http.model_name, o->http.model_name), "model-name");
	RESTART_IF(n.http.dense_prec != o->http.dense_prec, "dense-prec");
	RESTART_IF(n.http.no_prefix_cache != o->http.no_prefix_cache, "prefix-cache");
	RESTART_IF(n.http.reasoning != o->http.reasoning, "reasoning-parser");
	RESTART_IF(n.http.max_body != o->http.max_body || n.http.threads != o->http.threads ||
			   n.http.max_conns != o->http.max_conns ||
			   n.http.timeout_s != o->http.timeout_s,
		   "http settings");
	if (memcmp(&n.sched, &o->sched, sizeof(n.sched)) && d->srv) {
		/* Batching settings apply at the next step boundary. */
		rc = d->srv->sched ? moemd_serve_set_opts(d->srv, &n.sched) : 0;
		if (rc) {
			moem_warn("reload: batching settings refused: %s", moem_strerror(rc));
		} else {
			o->sched = n.sched;
			if (!d->srv->sched)
				d->srv->sched_opts = n.sched;
			moem_info("reload: max-queue %u, max-batch %u, step-tokens %u, "
				  "prefill-chunk %u",
				  n.sched.max_waiting, n.sched.max_running, n.sched.step_tokens,
				  n.sched.prefill_chunk);
		}
	}
#undef RESTART_IF
	if (moemd_state_get(d) == MOEMD_READY &&
	    (str_differs(a->trace_out, b->trace_out) || a->trace_logits != b->trace_logits)) {
		rc = moem_engine_set_trace(d->e, a->trace_out, a->trace_logits);
		if (rc)
			moem_warn("reload: trace-out refused: %s", moem_strerror(rc));
		else
			moem_info("reload: trace-out = %s (from the next run)",
				  a->trace_out ? a->trace_out : "off");
	}
	for (int i = 0; i < nr; i++)
		moem_warn("reload: '%s' changed: it takes effect when moemd restarts", restart[i]);
		/* Take the live settings; keep the restart-only ones in force. The
	 * swapped-out values are freed with n. */
#define SWAP(x, y)                      \
	do {                            \
		__typeof__(x) t_ = (x); \
		(x) = (y);              \
		(y) = t_;               \
	} while (0)
	o->log_level = n.log_level;
	/* What clients may do: from the next request on. */
	if (str_differs(n.trace_dir, o->trace_dir) || str_differs(n.workload_dir, o->workload_dir))
		moem_info("reload: trace-dir %s, workload-dir %s",
			  n.trace_dir ? n.trace_dir : "(none)",
			  n.workload_dir ? n.workload_dir : "(none)");
	SWAP(o->trace_dir, n.trace_dir);
	SWAP(o->workload_dir, n.workload_dir);
	o->idle_timeout_ms = n.idle_timeout_ms;
	o->clients_per_uid = n.clients_per_uid;
	SWAP(o->ea.w, n.ea.w);
	if (moemd_state_get(d) == MOEMD_READY) {
		/* Applied above; before that they wait for the next reload. */
		SWAP(o->ea.hbm, n.ea.hbm);
		SWAP(o->ea.dram, n.ea.dram);
		SWAP(o->ea.o.hbm_budget, n.ea.o.hbm_budget);
		SWAP(o->ea.o.dram_budget, n.ea.o.dram_budget);
		SWAP(o->ea.o.kv_budget, n.ea.o.kv_budget);
		SWAP(o->ea.o.route, n.ea.o.route);
	} else {
		moem_warn("reload: budgets and route apply once moemd is ready: send SIGHUP again "
			  "then");
	}
	if (moemd_state_get(d) == MOEMD_READY) {
		SWAP(o->ea.o.trace_out, n.ea.o.trace_out);
		SWAP(o->ea.o.trace_logits, n.ea.o.trace_logits);
	}
#undef SWAP
	moemd_cfg_free(&n);
	moem_info("reloaded %s", o->config);
}
