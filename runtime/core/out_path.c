// SPDX-License-Identifier: GPL-2.0-only
/* Where a tool may write its result (util.h, moem_check_out_path()). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <moem/error.h>
#include <moem/util.h>

int moem_check_out_path(const char *what, const char *path, const char *const *inputs, size_t n)
{
	struct stat o, i;

	if (stat(path, &o)) {
		if (errno == ENOENT)
			return 0;
		return moem_errf(errno, "%s %s: %s", what, path, strerror(errno));
	}
	if (!S_ISREG(o.st_mode))
		return moem_errf(EINVAL,
				 "%s %s: exists and is not a regular file (a %s): give a new file "
				 "or a regular one",
				 what, path,
				 S_ISDIR(o.st_mode)			    ? "directory"
				 : S_ISCHR(o.st_mode) || S_ISBLK(o.st_mode) ? "device"
				 : S_ISFIFO(o.st_mode)			    ? "FIFO"
									    : "special file");
	for (size_t k = 0; k < n; k++)
		if (inputs[k] && !stat(inputs[k], &i) && i.st_dev == o.st_dev &&
		    i.st_ino == o.st_ino)
			return moem_errf(EINVAL,
					 "%s %s: it is the input %s: writing would destroy it",
					 what, path, inputs[k]);
	return 0;
}
