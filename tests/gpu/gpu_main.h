/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * main() for GPU test programs: skip (exit 4, "no CUDA device: ...")
 * unless the CUDA backend opens (MOEM_GPU_TEST_BACKEND=cpu: the CPU one,
 * to check the tests themselves on any machine). The probe runs in a child process: CUDA
 * does not survive fork(), and the harness forks every test, so the
 * parent must never touch the driver.
 *
 * "-t NAME" (repeatable) runs only the tests of that name (the vendored
 * harness has no filter of its own): compute-sanitizer and the emulator
 * smoke run pick a few.
 */
#ifndef MOEM_GPU_MAIN_H
#define MOEM_GPU_MAIN_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moem/backend.h>
#include <moem/error.h>

static int gpu_probe(void)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		const char *name = getenv("MOEM_GPU_TEST_BACKEND");
		struct moem_backend *be;
		int ret = moem_backend_open(name ? name : "cuda", NULL, &be);

		if (ret == -ENODEV) {
			printf("SKIP %s\n", moem_last_error());
			fflush(stdout);
			_exit(4);
		}
		if (ret) {
			printf("FAIL cannot open the CUDA backend: %s\n", moem_last_error());
			fflush(stdout);
			_exit(1);
		}
		{
			struct moem_backend_info info;

			moem_backend_get_info(be, &info);
			printf("# %s backend: %s, driver %d\n", moem_backend_name(be), info.device,
			       info.driver_version);
			fflush(stdout);
		}
		moem_backend_close(be);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Keep only the tests named by -t arguments (all without any). */
static int gpu_filter(int argc, char **argv)
{
	int n = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-t") || i + 1 >= argc) {
			fprintf(stderr, "usage: %s [-t TEST]...\n", argv[0]);
			return 2;
		}
		n++;
		i++;
	}
	if (!n)
		return 0;
	for (struct __fixture_metadata *f = __fixture_list; f; f = f->next) {
		struct __test_metadata *t = f->tests, *head = NULL, *tail = NULL;

		while (t) {
			struct __test_metadata *next = t->next;
			bool keep = false;

			for (int i = 2; i < argc; i += 2)
				keep |= !strcmp(argv[i], t->name);
			if (keep) {
				t->next = NULL;
				t->prev = tail ? tail : t;
				if (tail)
					tail->next = t;
				else
					head = t;
				tail = t;
			}
			t = next;
		}
		if (head)
			head->prev = tail;
		f->tests = head;
	}
	return 0;
}

#define GPU_TEST_MAIN                                                           \
	static void __attribute__((constructor)) __constructor_order_last(void) \
	{                                                                       \
		if (!__constructor_order)                                       \
			__constructor_order = _CONSTRUCTOR_ORDER_BACKWARD;      \
	}                                                                       \
	int main(int argc, char **argv)                                         \
	{                                                                       \
		int ret = gpu_filter(argc, argv);                               \
		if (!ret)                                                       \
			ret = gpu_probe();                                      \
		if (ret)                                                        \
			return ret;                                             \
		return test_harness_run(argc, argv);                            \
	}

#endif /* MOEM_GPU_MAIN_H */
