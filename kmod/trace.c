// SPDX-License-Identifier: GPL-2.0-only
/* Instantiate the moem tracepoints declared in trace.h. */
#define CREATE_TRACE_POINTS
#include "trace.h"
