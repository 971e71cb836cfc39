/* SPDX-License-Identifier: GPL-2.0-only */
/* Reading hidden-state files (format in engine.h). */
#ifndef MOEM_ENGINE_HIDDEN_H
#define MOEM_ENGINE_HIDDEN_H

#include <stdint.h>

struct moem_hidden {
	int fd;
	uint32_t hidden, batch;
	uint64_t steps;
};

/* Open and check against the model's hidden size; -EINVAL with a message. */
int moem_hidden_open(const char *path, uint32_t hidden, struct moem_hidden *h);
/* Step s's states, [batch][hidden] floats. */
int moem_hidden_read(struct moem_hidden *h, uint64_t step, float *out);
void moem_hidden_close(struct moem_hidden *h);

#endif /* MOEM_ENGINE_HIDDEN_H */
