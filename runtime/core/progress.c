// SPDX-License-Identifier: GPL-2.0-only
/* Terminal progress bar (progress.h). */
#include <stdio.h>
#include <unistd.h>

#include <moem/progress.h>
#include <moem/util.h>

#define BAR_WIDTH 30

void moem_progress_start(struct moem_progress *p, const char *label, uint64_t total, bool bytes)
{
	p->label = label;
	p->total = total;
	p->done = 0;
	p->bytes = bytes;
	p->start_ns = moem_now_ns();
	p->last_draw_ns = 0;
	p->lock = 0;
	p->enabled = isatty(STDERR_FILENO) && total > 0;
}

static void draw(struct moem_progress *p, uint64_t now)
{
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	double secs = (double)(now - p->start_ns) / 1e9;
	char bar[BAR_WIDTH + 1], a[32], b[32];
	int fill = (int)(frac * BAR_WIDTH);

	for (int i = 0; i < BAR_WIDTH; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[BAR_WIDTH] = 0;
	if (p->bytes)
		fprintf(stderr, "\r%-12s [%s] %5.1f%% %s / %s  %.0f MiB/s ", p->label, bar,
			frac * 100, moem_fmt_bytes(p->done, a, sizeof(a)),
			moem_fmt_bytes(p->total, b, sizeof(b)),
			secs > 0 ? (double)p->done / secs / MOEM_MiB : 0.0);
	else
		fprintf(stderr, "\r%-12s [%s] %5.1f%% %llu / %llu ", p->label, bar, frac * 100,
			(unsigned long long)p->done, (unsigned long long)p->total);
	fflush(stderr);
}

static void maybe_draw(struct moem_progress *p)
{
	uint64_t now;

	if (!p->enabled || __atomic_exchange_n(&p->lock, 1, __ATOMIC_ACQUIRE))
		return;
	now = moem_now_ns();
	if (now - p->last_draw_ns >= 100000000ULL) {
		p->last_draw_ns = now;
		draw(p, now);
	}
	__atomic_store_n(&p->lock, 0, __ATOMIC_RELEASE);
}

void moem_progress_set(struct moem_progress *p, uint64_t done)
{
	__atomic_store_n(&p->done, done, __ATOMIC_RELAXED);
	maybe_draw(p);
}

void moem_progress_add(struct moem_progress *p, uint64_t delta)
{
	__atomic_add_fetch(&p->done, delta, __ATOMIC_RELAXED);
	maybe_draw(p);
}

void moem_progress_finish(struct moem_progress *p)
{
	if (!p->enabled)
		return;
	draw(p, moem_now_ns());
	fprintf(stderr, "\r%*s\r", BAR_WIDTH + 70, "");
	fflush(stderr);
}
