/* confined.c - what every process of the run has in force, for its first
 * entries (PIPELINE.md, Confinement; sfma(1), CONFINEMENT).
 *
 * Each stage sfma starts holds one end of a SOCK_SEQPACKET socket pair,
 * the planner the other (--confine-model FD, ...): a channel beside the
 * data pipes that carries nothing of the run. The stage waits there for
 * the planner's go, sent once the workspace exists, confines itself,
 * sends what is in force as one message, and closes its end. The planner
 * confines itself meanwhile, and reads each channel to its end: a stage
 * that dies first, or that was started without a channel (a run wired by
 * hand), is one that did not report. sfma's own report came with the go
 * on the handshake. */
#include "plan.h"
#include "clock.h"
#include "confine.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A stage sends one report (sfma-exec two: its own process's and its
 * tools process's); more is not read. Each confines itself in a few
 * milliseconds of the go; one that keeps its channel open without a word
 * (a program that does not know it) is not waited for longer than this. */
#define REPORTS_MAX 4
#define REPORT_BYTES 1024
#define REPORT_WAIT_MS 10000

/* The planner's own confinement, once the workspace, the evidence store
 * and memory.json are open. */
static json_t *confine_planner(const struct workspace *ws)
{
	const struct confine_places places = {.workspace = ws->m->workspace_path};
	struct confine_report r;
	confine_apply(confine_policy("sfma-plan"), &places, &r);
	return confine_report_json(&r);
}

static const char *reporter_name(int s)
{
	return s == REPORTER_TAP ? "sfma-tap" : stages[s].name;
}

json_t *confinement_take(int channel[CONFINE_REPORTERS], json_t *orchestrator, const struct workspace *ws,
                         int64_t deadline_mono)
{
	/* A run without an observer has no report of it to miss. */
	int has_tap = channel[REPORTER_TAP] >= 0;
	/* The go: one byte each; a stage gone already reads nothing of it. */
	for (int s = 0; s < CONFINE_REPORTERS; s++)
		if (channel[s] >= 0)
			send(channel[s], "g", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	json_t *out = json_array();
	if (orchestrator)
		json_array_append(out, orchestrator);
	json_array_append_new(out, confine_planner(ws));

	if (deadline_mono > mono_ms() + REPORT_WAIT_MS)
		deadline_mono = mono_ms() + REPORT_WAIT_MS;
	json_t *got[CONFINE_REPORTERS];
	int open_channels = 0;
	for (int s = 0; s < CONFINE_REPORTERS; s++) {
		got[s] = json_array();
		open_channels += channel[s] >= 0;
	}
	while (open_channels > 0 && !halt_signal) {
		struct pollfd pf[CONFINE_REPORTERS];
		int who[CONFINE_REPORTERS], n = 0;
		for (int s = 0; s < CONFINE_REPORTERS; s++)
			if (channel[s] >= 0) {
				pf[n] = (struct pollfd){.fd = channel[s], .events = POLLIN};
				who[n++] = s;
			}
		int64_t left = deadline_mono - mono_ms();
		if (left <= 0)
			break;
		int ready = poll(pf, (nfds_t)n, left > 1000 ? 1000 : (int)left);
		if (ready < 0 && errno != EINTR)
			break;
		for (int i = 0; ready > 0 && i < n; i++) {
			if (!pf[i].revents)
				continue;
			int s = who[i];
			char msg[REPORT_BYTES];
			ssize_t len = recv(channel[s], msg, sizeof msg, MSG_DONTWAIT | MSG_TRUNC);
			if (len < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			/* A message cut short (MSG_TRUNC gives its real length)
			 * does not parse: it is no report. */
			if (len > 0 && json_array_size(got[s]) < REPORTS_MAX)
				json_array_append_new(got[s], confine_report_read(msg, len < (ssize_t)sizeof msg ? (size_t)len
				                                                                               : sizeof msg,
				                                                  reporter_name(s)));
			if (len <= 0) {
				close(channel[s]);
				channel[s] = -1;
				open_channels--;
			}
		}
	}
	for (int s = 0; s < CONFINE_REPORTERS; s++) {
		if (channel[s] >= 0)
			close(channel[s]);
		channel[s] = -1;
		if (json_array_size(got[s]) == 0 && (s != REPORTER_TAP || has_tap))
			json_array_append_new(got[s], confine_unreported_json(reporter_name(s)));
		json_array_extend(out, got[s]);
		json_decref(got[s]);
	}
	return out;
}
