// SPDX-License-Identifier: GPL-2.0-only
/* The USDT semaphores (usdt.h): in .probes, where tracers look for them. */
#include <moem/usdt.h>

#define SEM(name)                                            \
	__extension__ unsigned short moem_##name##_semaphore \
		__attribute__((unused, section(".probes")))

SEM(route);
SEM(fetch);
SEM(stall);
SEM(promote);
SEM(demote);
