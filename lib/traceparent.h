/* traceparent.h - W3C Trace Context (https://www.w3.org/TR/trace-context/,
 * section 3.2 traceparent): the caller's trace a run joins. */
#ifndef SFMA_TRACEPARENT_H
#define SFMA_TRACEPARENT_H

/* 1 if s is a traceparent this runner understands: version 00,
 * "00-<32 lowercase hex trace-id>-<16 lowercase hex parent-id>-<2 hex
 * flags>", neither id all zeros (the specification calls those invalid);
 * else 0 with *why (static text) saying what is wrong. */
int traceparent_valid(const char *s, const char **why);

#endif
