// SPDX-License-Identifier: GPL-2.0-only
/* FluxMoE placement, rho controller and staggered migration (policy_paging.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

struct moem_paging {
	struct moem_paging_cfg c;
	uint32_t target;
	double rho;
	uint64_t *mig_step; /* [L]: step of the layer's last migration, +1 (0: none) */
};

void moem_paging_default(struct moem_paging_cfg *c, uint32_t n_layers, uint32_t n_experts)
{
	memset(c, 0, sizeof(*c));
	c->n_layers = n_layers;
	c->n_experts = n_experts;
	c->theta = 0.9;
	c->upper = 1.0;
	c->margin = 0.02;
}

int moem_paging_parse(const char *spec, struct moem_paging_cfg *c, bool *initial_given)
{
	struct moem_spec sp;
	uint32_t init = UINT32_MAX;
	int ret;

	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	if (strcmp(sp.name, "fluxmoe"))
		return moem_errf(EINVAL, "paging policy '%s': unknown (fluxmoe)", sp.name);
	if ((ret = moem_spec_f64(&sp, "theta", 0.01, 10, &c->theta)) ||
	    (ret = moem_spec_f64(&sp, "upper", 0.01, 10, &c->upper)) ||
	    (ret = moem_spec_f64(&sp, "margin", 0, 1, &c->margin)) ||
	    (ret = moem_spec_u32(&sp, "initial", 0, 1024, &init)))
		return ret;
	if (c->theta > c->upper)
		return moem_errf(EINVAL, "fluxmoe: theta %g above upper %g", c->theta, c->upper);
	if (initial_given)
		*initial_given = init != UINT32_MAX;
	if (init != UINT32_MAX)
		c->initial = init;
	return moem_spec_done(&sp);
}

int moem_paging_placement(const double *bw, uint32_t n, double *x)
{
	double sum = 0;

	if (!n)
		return moem_errf(EINVAL, "placement: no backends");
	for (uint32_t k = 0; k < n; k++) {
		if (!(bw[k] > 0) || !isfinite(bw[k]))
			return moem_errf(EINVAL, "placement: backend %u bandwidth %g", k, bw[k]);
		sum += bw[k];
	}
	for (uint32_t k = 0; k < n; k++)
		x[k] = bw[k] / sum;
	return 0;
}

double moem_paging_load_ns(const double *bw, uint32_t n, uint64_t bytes)
{
	double x[16], worst = 0;

	if (n > 16 || moem_paging_placement(bw, n, x))
		return INFINITY;
	for (uint32_t k = 0; k < n; k++) {
		double t = x[k] * (double)bytes / bw[k];

		if (t > worst)
			worst = t;
	}
	return worst;
}

int moem_paging_create(const struct moem_paging_cfg *c, struct moem_paging **out)
{
	struct moem_paging *pg;

	if (!c->n_layers || !c->n_experts || c->capacity > c->n_experts ||
	    !(c->theta > 0 && c->theta <= c->upper))
		return moem_errf(EINVAL, "fluxmoe: capacity %u of %u experts, dead zone [%g, %g]",
				 c->capacity, c->n_experts, c->theta, c->upper);
	pg = calloc(1, sizeof(*pg));
	if (!pg)
		return -ENOMEM;
	pg->mig_step = calloc(c->n_layers, sizeof(*pg->mig_step));
	if (!pg->mig_step) {
		free(pg);
		return -ENOMEM;
	}
	pg->c = *c;
	pg->target = c->initial < c->capacity ? c->initial : c->capacity;
	*out = pg;
	return 0;
}

void moem_paging_destroy(struct moem_paging *pg)
{
	if (!pg)
		return;
	free(pg->mig_step);
	free(pg);
}

int moem_paging_control(struct moem_paging *pg, double tau_comp_ns, double tau_load_ns)
{
	int d = 0;

	pg->rho = tau_load_ns > 0 ? tau_comp_ns / tau_load_ns : INFINITY;
	if (pg->rho < pg->c.theta && pg->target < pg->c.capacity)
		d = 1;
	else if (pg->rho > pg->c.upper && pg->target > 0)
		d = -1;
	pg->target = (uint32_t)((int)pg->target + d);
	return d;
}

void moem_paging_set_capacity(struct moem_paging *pg, uint32_t capacity)
{
	pg->c.capacity = capacity > pg->c.n_experts ? pg->c.n_experts : capacity;
	if (pg->target > pg->c.capacity)
		pg->target = pg->c.capacity;
}

uint32_t moem_paging_target(const struct moem_paging *pg)
{
	return pg->target;
}

double moem_paging_rho(const struct moem_paging *pg)
{
	return pg->rho;
}

int moem_paging_migration(struct moem_paging *pg, uint64_t step, uint32_t layer,
			  const uint8_t *resident, const float *hot, struct moem_paging_mig *m)
{
	const uint32_t N = pg->c.n_experts;
	uint32_t count = 0, best = N, in = N, out = N;

	if (layer >= pg->c.n_layers || pg->mig_step[layer] == step + 1)
		return 0;
	for (uint32_t e = 0; e < N; e++) {
		count += resident[e] != 0;
		if (resident[e] && (in == N || hot[e] < hot[in]))
			in = e;
		if (!resident[e] && (out == N || hot[e] > hot[out]))
			out = e;
	}
	if (count == pg->target) {
		/* Follow drift: release a resident clearly colder than an outsider. */
		if (in == N || out == N || !(hot[out] > hot[in] + pg->c.margin))
			return 0;
		pg->mig_step[layer] = step + 1;
		*m = (struct moem_paging_mig){layer, in, false};
		return 1;
	}
	for (uint32_t e = 0; e < N; e++) {
		if (count < pg->target && !resident[e] && (best == N || hot[e] > hot[best]))
			best = e;
		if (count > pg->target && resident[e] && (best == N || hot[e] < hot[best]))
			best = e;
	}
	if (best == N)
		return 0;
	pg->mig_step[layer] = step + 1;
	*m = (struct moem_paging_mig){layer, best, count < pg->target};
	return 1;
}
