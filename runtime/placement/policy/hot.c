// SPDX-License-Identifier: GPL-2.0-only
/* Hotness EMA over per-interval router counts (policy_hot.h). */
#include <errno.h>
#include <stdlib.h>

#include <moem/error.h>
#include <moem/policy.h>

struct moem_hot {
	uint32_t L, N;
	double alpha;
	uint64_t interval_ns, next_ns;
	uint64_t intervals;
	int started;
	uint32_t *cnt; /* [L][N] this interval */
	float *score;  /* [L][N] */
};

int moem_hot_create(uint32_t n_layers, uint32_t n_experts, double alpha, uint64_t interval_ns,
		    struct moem_hot **out)
{
	struct moem_hot *h;

	if (!n_layers || n_layers > 256 || !n_experts || n_experts > 1024)
		return moem_errf(EINVAL, "hot: shape %u x %u out of range", n_layers, n_experts);
	if (!(alpha >= 0 && alpha < 1) || !interval_ns)
		return moem_errf(EINVAL, "hot: alpha %g must be in [0, 1), interval > 0", alpha);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->cnt = calloc((size_t)n_layers * n_experts, sizeof(*h->cnt));
	h->score = calloc((size_t)n_layers * n_experts, sizeof(*h->score));
	if (!h->cnt || !h->score) {
		moem_hot_destroy(h);
		return -ENOMEM;
	}
	h->L = n_layers;
	h->N = n_experts;
	h->alpha = alpha;
	h->interval_ns = interval_ns;
	*out = h;
	return 0;
}

void moem_hot_destroy(struct moem_hot *h)
{
	if (!h)
		return;
	free(h->cnt);
	free(h->score);
	free(h);
}

void moem_hot_count(struct moem_hot *h, uint32_t layer, const int32_t *ids, size_t n)
{
	uint32_t *c = h->cnt + (size_t)layer * h->N;

	if (layer >= h->L)
		return;
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && (uint32_t)ids[i] < h->N && c[ids[i]] < UINT32_MAX)
			c[ids[i]]++;
}

void moem_hot_add(struct moem_hot *h, uint32_t layer, uint32_t expert, uint32_t count)
{
	uint32_t *c;

	if (layer >= h->L || expert >= h->N)
		return;
	c = h->cnt + (size_t)layer * h->N + expert;
	*c = UINT32_MAX - *c < count ? UINT32_MAX : *c + count;
}

void moem_hot_fold(struct moem_hot *h)
{
	for (uint32_t l = 0; l < h->L; l++) {
		uint32_t *c = h->cnt + (size_t)l * h->N;
		float *s = h->score + (size_t)l * h->N;
		double total = 0;

		for (uint32_t e = 0; e < h->N; e++)
			total += c[e];
		if (total > 0)
			for (uint32_t e = 0; e < h->N; e++)
				s[e] = (float)(h->alpha * s[e] + (1 - h->alpha) * c[e] / total);
		for (uint32_t e = 0; e < h->N; e++)
			c[e] = 0;
	}
	h->intervals++;
}

int moem_hot_tick(struct moem_hot *h, uint64_t now_ns)
{
	if (!h->started) {
		h->started = 1;
		h->next_ns = now_ns + h->interval_ns;
		return 0;
	}
	if (now_ns < h->next_ns)
		return 0;
	moem_hot_fold(h);
	/* Skip the intervals that elapsed with nothing to fold. */
	h->next_ns += ((now_ns - h->next_ns) / h->interval_ns + 1) * h->interval_ns;
	return 1;
}

const float *moem_hot_scores(const struct moem_hot *h, uint32_t layer)
{
	return h->score + (size_t)layer * h->N;
}

uint64_t moem_hot_intervals(const struct moem_hot *h)
{
	return h->intervals;
}
