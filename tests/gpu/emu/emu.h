/* SPDX-License-Identifier: GPL-2.0-only */
/* Between the emulator's scheduler (sched.cpp) and its fake driver (driver.cpp). */
#ifndef MOEM_EMU_H
#define MOEM_EMU_H

#include <stddef.h>

/* Run fn(params) over grid x block; 0, 1 after a memory fault, -1 if unsupported. */
int emu_launch(void (*fn)(const void *), const void *params, dim3 grid, dim3 block, size_t smem);
/* bytes at an align-aligned address whose end touches an inaccessible page. */
void *emu_guarded_alloc(size_t bytes, size_t align);
void emu_guarded_free(void *p);

#endif /* MOEM_EMU_H */
