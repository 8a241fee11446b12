/* buf.h - a growable byte buffer (always NUL-terminated for convenience). */
#ifndef SFMA_BUF_H
#define SFMA_BUF_H

#include <stddef.h>

struct buf {
	char *p;
	size_t len, cap;
};

/* All of these grow the buffer as needed; allocation failure is fatal (xrealloc). */
void buf_add(struct buf *b, const void *data, size_t n);
void buf_addc(struct buf *b, char c);
void buf_adds(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

#endif
