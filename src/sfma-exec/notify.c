/* notify.c - the system call the stage answers for a command: sysinfo(2).
 *
 * The command's seccomp filter hands every sysinfo call to a listener
 * (seccomp.c) and the stage answers it here with the sandbox's own
 * figures: the uptime of the sandbox, no load, its memory ceiling as the
 * total, what its memory cgroup has left as free, and the processes its
 * pids cgroup counts. The kernel's answer would be the host's (kernel/sys.c
 * do_sysinfo): its load, memory and process count, a channel between
 * sandboxes and a view of the host a contained program has no use for. */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

int64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The figures of the sandbox made at born_ns (CLOCK_BOOTTIME), in the
 * kernel's layout (linux/sysinfo.h): memory in units of mem_unit bytes,
 * uptime in whole seconds rounded up as do_sysinfo rounds it. */
static void figures(const struct cgroup_box *cg, long long memory_bytes, int64_t born_ns, struct sysinfo *si)
{
	memset(si, 0, sizeof *si);
	int64_t up = boottime_ns() - born_ns;
	si->uptime = up <= 0 ? 0 : (long)((up + 999999999) / 1000000000);
	long long total = cgroup_memory_limited(cg) ? cgroup_memory_max(cg) : memory_bytes;
	long long used = 0, procs = 1;
	cgroup_usage(cg, &used, &procs);
	long long free_bytes = used < total ? total - used : 0;
	/* Bytes where they fit an unsigned long, pages where not (32 bits). */
	unsigned unit = (unsigned long long)total > (unsigned long)-1 ? 4096u : 1u;
	si->mem_unit = unit;
	si->totalram = (unsigned long)((unsigned long long)total / unit);
	si->freeram = (unsigned long)((unsigned long long)free_bytes / unit);
	si->procs = (unsigned short)(procs > 65535 ? 65535 : procs < 1 ? 1 : procs);
}

int notify_answer(int listener, const struct cgroup_box *cg, long long memory_bytes, int64_t born_ns)
{
	struct seccomp_notif req;
	/* The kernel wants it zeroed (EINVAL otherwise, seccomp_unotify(2)). */
	memset(&req, 0, sizeof req);
	if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
		return errno == EINTR || errno == ENOENT ? 0 : -1; /* ENOENT: the caller is gone */
	struct seccomp_notif_resp resp = {.id = req.id, .error = -ENOSYS};
	/* Written through the caller's /proc/PID/mem, opened first and only
	 * then checked to belong to the notification still: the descriptor
	 * holds that process's memory, so a pid reused meanwhile cannot
	 * redirect the write (seccomp_unotify(2), "Design goals; use of
	 * SECCOMP_USER_NOTIF_FLAG_CONTINUE" and SECCOMP_IOCTL_NOTIF_ID_VALID).
	 * Opening it asks for what ptrace would (proc(5)): this stage is root,
	 * or the command's own user and owner of its user namespace; where
	 * the kernel still says no (Yama ptrace_scope 3, an unreadable
	 * executable), the call fails with ENOSYS. The write goes through
	 * page protections as ptrace's does (FOLL_FORCE, fs/proc/base.c
	 * mem_rw): a read-only buffer is written too, which only the caller's
	 * own memory feels. */
	char path[48];
	snprintf(path, sizeof path, "/proc/%u/mem", (unsigned)req.pid);
	int mem = open(path, O_WRONLY | O_CLOEXEC);
	if (mem >= 0 && ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) < 0) {
		close(mem);
		return 0; /* gone: nothing to answer */
	}
	if (mem >= 0) {
		struct sysinfo si;
		figures(cg, memory_bytes, born_ns, &si);
		uint64_t at = req.data.args[0];
		if (at > (uint64_t)INT64_MAX ||
		    pwrite(mem, &si, sizeof si, (off_t)at) != (ssize_t)sizeof si)
			resp.error = -EFAULT;
		else
			resp.error = 0;
		close(mem);
	}
	if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT && errno != EINTR)
		return -1;
	return 0;
}
