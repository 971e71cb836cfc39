/* SPDX-License-Identifier: GPL-2.0-only */
/* moem's version: the tools, the daemon and the library share it. */
#ifndef MOEM_VERSION_H
#define MOEM_VERSION_H

#define MOEM_VERSION "0.1.0"

#endif /* MOEM_VERSION_H */
