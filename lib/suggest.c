/* suggest.c - "did you mean": the known word closest to a misspelt one. */
#include "suggest.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "errors.h"

size_t edit_distance(const char *a, const char *b, size_t limit)
{
	size_t n = strlen(a), m = strlen(b);
	/* The distance is at least the difference of the lengths. */
	if ((n > m ? n - m : m - n) > limit)
		return limit + 1;
	/* Three rows of the dynamic programme: two back (for a transposition),
	 * the last and the one being filled. */
	size_t *rows = xcalloc(3 * (m + 1), sizeof *rows);
	size_t *back2 = rows, *back = rows + m + 1, *cur = rows + 2 * (m + 1);
	for (size_t j = 0; j <= m; j++)
		back[j] = j;
	size_t best = n == 0 ? m : limit + 1;
	for (size_t i = 1; i <= n; i++) {
		cur[0] = i;
		size_t row_min = cur[0];
		for (size_t j = 1; j <= m; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t d = back[j - 1] + cost;
			if (back[j] + 1 < d)
				d = back[j] + 1;
			if (cur[j - 1] + 1 < d)
				d = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && back2[j - 2] + 1 < d)
				d = back2[j - 2] + 1;
			cur[j] = d;
			if (d < row_min)
				row_min = d;
		}
		best = cur[m];
		/* Every later row is at least this row's least value. */
		if (row_min > limit) {
			best = limit + 1;
			break;
		}
		size_t *t = back2;
		back2 = back;
		back = cur;
		cur = t;
	}
	free(rows);
	return best > limit ? limit + 1 : best;
}

const char *suggest_word(const char *word, const char *const *known)
{
	for (const char *const *k = known; *k; k++)
		if (strcasecmp(word, *k) == 0 && strcmp(word, *k) != 0)
			return *k;
	const char *best = NULL;
	size_t best_d = 3;
	for (const char *const *k = known; *k; k++) {
		size_t d = edit_distance(word, *k, 2);
		if (d > 0 && d < best_d) {
			best = *k;
			best_d = d;
		}
	}
	return best;
}
