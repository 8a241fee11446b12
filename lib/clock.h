/* clock.h - the two clocks, named for what they are.
 *
 * wall: CLOCK_REALTIME, for timestamps a person or another machine reads
 * (anchors, outbox "at", memory runs). It can jump (NTP, the operator).
 * mono: CLOCK_MONOTONIC, for every duration, deadline and latency: it never
 * jumps, so a budget cannot be stretched or cut by setting the date. */
#ifndef SFMA_CLOCK_H
#define SFMA_CLOCK_H

#include <stdint.h>

/* Milliseconds since the epoch (realtime clock). */
int64_t wall_ms(void);
/* Milliseconds on the monotonic clock (whole, and with the fraction). */
int64_t mono_ms(void);
double mono_ms_frac(void);

/* Sleep ms milliseconds (nothing for ms <= 0), through signals;
 * async-signal-safe (nanosleep only). */
void sleep_ms(int64_t ms);

/* ms since the epoch as ISO 8601 UTC with milliseconds,
 * "2026-12-01T08:18:25.123Z", into out (at least ISO8601_LEN bytes). */
#define ISO8601_LEN 64
char *iso8601_utc(int64_t ms, char out[ISO8601_LEN]);

#endif
