/* uids.c - a host uid and gid of its own for every sandbox (sfma-exec(1),
 * "IDS").
 *
 * As root, a sandbox's uid and gid 0 are, on the host, an id leased from a
 * range no user owns. Sharing one host uid made every sandbox the peer of
 * every other and of every process of that user: the kernel lets a process
 * signal any process whose real or saved uid is its own real or effective
 * uid (kill(2); kernel/signal.c kill_ok_by_cred), so a host process as
 * nobody could SIGSTOP a sandbox's init. With a uid of its own, nothing but
 * root and the sandbox itself holds it.
 *
 * The lease is a file per id in a directory only root may write, locked
 * with flock(2) for as long as the sandbox lives: sfma-exec processes on
 * one machine never hand out the same id twice, and the kernel drops the
 * lock of a holder that dies however it dies (the lock belongs to the open
 * file description, released with its last descriptor; flock(2)). Files
 * are never removed: unlinking a lock file races with a process that has
 * opened but not yet locked it (it would lock a file nobody else can find),
 * and the scan starts at the bottom of the range, so only as many files
 * exist as sandboxes ever ran at once.
 *
 * An id is never one the host's account files name: a uid or gid of
 * /etc/passwd or /etc/group, or an id /etc/subuid or /etc/subgid delegates
 * to a user (subuid(5): that user's own containers may run as it). They
 * are read again whenever one of them changed. */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

#define LEASE_PARENT "/run/sfma"
#define LEASE_DIR    "uids"

/* Ids the account files name, as closed intervals within the range. */
struct span {
	unsigned lo, hi;
};

static struct span *taken;
static size_t n_taken, cap_taken;
static struct stat seen[4];             /* the files as last read */
static unsigned seen_first, seen_last;
static int accounts_read;
static int lease_dir = -1;

static const char *const account_files[4] = {
	"/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid",
};

int id_range_parse(const char *s, unsigned *first, unsigned *last)
{
	char *end;
	errno = 0;
	if (!s || *s < '0' || *s > '9')
		return -1;
	unsigned long a = strtoul(s, &end, 10);
	if (errno || *end != '-' || end[1] < '0' || end[1] > '9')
		return -1;
	unsigned long b = strtoul(end + 1, &end, 10);
	/* 0 is root; (uid_t)-1 means "no change" to setresuid(2) and is
	 * refused in an id map, as is 65535 on 16-bit id ABIs. */
	if (errno || *end || a == 0 || a > b || b >= UINT_MAX - 1)
		return -1;
	*first = (unsigned)a;
	*last = (unsigned)b;
	return 0;
}

/* 1 if [first,last] lies in the "INSIDE OUTSIDE COUNT" lines of map
 * (user_namespaces(7)): a map line of our namespace maps our ids, so
 * INSIDE is the id as we see it. */
static int map_covers(const char *map, unsigned first, unsigned last)
{
	FILE *f = fopen(map, "re");
	if (!f)
		return 0;
	unsigned inside, outside, count;
	int covered = 0;
	while (fscanf(f, "%u %u %u", &inside, &outside, &count) == 3)
		covered |= first >= inside && last - inside < count;
	fclose(f);
	return covered;
}

int id_range_mapped(unsigned first, unsigned last)
{
	return map_covers("/proc/self/uid_map", first, last) &&
	       map_covers("/proc/self/gid_map", first, last);
}

static void take_span(unsigned long lo, unsigned long hi)
{
	if (hi < seen_first || lo > seen_last)
		return;
	if (n_taken == cap_taken) {
		cap_taken = cap_taken ? cap_taken * 2 : 64;
		taken = xrealloc(taken, cap_taken * sizeof *taken);
	}
	taken[n_taken++] = (struct span){lo < seen_first ? seen_first : (unsigned)lo,
	                                 hi > seen_last ? seen_last : (unsigned)hi};
}

/* "name:start:count" lines (subuid(5)); anything else is skipped. */
static void read_delegated(FILE *f)
{
	char line[512];
	while (fgets(line, sizeof line, f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL, *end;
		if (!c2)
			continue;
		unsigned long start = strtoul(c1 + 1, &end, 10);
		if (end != c2)
			continue;
		unsigned long count = strtoul(c2 + 1, &end, 10);
		if (count > 0 && start <= UINT_MAX && count - 1 <= UINT_MAX - start)
			take_span(start, start + count - 1);
	}
}

/* The account files as they are now, unless unchanged since the last
 * read. No NSS: these are the files, read by the stream parsers of the C
 * library (fgetpwent(3), fgetgrent(3)); an id a directory service hands
 * out must not fall into the range (sfma-exec(1)). */
static void read_accounts(unsigned first, unsigned last)
{
	struct stat now[4];
	int changed = !accounts_read || first != seen_first || last != seen_last;
	for (int i = 0; i < 4; i++) {
		if (stat(account_files[i], &now[i]) < 0)
			memset(&now[i], 0, sizeof now[i]);
		changed |= now[i].st_ino != seen[i].st_ino || now[i].st_size != seen[i].st_size ||
		           now[i].st_mtim.tv_sec != seen[i].st_mtim.tv_sec ||
		           now[i].st_mtim.tv_nsec != seen[i].st_mtim.tv_nsec;
	}
	if (!changed)
		return;
	memcpy(seen, now, sizeof seen);
	seen_first = first;
	seen_last = last;
	n_taken = 0;
	accounts_read = 1;
	for (int i = 0; i < 4; i++) {
		FILE *f = fopen(account_files[i], "re");
		if (!f)
			continue;
		if (i == 0) {
			struct passwd *pw;
			while ((pw = fgetpwent(f))) {
				take_span(pw->pw_uid, pw->pw_uid);
				take_span(pw->pw_gid, pw->pw_gid);
			}
		} else if (i == 1) {
			struct group *gr;
			while ((gr = fgetgrent(f)))
				take_span(gr->gr_gid, gr->gr_gid);
		} else {
			read_delegated(f);
		}
		fclose(f);
	}
}

static int is_taken(unsigned id)
{
	for (size_t i = 0; i < n_taken; i++)
		if (id >= taken[i].lo && id <= taken[i].hi)
			return 1;
	return 0;
}

/* The lease directory, made on first use: root's alone (anyone else who
 * may write in it could hold or fake a lease). */
static int open_lease_dir(void)
{
	if (lease_dir >= 0)
		return lease_dir;
	struct stat sb;
	if (mkdir(LEASE_PARENT, 0755) < 0 && errno != EEXIST)
		return -1;
	int parent = open(LEASE_PARENT, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (parent < 0)
		return -1;
	if (fstat(parent, &sb) < 0 || sb.st_uid != geteuid() || (sb.st_mode & 022)) {
		close(parent);
		errno = EPERM;
		return -1;
	}
	if (mkdirat(parent, LEASE_DIR, 0700) < 0 && errno != EEXIST) {
		close(parent);
		return -1;
	}
	int dir = openat(parent, LEASE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(parent);
	if (dir < 0)
		return -1;
	if (fstat(dir, &sb) < 0 || sb.st_uid != geteuid() || (sb.st_mode & 077)) {
		close(dir);
		errno = EPERM;
		return -1;
	}
	lease_dir = dir;
	return dir;
}

int id_lease_take(unsigned first, unsigned last, struct id_lease *l)
{
	l->fd = -1;
	int dir = open_lease_dir();
	if (dir < 0)
		return -1;
	read_accounts(first, last);
	for (unsigned id = first;; id++) {
		if (!is_taken(id)) {
			char name[16];
			snprintf(name, sizeof name, "%u", id);
			int fd = openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd < 0)
				return -1;
			/* Held by another sandbox: try the next. */
			if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
				l->uid = l->gid = id;
				l->fd = fd;
				return 0;
			}
			int saved = errno;
			close(fd);
			if (saved != EWOULDBLOCK) {
				errno = saved;
				return -1;
			}
		}
		if (id == last)
			break;
	}
	errno = EAGAIN;
	return -1;
}

void id_lease_drop(struct id_lease *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}
