/* beside.c - a name beside this program (beside.h). */
#include "beside.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int beside_self(const char *name, char *buf, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0)
		return -1;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash) {
		errno = ENOENT;
		return -1;
	}
	*slash = '\0';
	if (snprintf(buf, cap, "%s/%s", self, name) >= (int)cap) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}
