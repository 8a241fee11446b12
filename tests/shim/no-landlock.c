/* no-landlock.c - run a program as on a kernel without Landlock, for
 * tests/confine.bats: a seccomp filter makes landlock_create_ruleset(2),
 * landlock_add_rule(2) and landlock_restrict_self(2) fail with ENOSYS,
 * what a kernel built without it answers, and is inherited by everything
 * the program starts.
 *
 *   no-landlock PROGRAM [ARG...] */
#define _GNU_SOURCE
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no-landlock PROGRAM [ARG...]\n");
		return 2;
	}
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(landlock_create_ruleset), 0) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(landlock_add_rule), 0) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(landlock_restrict_self), 0) < 0 ||
	    seccomp_load(ctx) < 0) {
		fprintf(stderr, "no-landlock: cannot install the filter: %s\n", strerror(errno));
		return 1;
	}
	seccomp_release(ctx);
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no-landlock: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
