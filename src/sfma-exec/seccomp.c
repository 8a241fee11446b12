/* seccomp.c - the syscall filter a contained command runs under.
 *
 * Compiled once per process with libseccomp and kept as raw BPF, so that
 * installing it in the command's process is a single system call with no
 * allocation: it runs after RLIMIT_AS is set, and under AddressSanitizer a
 * malloc at that point would fail (the sanitizer's shadow mappings alone
 * exceed any sane address-space ceiling).
 *
 * One call is neither allowed nor refused but answered by sfma-exec:
 * sysinfo(2), whose load averages, memory figures and process count are
 * the host's whatever the namespaces (kernel/sys.c do_sysinfo; only the
 * uptime follows a time namespace). The filter hands it to a listener
 * (seccomp_unotify(2)) that the command passes to the stage, which writes
 * the sandbox's own figures back (notify.c). Refusing it instead is no
 * answer: the C library reads the memory size through it and ignores its
 * failure, so sysconf(_SC_PHYS_PAGES) would return whatever the stack
 * held (glibc sysdeps/unix/sysv/linux/getsysstats.c __get_phys_pages). */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "errors.h"
#include "ndjson.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* [0]: the filter; [1]: the same refusing shared memory as well. */
static struct sock_filter *filter[2];
static unsigned short filter_len[2];
static int notifies[2];         /* the filter hands sysinfo to a listener */

/* Kernel surface a build, test or git command has no use for, and which
 * has carried most container escapes: debugging other processes, the
 * io_uring side door around this filter, mount manipulation after setup,
 * the kernel keyring, BPF, userfaultfd (a race-widening primitive), perf,
 * kexec and modules, file handles (open_by_handle_at walks past a chroot). */
static const char *const denied[] = {
	"ptrace", "process_vm_readv", "process_vm_writev",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr",
	"keyctl", "add_key", "request_key",
	"bpf", "userfaultfd", "perf_event_open",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"setns", "name_to_handle_at", "open_by_handle_at",
	"acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "uselib",
	NULL,
};

/* Spelled out: the SCMP_A0 macros leave a field implicit, which clang flags. */
static struct scmp_arg_cmp arg_cmp(unsigned arg, enum scmp_compare op, scmp_datum_t a,
                                   scmp_datum_t b)
{
	struct scmp_arg_cmp c = {.arg = arg, .op = op, .datum_a = a, .datum_b = b};
	return c;
}

/* memfd_secret(2): libseccomp learns system calls from the kernel it was
 * built against, and one older than Linux 5.14 lacks this one (a negative
 * pseudo number then). It is 447 in every architecture's table that has
 * it (include/uapi/asm-generic/unistd.h, arch/x86/entry/syscalls). */
static int memfd_secret_nr(void)
{
	int nr = seccomp_syscall_resolve_name("memfd_secret");
	return nr >= 0 ? nr : 447;
}

static int add_rules(scmp_filter_ctx ctx, int refuse_shm, int *notify)
{
	const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
	for (size_t i = 0; denied[i]; i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		if (seccomp_rule_add(ctx, deny, nr, 0) < 0)
			return -1;
	}
	/* A new user namespace hands the process a full capability set over
	 * fresh namespaces: the most used step of unprivileged kernel exploits. */
	if (seccomp_rule_add(ctx, deny, SCMP_SYS(unshare), 1,
	                     arg_cmp(0, SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) < 0 ||
	    seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1,
	                     arg_cmp(0, SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) < 0)
		return -1;
	/* clone3 passes its flags in memory a filter cannot read: answer ENOSYS
	 * so that libc falls back to clone, whose flags are checked above. */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) < 0)
		return -1;
	/* TIOCSTI pushes bytes into a terminal's input queue (typed as the
	 * operator); TIOCLINUX can do the same on a virtual console. The ioctl
	 * number is an int: compare the low 32 bits only. */
	if (seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1,
	                     arg_cmp(1, SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)) < 0 ||
	    seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1,
	                     arg_cmp(1, SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX)) < 0)
		return -1;
	/* vsock reaches the hypervisor host, which a network namespace does not cover. */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
	                     arg_cmp(0, SCMP_CMP_EQ, AF_VSOCK, 0)) < 0)
		return -1;
	/* sysinfo to the stage (see the top of this file). libseccomp refuses
	 * the action where the kernel lacks it (Linux < 5.0) or cannot say
	 * (valgrind knows no seccomp(2)): then the call fails with ENOSYS, as
	 * it does when no listener is made at install. */
	*notify = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(sysinfo), 0) == 0;
	if (!*notify && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(sysinfo), 0) < 0)
		return -1;
	/* Memory no address-space ceiling sees (see sandbox.c): answered
	 * ENOSYS, as on a kernel built without it, which programs expect and
	 * work around (glibc's and Python's callers of memfd_create fall back
	 * to a file; SysV IPC is an optional kernel feature, CONFIG_SYSVIPC;
	 * so is memfd_secret, CONFIG_SECRETMEM). libseccomp writes a rule for
	 * msgget, semget or shmget in the ipc(2) multiplexer's form too on an
	 * architecture that has one. */
	if (refuse_shm &&
	    (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(memfd_create), 0) < 0 ||
	     seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), memfd_secret_nr(), 0) < 0 ||
	     seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(shmget), 0) < 0 ||
	     seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(msgget), 0) < 0 ||
	     seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(semget), 0) < 0))
		return -1;
	return 0;
}

static int compile(int refuse_shm, const char **why)
{
	*why = "seccomp_init";
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -1;
	int rc = -1, fd = -1;
	/* Only the native architecture: a syscall of another ABI (int 0x80,
	 * x32) kills the process instead of slipping past rules written for
	 * native numbers. */
	*why = "seccomp architecture";
	if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0 &&
	    seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL) < 0) /* kernel < 4.14 */
		goto out;
	/* Rules as a binary tree rather than a list: the same verdicts, but
	 * installing the filter is a third cheaper, and that is paid by every
	 * command, last before its execve. At install the kernel runs the
	 * filter once for every system call number to cache those it always
	 * allows (seccomp_cache_prepare, Linux 5.11), so the cost grows with
	 * the path a number takes through it. Optional: a libseccomp before
	 * 2.5 builds the list. */
#if SCMP_VER_MAJOR > 2 || (SCMP_VER_MAJOR == 2 && SCMP_VER_MINOR >= 5)
	(void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
#endif
	*why = "seccomp rules";
	if (add_rules(ctx, refuse_shm, &notifies[refuse_shm]) < 0)
		goto out;
	*why = "seccomp export";
	fd = memfd_create("sfma-seccomp", MFD_CLOEXEC);
	if (fd < 0 || seccomp_export_bpf(ctx, fd) < 0)
		goto out;
	off_t size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % (off_t)sizeof *filter[0] || size / (off_t)sizeof *filter[0] > 4096 ||
	    lseek(fd, 0, SEEK_SET) < 0)
		goto out;
	struct sfma_err e;
	size_t got = 0;
	char *raw = read_all_fd(fd, (size_t)size, &got, &e);
	if (!raw || got != (size_t)size) {
		free(raw);
		goto out;
	}
	filter[refuse_shm] = (struct sock_filter *)(void *)raw;
	filter_len[refuse_shm] = (unsigned short)(got / sizeof *filter[0]);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}

int seccomp_prepare(const char **why)
{
	for (int i = 0; i < 2; i++)
		if (!filter[i] && compile(i, why) < 0)
			return -1;
	return 0;
}

int seccomp_install(int refuse_shm)
{
	int i = refuse_shm ? 1 : 0;
	struct sock_fprog prog = {.len = filter_len[i], .filter = filter[i]};
	if (!filter[i]) {
		errno = EINVAL;
		return -1;
	}
	if (notifies[i]) {
		/* The listener comes close-on-exec (kernel/seccomp.c
		 * init_listener, get_unused_fd_flags(O_CLOEXEC)). */
		long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		                  SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
		if (fd >= 0)
			return (int)fd;
		/* EBUSY: a filter above ours has a listener already, and a
		 * chain holds one (seccomp(2)); ENOSYS, EINVAL: no listeners
		 * here. Without one the kernel fails a notifying call with
		 * ENOSYS (kernel/seccomp.c seccomp_do_user_notification). */
		if (errno != EBUSY && errno != ENOSYS && errno != EINVAL)
			return -1;
	}
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? -1 : -2;
}
