/* confine-cost.c - what confinement costs each program at its start, for
 * tests/bench/confine.sh: for every row of the table (lib/confine.c),
 * ROUNDS processes forked one after another each apply it once
 * (confine_apply: no_new_privs, the Landlock ruleset and its rules, the
 * seccomp filter, compiled and loaded) and time that on the monotonic
 * clock; printed is the median in microseconds. A confinement cannot be
 * undone, so each is a process of its own.
 *
 *   confine-cost WORKSPACE ROUNDS */
#include "confine.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	const char *ws = argv[1];
	int rounds = atoi(argv[2]);
	if (rounds < 1 || rounds > 10000)
		return 2;
	double *us = calloc((size_t)rounds, sizeof *us);
	const char *const args[] = { ws, NULL };
	const uint16_t ports[] = { 443, 53 };
	const struct confine_places pl = {.workspace = ws, .args = args, .outs = args, .scratch = ws,
	                                  .ports = ports, .n_ports = 2};
	printf("%-22s %10s  %s\n", "program", "median us", "in force");
	for (const struct confine_policy *p = confine_table; p->program; p++) {
		struct confine_report r = {0};
		for (int i = 0; i < rounds; i++) {
			int fd[2];
			if (pipe(fd) < 0)
				return 1;
			pid_t pid = fork();
			if (pid == 0) {
				struct timespec a, b;
				clock_gettime(CLOCK_MONOTONIC, &a);
				confine_apply(p, &pl, &r);
				clock_gettime(CLOCK_MONOTONIC, &b);
				double t = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
				if (write(fd[1], &t, sizeof t) != sizeof t || write(fd[1], &r, sizeof r) != sizeof r)
					_exit(1);
				_exit(0);
			}
			close(fd[1]);
			if (read(fd[0], &us[i], sizeof us[i]) != sizeof us[i] || read(fd[0], &r, sizeof r) != sizeof r)
				return 1;
			close(fd[0]);
			waitpid(pid, NULL, 0);
		}
		qsort(us, (size_t)rounds, sizeof *us, cmp);
		printf("%-22s %10.1f  landlock %d, seccomp %s\n", p->program, us[rounds / 2], r.abi,
		       r.seccomp ? "yes" : "no");
	}
	free(us);
	return 0;
}
