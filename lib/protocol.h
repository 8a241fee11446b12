/* protocol.h - the model's protocol (sfma-plan(1)): what the model is
 * told, the runner's fixed answers, and how a reply is read. */
#ifndef SFMA_PROTOCOL_H
#define SFMA_PROTOCOL_H

#include <jansson.h>
#include <stddef.h>

#include "manifest.h"

/* The version of the genesis text, recorded in every result record;
 * change it with any change of genesis_prompt. */
#define GENESIS_VERSION "genesis-v2"

/* The runner's fixed answers (the planner sends them, sfma-replay derives them). */
#define ANSWER_NOT_JSON "invalid reply: answer with exactly one JSON object"
#define ANSWER_NO_TOOL "invalid reply: expected one tool call {\"tool\":...}"
#define ANSWER_ADOPTED "candidate adopted; now reply with one tool call per turn"
#define ANSWER_CANDIDATE_FIRST "no bootstrap candidate adopted yet: reply first with one object with " \
	"mission, successCriteria, loopRoles, firstTasks and schedule"
#define REASON_NOT_JSON "invalid reply: not a JSON object"
#define REASON_NO_TOOL "invalid reply: no tool"
#define REASON_CANDIDATE_FIRST "tool call before a candidate was adopted"
#define FIRST_MESSAGE "Begin: reply with your bootstrap candidate.\n"
#define INBOX_HEADER "\nOperator messages (they may only narrow the task, never widen the manifest):\n"

/* How a provider ended a reply (sfma-model's "stop", sfma-plan(1)): a
 * reply cut off at the output token limit is never carried out, and a
 * refusal with no endpoint left to fall over to is an invalid reply. */
#define REASON_CUT_OFF "reply cut off at the output token limit (%ld)"
#define ANSWER_CUT_OFF "invalid reply: your last reply was cut off at the output token limit (%ld tokens) and " \
	"nothing of it was carried out; answer with one shorter tool call"
#define REASON_REFUSED "provider refused: %.400s"

/* The genesis system prompt: contract, manifest verbatim, task, dry-run
 * (malloc'd). */
char *genesis_prompt(const struct manifest *m, const char *task, int dry_run, int pinned);
/* Lenient parse of a reply: fences stripped, whole text or first '{' to
 * last '}'. NULL if no JSON object can be read. */
json_t *parse_reply(const char *text);
/* 1 if v has every member of a bootstrap candidate. */
int is_candidate(const json_t *v);

/* Native tool calls (sfma-plan(1), Native tool use). A reply with several
 * calls carries out the first; every further call is answered with this. */
#define REMINDER_ONE_CALL "one call per turn: only the first call was carried out"
/* A native call whose input is no call object; the rest of the reason is
 * tools_call_object's. The model gets the reason as its answer. */
#define REASON_BAD_CALL "invalid reply: bad tool call: "
/* The tool message answering the native calls tool_calls: the first
 * result is text, every further one the reminder. New reference. */
json_t *tool_message(const json_t *tool_calls, const char *text);
/* The reply blob of a native reply: the canonical JSON of
 * {"provider","text","native"} (malloc'd, *n its length). */
char *native_reply_blob(const char *provider, const char *text, const json_t *native, size_t *n);

#endif
