/* linediff.c - a unified diff of two texts (linediff.h): Myers' O(ND)
 * greedy search for the fewest edits, between the common head and tail,
 * with the diagonals of each step kept for the way back (O(D^2) memory,
 * D bounded). */
#include "linediff.h"

#include "errors.h"

#include <stdlib.h>
#include <string.h>

struct line {
	const char *p;
	size_t len;  /* without its newline */
	int nl;      /* ends in a newline */
};

/* The lines of s[0..n), at most LINEDIFF_MAX_LINES (*cut set when more). */
static struct line *split_lines(const char *s, size_t n, size_t *count, int *cut)
{
	size_t cap = 16, k = 0;
	struct line *l = xmalloc(cap * sizeof *l);
	for (size_t i = 0; i < n;) {
		if (k == LINEDIFF_MAX_LINES) {
			*cut = 1;
			break;
		}
		const char *nl = memchr(s + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (s + i)) : n - i;
		if (k == cap) {
			cap *= 2;
			l = xrealloc(l, cap * sizeof *l);
		}
		l[k++] = (struct line){s + i, len, nl != NULL};
		i += len + (nl != NULL);
	}
	*count = k;
	return l;
}

static int same(const struct line *a, const struct line *b)
{
	return a->len == b->len && a->nl == b->nl && memcmp(a->p, b->p, a->len) == 0;
}

enum op { EQ, DEL, INS };

struct script {
	unsigned char *op;
	size_t n, cap;
};

static void push(struct script *s, enum op op)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->op = xrealloc(s->op, s->cap);
	}
	s->op[s->n++] = (unsigned char)op;
}

/* The edits turning a[0..an) into b[0..bn), appended to s in order; a
 * search past LINEDIFF_MAX_EDITS gives every line removed, then added. */
static void myers(const struct line *a, long an, const struct line *b, long bn, struct script *s)
{
	long max = an + bn < LINEDIFF_MAX_EDITS ? an + bn : LINEDIFF_MAX_EDITS;
	/* trail[d] holds V[k] for k = -d..d (index k + d) after step d. */
	long **trail = xcalloc((size_t)max + 1, sizeof *trail);
	long *v = xcalloc(2 * (size_t)max + 3, sizeof *v), off = max + 1;
	long found = -1;
	for (long d = 0; d <= max && found < 0; d++) {
		for (long k = -d; k <= d; k += 2) {
			long x = k == -d || (k != d && v[off + k - 1] < v[off + k + 1]) ? v[off + k + 1]
			                                                              : v[off + k - 1] + 1;
			long y = x - k;
			while (x < an && y < bn && same(&a[x], &b[y]))
				x++, y++;
			v[off + k] = x;
			if (x >= an && y >= bn)
				found = d;
		}
		trail[d] = xmalloc((2 * (size_t)d + 1) * sizeof **trail);
		for (long k = -d; k <= d; k++)
			trail[d][k + d] = v[off + k];
	}
	if (found < 0) {
		for (long i = 0; i < an; i++)
			push(s, DEL);
		for (long i = 0; i < bn; i++)
			push(s, INS);
	} else {
		/* Back from (an, bn): each step is one edit after a snake. */
		struct script rev = {0};
		long x = an, y = bn;
		for (long d = found; d > 0; d--) {
			long k = x - y;
			const long *prev = trail[d - 1];
			long down = k == -d || (k != d && prev[k - 1 + d - 1] < prev[k + 1 + d - 1]);
			long pk = down ? k + 1 : k - 1;
			long px = prev[pk + d - 1], py = px - pk;
			long sx = down ? px : px + 1; /* where the snake began */
			while (x > sx)
				push(&rev, EQ), x--, y--;
			push(&rev, down ? INS : DEL);
			x = px, y = py;
		}
		while (x > 0)
			push(&rev, EQ), x--;
		for (size_t i = rev.n; i > 0; i--)
			push(s, (enum op)rev.op[i - 1]);
		free(rev.op);
	}
	for (long d = 0; d <= max; d++)
		free(trail[d]);
	free(trail);
	free(v);
}

struct writer {
	struct buf *out;
	size_t max, shown, left_out;
};

static void emit(struct writer *w, char sign, const struct line *l)
{
	if (w->max && w->shown >= w->max) {
		w->left_out++;
		return;
	}
	w->shown++;
	buf_addc(w->out, sign);
	buf_add(w->out, l->p, l->len);
	buf_addc(w->out, '\n');
	if (!l->nl)
		buf_adds(w->out, "\\ No newline at end of file\n");
}

void line_diff(struct buf *out, const char *o, size_t on, const char *n, size_t nn, int context, size_t max_lines,
               struct linediff_stats *st)
{
	memset(st, 0, sizeof *st);
	size_t an, bn;
	struct line *a = split_lines(o, on, &an, &st->truncated), *b = split_lines(n, nn, &bn, &st->truncated);
	size_t head = 0;
	while (head < an && head < bn && same(&a[head], &b[head]))
		head++;
	size_t tail = 0;
	while (tail < an - head && tail < bn - head && same(&a[an - 1 - tail], &b[bn - 1 - tail]))
		tail++;
	struct script s = {0};
	for (size_t i = 0; i < head; i++)
		push(&s, EQ);
	myers(a + head, (long)(an - head - tail), b + head, (long)(bn - head - tail), &s);
	for (size_t i = 0; i < tail; i++)
		push(&s, EQ);
	if (context < 0)
		context = 0;
	struct writer w = {out, max_lines, 0, 0};
	/* Hunks: runs of edits with up to `context` equal lines around,
	 * joined when two are closer than twice that. */
	size_t i = 0, ai = 0, bi = 0;
	while (i < s.n) {
		if (s.op[i] == EQ) {
			i++, ai++, bi++;
			continue;
		}
		size_t lead = ai < (size_t)context ? ai : (size_t)context;
		size_t start = i - lead, end = i;
		/* extend over edits and short runs of equal lines */
		for (;;) {
			while (end < s.n && s.op[end] != EQ)
				end++;
			size_t eq = end;
			while (eq < s.n && s.op[eq] == EQ && eq - end <= 2 * (size_t)context)
				eq++;
			if (eq < s.n && s.op[eq] != EQ && eq - end <= 2 * (size_t)context)
				end = eq;
			else
				break;
		}
		size_t trail = 0;
		while (end + trail < s.n && s.op[end + trail] == EQ && trail < (size_t)context)
			trail++;
		end += trail;
		size_t a0 = ai - lead, b0 = bi - lead, ac = 0, bc = 0;
		for (size_t k = start; k < end; k++) {
			ac += s.op[k] != INS;
			bc += s.op[k] != DEL;
		}
		if (!w.max || w.shown < w.max) {
			buf_printf(out, "@@ -%zu,%zu +%zu,%zu @@\n", ac ? a0 + 1 : a0, ac, bc ? b0 + 1 : b0, bc);
			w.shown++;
		} else {
			w.left_out++;
		}
		size_t x = a0, y = b0;
		for (size_t k = start; k < end; k++) {
			if (s.op[k] == EQ) {
				emit(&w, ' ', &a[x]);
				x++, y++;
			} else if (s.op[k] == DEL) {
				emit(&w, '-', &a[x]);
				x++;
				st->removed++;
			} else {
				emit(&w, '+', &b[y]);
				y++;
				st->added++;
			}
		}
		ai = x, bi = y, i = end;
	}
	if (w.left_out)
		buf_printf(out, "... %zu more line%s of diff\n", w.left_out, w.left_out == 1 ? "" : "s");
	st->shown = w.shown;
	st->left_out = w.left_out;
	free(s.op);
	free(a);
	free(b);
}
