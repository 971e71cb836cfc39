// SPDX-License-Identifier: GPL-2.0-only
/*
 * bench-loader: the loader against fio on the same file, request size and
 * queue depth, in one run.
 *
 * Each repetition runs, in turn, fio (io_uring engine, O_DIRECT, fixed
 * buffers, registered file, sequential reads of the whole file), the
 * loader's io_uring engine and its pread fallback, each reading the whole
 * file once; medians over the repetitions are compared. The loader reads
 * the file as a store would stage experts: chunk-sized reads (8 MiB by
 * default, an expert blob's order of size) submitted from the main thread
 * into a ring of slots in a THP pool, at most as many outstanding as the
 * ring has slots; the loader cuts them into bs-sized requests, qd in
 * flight. Every completed chunk's first and last 4 KiB are checked
 * against the tags the file was written with, so a fast wrong read fails
 * the run.
 *
 * The test file is written once (random blocks, each starting with its
 * own offset tagged) and reused while its size and tags match. All reads
 * are O_DIRECT, so the guest page cache plays no part; caches are dropped
 * once at start anyway when run as root.
 *
 * Last line: RESULT loader_vs_fio ratio=... loader_gbps=... fio_gbps=...
 * pread_ratio=... qd=... bs=...
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/pool.h>
#include <moem/rng.h>
#include <moem/util.h>

#define TAG_MAGIC 0x6d6f656d6c6f6164ULL /* "moemload" */
#define BLOCK	  4096ULL
#define MAX_REPS  50

struct cfg {
	const char *file;
	const char *fio;
	uint64_t size, bs, chunk, pool;
	uint32_t qd, threads, reps;
	bool drop_caches;
	bool small_pages;    /* loader reads into 4 KiB pages instead of the pool */
	const char *fio_mem; /* fio's --mem for the peer run: shmhuge or malloc */
};

static uint64_t tag(uint64_t off)
{
	return off ^ TAG_MAGIC;
}

static double now_s(void)
{
	return (double)moem_now_ns() / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, unsigned int n)
{
	double s[MAX_REPS];

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* Does the file exist with this size and the tags where they belong? */
static bool file_ok(const char *path, uint64_t size)
{
	const uint64_t probes[] = {0, size / 2, size - BLOCK};
	struct stat st;
	uint64_t w;
	bool ok;
	int fd;

	if (stat(path, &st) < 0 || (uint64_t)st.st_size != size)
		return false;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	ok = true;
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(probes) && ok; i++) {
		uint64_t off = probes[i] & ~(BLOCK - 1);

		ok = pread(fd, &w, sizeof(w), (off_t)off) == sizeof(w) && w == tag(off);
	}
	close(fd);
	return ok;
}

/* Write the test file: random blocks, each starting with its tagged offset. */
static int make_file(const char *path, uint64_t size)
{
	const uint64_t chunk = 8 * MOEM_MiB;
	char tmp[4096];
	struct moem_rng rng;
	uint64_t *buf;
	int fd, ret = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "bench-loader: %s: %s\n", tmp, strerror(errno));
		return -errno;
	}
	if (posix_memalign((void **)&buf, BLOCK, chunk)) {
		close(fd);
		return -ENOMEM;
	}
	moem_rng_seed(&rng, 42, 0);
	for (uint64_t i = 0; i < chunk / 8; i++)
		buf[i] = moem_rng_u64(&rng);
	fprintf(stderr, "bench-loader: writing %s (%llu MiB, once)\n", path,
		(unsigned long long)(size >> 20));
	for (uint64_t off = 0; off < size; off += chunk) {
		uint64_t n = moem_min(chunk, size - off);

		for (uint64_t b = 0; b < n; b += BLOCK)
			buf[b / 8] = tag(off + b);
		if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n) {
			ret = errno ? -errno : -EIO;
			fprintf(stderr, "bench-loader: writing %s: %s\n", tmp, strerror(-ret));
			break;
		}
	}
	free(buf);
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	close(fd);
	if (!ret && rename(tmp, path) < 0)
		ret = -errno;
	if (ret)
		unlink(tmp);
	return ret;
}

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	sync();
	if (fd >= 0) {
		if (write(fd, "3", 1) < 0) {
		}
		close(fd);
	}
}

/* --- fio ---------------------------------------------------------------- */

struct result {
	double gbps, cpu_pct;
	double dev_req_kib; /* mean size of a read the device completed, 0 if unknown */
	char path[128];
};

/*
 * Reads completed and sectors read by the file's block device
 * (/proc/diskstats), to show what size of request reached the device
 * after the block layer merged adjacent ones.
 */
static bool devstat(dev_t dev, uint64_t *reads, uint64_t *sectors)
{
	unsigned int maj, min;
	unsigned long long r, m, sec;
	char line[512], name[64];
	bool found = false;
	FILE *f = fopen("/proc/diskstats", "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%u %u %63s %llu %llu %llu", &maj, &min, name, &r, &m, &sec) ==
			    6 &&
		    maj == major(dev) && min == minor(dev)) {
			*reads = r;
			*sectors = sec;
			found = true;
		}
	}
	fclose(f);
	return found;
}

static int run_fio(const struct cfg *c, const char *mem, struct result *r)
{
	char cmd[4096], *out = NULL;
	size_t len = 0, cap = 0;
	struct json_object *root, *job, *rd, *v;
	int status, ret = -EIO;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "%s --name=bench --filename=%s --size=%llu --rw=read --bs=%llu --iodepth=%u "
		 "--ioengine=io_uring --direct=1 --fixedbufs --registerfiles --numjobs=1 "
		 "--mem=%s --output-format=json 2>/dev/null",
		 c->fio, c->file, (unsigned long long)c->size, (unsigned long long)c->bs, c->qd,
		 mem);
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	for (;;) {
		if (len + 4096 > cap) {
			char *t = realloc(out, cap + 65536);

			if (!t)
				break;
			out = t;
			cap += 65536;
		}
		size_t n = fread(out + len, 1, cap - len - 1, p);

		if (!n)
			break;
		len += n;
	}
	status = pclose(p);
	if (!out)
		return -ENOMEM;
	out[len] = 0;
	root = json_tokener_parse(strchr(out, '{') ? strchr(out, '{') : out);
	if (!root || status != 0) {
		fprintf(stderr, "bench-loader: fio failed (exit %d): %s\n",
			WIFEXITED(status) ? WEXITSTATUS(status) : -1, cmd);
		goto out;
	}
	if (json_object_object_get_ex(root, "jobs", &v) && json_object_array_length(v) == 1 &&
	    (job = json_object_array_get_idx(v, 0)) &&
	    json_object_object_get_ex(job, "read", &rd) &&
	    json_object_object_get_ex(rd, "io_bytes", &v) &&
	    (uint64_t)json_object_get_int64(v) == c->size &&
	    json_object_object_get_ex(rd, "bw_bytes", &v)) {
		r->gbps = (double)json_object_get_int64(v) / 1e9;
		r->cpu_pct = 0;
		if (json_object_object_get_ex(job, "usr_cpu", &v))
			r->cpu_pct += json_object_get_double(v);
		if (json_object_object_get_ex(job, "sys_cpu", &v))
			r->cpu_pct += json_object_get_double(v);
		snprintf(r->path, sizeof(r->path),
			 "fio io_uring + fixedbufs + registerfiles, O_DIRECT, --mem=%s", mem);
		ret = 0;
	} else {
		fprintf(stderr, "bench-loader: fio output lacks jobs[0].read of %llu bytes\n",
			(unsigned long long)c->size);
	}
out:
	json_object_put(root);
	free(out);
	return ret;
}

/* --- the loader --------------------------------------------------------- */

struct slot {
	struct bench *b;
	struct slot *next; /* free list */
	uint8_t *dst;
	uint64_t off;
};

struct bench {
	const struct cfg *c;
	sem_t free_slots; /* counts the free list */
	pthread_mutex_t lock;
	struct slot *free;
	unsigned int bad, failed; /* atomics */
};

static void chunk_done(void *arg, int err)
{
	struct slot *s = arg;
	struct bench *b = s->b;
	uint64_t last = b->c->chunk - BLOCK, w0, w1;

	if (err) {
		__atomic_fetch_add(&b->failed, 1, __ATOMIC_RELAXED);
		fprintf(stderr, "bench-loader: %s\n", moem_last_error());
	} else {
		memcpy(&w0, s->dst, 8);
		memcpy(&w1, s->dst + last, 8);
		if (w0 != tag(s->off) || w1 != tag(s->off + last))
			__atomic_fetch_add(&b->bad, 1, __ATOMIC_RELAXED);
	}
	/* Completions come out of order (pread workers): a free list, not a ring. */
	pthread_mutex_lock(&b->lock);
	s->next = b->free;
	b->free = s;
	pthread_mutex_unlock(&b->lock);
	sem_post(&b->free_slots);
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int run_loader(const struct cfg *c, uint8_t *mem, uint64_t mem_len,
		      enum moem_loader_mode mode, struct result *r)
{
	struct moem_loader_opts lo = {.mode = mode,
				      .queue_depth = c->qd,
				      .req_size = (uint32_t)c->bs,
				      .threads = c->threads};
	uint32_t nslots = (uint32_t)(mem_len / c->chunk), idx;
	struct moem_loader_stats st;
	struct bench b = {.c = c, .lock = PTHREAD_MUTEX_INITIALIZER};
	struct moem_loader *ld;
	struct slot *slots;
	double t0, t1, cpu0, cpu1;
	int ret;

	slots = calloc(nslots, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	sem_init(&b.free_slots, 0, nslots);
	ret = moem_loader_create(&lo, &ld);
	if (ret)
		goto out;
	ret = moem_loader_add_file(ld, c->file, &idx);
	if (!ret)
		ret = moem_loader_register_memory(ld, mem, mem_len);
	if (ret) {
		moem_loader_destroy(ld);
		goto out;
	}
	for (uint32_t i = 0; i < nslots; i++) {
		slots[i] = (struct slot){.b = &b, .next = b.free, .dst = mem + i * c->chunk};
		b.free = &slots[i];
	}
	t0 = now_s();
	cpu0 = cpu_s();
	for (uint64_t off = 0; off < c->size && !ret; off += c->chunk) {
		struct slot *s;

		while (sem_wait(&b.free_slots) < 0 && errno == EINTR) {
		}
		pthread_mutex_lock(&b.lock);
		s = b.free;
		b.free = s->next;
		pthread_mutex_unlock(&b.lock);
		s->off = off;
		ret = moem_loader_read(ld, idx, off, c->chunk, s->dst, chunk_done, s);
	}
	moem_loader_drain(ld);
	t1 = now_s();
	cpu1 = cpu_s();
	moem_loader_get_stats(ld, &st);
	moem_loader_destroy(ld);
	if (!ret && (b.failed || b.bad)) {
		fprintf(stderr, "bench-loader: %u chunks failed, %u had wrong bytes\n", b.failed,
			b.bad);
		ret = -EIO;
	}
	if (!ret && st.bytes != c->size) {
		fprintf(stderr, "bench-loader: read %llu bytes, expected %llu\n",
			(unsigned long long)st.bytes, (unsigned long long)c->size);
		ret = -EIO;
	}
	r->gbps = (double)c->size / (t1 - t0) / 1e9;
	r->cpu_pct = (cpu1 - cpu0) / (t1 - t0) * 100;
	snprintf(r->path, sizeof(r->path), "%s", st.path);
out:
	sem_destroy(&b.free_slots);
	free(slots);
	return ret;
}

/* --- huge pages for fio ------------------------------------------------- */

#define OVERCOMMIT "/proc/sys/vm/nr_overcommit_hugepages"
#define FREE_HUGE  "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"

static long overcommit_old = -1;

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static bool write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	bool ok;

	if (!f)
		return false;
	ok = fprintf(f, "%ld\n", v) > 0;
	return fclose(f) == 0 && ok;
}

/*
 * fio --mem=shmhuge puts its buffers in 2 MiB pages, as the loader's pool
 * is: without that, a 1 MiB buffer of 4 KiB pages is 256 segments, more
 * than many queues take in one request (virtio-blk: 254), and fio would
 * lose for a reason that is not its engine. Where free huge pages are
 * short, allow surplus ones (taken from the page allocator on demand and
 * given back when fio's segment goes) for the run; restored at exit.
 */
static bool fio_huge_pages(const struct cfg *c)
{
	long need = (long)((c->qd * c->bs) / MOEM_CHUNK_BYTES) + 2;
	long avail = read_long(FREE_HUGE), old = read_long(OVERCOMMIT);

	if (avail >= need)
		return true;
	if (old < 0 || geteuid() != 0 || !write_long(OVERCOMMIT, old + need))
		return false;
	overcommit_old = old;
	return true;
}

static void fio_huge_restore(void)
{
	if (overcommit_old >= 0 && !write_long(OVERCOMMIT, overcommit_old))
		fprintf(stderr, "bench-loader: could not restore %s to %ld\n", OVERCOMMIT,
			overcommit_old);
	overcommit_old = -1;
}

/* --- main --------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench-loader --file PATH [--size 4G] [--qd 32] [--bs 1M] [--chunk 8M]\n"
		"                    [--pool 256M] [--threads 8] [--reps 7] [--fio fio]\n"
		"                    [--fio-mem shmhuge|malloc] [--small-pages] "
		"[--no-drop-caches]\n"
		"Reads PATH (written first if absent or not this benchmark's) with fio and with\n"
		"the loader (io_uring, then pread) in turn, --reps times; prints medians and\n"
		"a RESULT line. fio's buffers are 2 MiB pages like the loader's pool\n"
		"(--fio-mem shmhuge, the default; fio with 4 KiB-page buffers is shown too);\n"
		"--small-pages makes the loader read into 4 KiB pages instead.\n");
}

static int parse_size_arg(const char *what, const char *s, uint64_t *out)
{
	int ret = moem_parse_size(s, NULL, out);

	if (ret)
		fprintf(stderr, "bench-loader: %s: %s\n", what, moem_strerror(ret));
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"file", required_argument, NULL, 'f'},
		{"size", required_argument, NULL, 's'},
		{"qd", required_argument, NULL, 'q'},
		{"bs", required_argument, NULL, 'b'},
		{"chunk", required_argument, NULL, 'c'},
		{"pool", required_argument, NULL, 'p'},
		{"threads", required_argument, NULL, 't'},
		{"reps", required_argument, NULL, 'r'},
		{"fio", required_argument, NULL, 'F'},
		{"no-drop-caches", no_argument, NULL, 'D'},
		{"small-pages", no_argument, NULL, 'S'},
		{"fio-mem", required_argument, NULL, 'M'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct cfg c = {.fio = "fio",
			.size = 4 * MOEM_GiB,
			.bs = MOEM_MiB,
			.chunk = 8 * MOEM_MiB,
			.pool = 256 * MOEM_MiB,
			.qd = 32,
			.threads = MOEM_LOADER_THREADS_DEFAULT,
			.reps = 7,
			.drop_caches = true,
			.fio_mem = "shmhuge"};
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP};
	double fio_g[MAX_REPS], ur_g[MAX_REPS], pr_g[MAX_REPS], f4_g[MAX_REPS];
	double fio_c[MAX_REPS], ur_c[MAX_REPS], pr_c[MAX_REPS];
	struct result fr = {0}, ur = {0}, pr = {0}, f4 = {0};
	struct moem_pool *pool = NULL;
	struct moem_pool_info pi;
	char cmd[512], memdesc[192];
	struct stat fst;
	double f, l, p;
	uint8_t *mem;
	int ch, ret;

	while ((ch = getopt_long(argc, argv, "f:s:q:b:c:p:t:r:F:DSM:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			c.file = optarg;
			break;
		case 's':
			if (parse_size_arg("--size", optarg, &c.size))
				return 2;
			break;
		case 'q':
			c.qd = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			if (parse_size_arg("--bs", optarg, &c.bs))
				return 2;
			break;
		case 'c':
			if (parse_size_arg("--chunk", optarg, &c.chunk))
				return 2;
			break;
		case 'p':
			if (parse_size_arg("--pool", optarg, &c.pool))
				return 2;
			break;
		case 't':
			c.threads = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'r':
			c.reps = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'F':
			c.fio = optarg;
			break;
		case 'D':
			c.drop_caches = false;
			break;
		case 'S':
			c.small_pages = true;
			break;
		case 'M':
			if (strcmp(optarg, "shmhuge") && strcmp(optarg, "malloc")) {
				fprintf(stderr, "bench-loader: --fio-mem shmhuge|malloc\n");
				return 2;
			}
			c.fio_mem = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!c.file || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!c.reps || c.reps > MAX_REPS || !c.qd || c.bs < BLOCK || c.bs > UINT32_MAX ||
	    c.chunk < BLOCK || c.chunk % BLOCK || c.size < c.chunk || c.size % c.chunk ||
	    c.pool < c.chunk) {
		fprintf(stderr,
			"bench-loader: need 1..%d reps, 4 KiB-multiple chunk dividing the "
			"size, a pool of at least one chunk\n",
			MAX_REPS);
		return 2;
	}
	snprintf(cmd, sizeof(cmd), "%s --version >/dev/null 2>&1", c.fio);
	if (system(cmd) != 0) {
		fprintf(stderr,
			"bench-loader: '%s' not found or not runnable "
			"(scripts/deps.sh installs fio)\n",
			c.fio);
		return 1;
	}
	if (!file_ok(c.file, c.size) && make_file(c.file, c.size))
		return 1;
	if (stat(c.file, &fst) < 0) {
		perror("bench-loader: stat");
		return 1;
	}
	if (c.small_pages) {
		mem = mmap(NULL, c.pool, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			   0);
		if (mem == MAP_FAILED) {
			perror("bench-loader: mmap");
			return 1;
		}
		madvise(mem, c.pool, MADV_NOHUGEPAGE);
		memset(mem, 0, c.pool);
		snprintf(memdesc, sizeof(memdesc), "4 KiB pages (--small-pages)");
	} else {
		po.size = c.pool;
		ret = moem_pool_open(&po, &pool);
		if (ret) {
			fprintf(stderr, "bench-loader: pool: %s\n", moem_strerror(ret));
			return 1;
		}
		moem_pool_get_info(pool, &pi);
		mem = moem_pool_base(pool);
		snprintf(memdesc, sizeof(memdesc), "%s pool, %s",
			 moem_pool_provider_name(pi.provider), pi.backing);
	}
	atexit(fio_huge_restore);
	if (!strcmp(c.fio_mem, "shmhuge") && (!fio_huge_pages(&c) || run_fio(&c, "shmhuge", &fr))) {
		fprintf(stderr, "bench-loader: fio cannot get huge-page buffers (needs root or "
				"free 2 MiB pages): comparing with --mem=malloc\n");
		c.fio_mem = "malloc";
	}
	if (c.drop_caches && geteuid() == 0)
		drop_caches();
	printf("bench-loader: %s, %llu MiB, qd %u, bs %llu KiB, chunk %llu MiB, %u reps\n", c.file,
	       (unsigned long long)(c.size >> 20), c.qd, (unsigned long long)(c.bs >> 10),
	       (unsigned long long)(c.chunk >> 20), c.reps);
	printf("loader memory: %s; fio memory: --mem=%s%s\n", memdesc, c.fio_mem,
	       strcmp(c.fio_mem, "malloc") ? " (and --mem=malloc shown as fio-4k)" : "");
	printf("%-4s %-8s %8s %6s %8s  %s\n", "rep", "run", "GB/s", "cpu%", "dev_KiB", "path");
	for (uint32_t i = 0; i < c.reps && !ret; i++) {
		static const char *const names[] = {"fio", "loader", "pread", "fio-4k"};
		struct result *res[] = {&fr, &ur, &pr, &f4};

		for (unsigned int k = 0; k < MOEM_ARRAY_SIZE(names) && !ret; k++) {
			uint64_t r0 = 0, s0 = 0, r1 = 0, s1 = 0;
			bool ds;

			if (k == 3 && !strcmp(c.fio_mem, "malloc"))
				break;
			ds = devstat(fst.st_dev, &r0, &s0);
			if (k == 0)
				ret = run_fio(&c, c.fio_mem, res[k]);
			else if (k == 3)
				ret = run_fio(&c, "malloc", res[k]);
			else
				ret = run_loader(&c, mem, c.pool,
						 k == 1 ? MOEM_LOADER_URING : MOEM_LOADER_PREAD,
						 res[k]);
			if (ret)
				break;
			ds = ds && devstat(fst.st_dev, &r1, &s1) && r1 > r0;
			res[k]->dev_req_kib = ds ? (double)(s1 - s0) / 2 / (double)(r1 - r0) : 0;
			printf("%-4u %-8s %8.3f %6.1f %8.0f  %s\n", i + 1, names[k], res[k]->gbps,
			       res[k]->cpu_pct, res[k]->dev_req_kib, res[k]->path);
			fflush(stdout);
		}
		fio_g[i] = fr.gbps;
		fio_c[i] = fr.cpu_pct;
		ur_g[i] = ur.gbps;
		ur_c[i] = ur.cpu_pct;
		pr_g[i] = pr.gbps;
		pr_c[i] = pr.cpu_pct;
		f4_g[i] = f4.gbps;
	}
	if (pool)
		moem_pool_close(pool);
	else
		munmap(mem, c.pool);
	fio_huge_restore();
	if (ret) {
		fprintf(stderr, "bench-loader: %s\n", moem_strerror(ret));
		return 1;
	}
	f = median(fio_g, c.reps);
	l = median(ur_g, c.reps);
	p = median(pr_g, c.reps);
	printf("median   fio %.3f GB/s (cpu %.1f%%), loader %.3f GB/s (cpu %.1f%%), "
	       "pread x%u %.3f GB/s (cpu %.1f%%)",
	       f, median(fio_c, c.reps), l, median(ur_c, c.reps), c.threads, p,
	       median(pr_c, c.reps));
	if (strcmp(c.fio_mem, "malloc"))
		printf(", fio-4k %.3f GB/s", median(f4_g, c.reps));
	printf("\nRESULT loader_vs_fio ratio=%.3f loader_gbps=%.3f fio_gbps=%.3f "
	       "pread_ratio=%.3f qd=%u bs=%llu\n",
	       l / f, l, f, p / f, c.qd, (unsigned long long)c.bs);
	return 0;
}
