/* SPDX-License-Identifier: GPL-2.0-only */
/* libmoem umbrella header: include this to get the whole public API. */
#ifndef MOEM_MOEM_H
#define MOEM_MOEM_H

#include "util.h"
#include "error.h"
#include "log.h"
#include "rng.h"
#include "half.h"
#include "progress.h"
#include "model.h"
#include "quant.h"
#include "synth.h"
#include "safetensors.h"
#include "store.h"
#include "pack.h"
#include "pool.h"
#include "dev.h"
#include "loader.h"
#include "backend.h"

#endif /* MOEM_MOEM_H */
