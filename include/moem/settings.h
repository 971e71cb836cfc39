/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Settings files for moem tools and moemd: INI syntax (libinih),
 * "key = value" lines, '#' or ';' comments, optional [section] headers.
 * A key means the same as the command-line option of that name (without
 * the dashes): budgets, policies, pool and backend choices.
 */
#ifndef MOEM_SETTINGS_H
#define MOEM_SETTINGS_H

/*
 * Call fn(arg, section, key, value) for every setting in path, in file
 * order. fn returns 0 to go on or -errno to stop; then the error (with
 * the file and line in the message) is returned. -ENOENT if the file does
 * not exist, -EINVAL for a syntax error naming the line.
 */
typedef int (*moem_settings_fn)(void *arg, const char *section, const char *key, const char *value);
int moem_settings_load(const char *path, moem_settings_fn fn, void *arg);

#endif /* MOEM_SETTINGS_H */
