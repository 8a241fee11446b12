/* soft.c - the soft tier's judgments (sfma-plan(1), The soft tier): the
 * judge's prompts, what a judgment reply must be, and the majority. */
#include "soft.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "protocol.h"

const char soft_judge_prompt[] =
	SOFT_FIRST_LINE "\n"
	"You judge one task of an agent run, which another model did. You get the run's mission, its success "
	"criteria, the task, the summary its worker gave and the declared outputs as they are now (clipped). "
	"Decide whether the task was really done. Reply with exactly one JSON object and nothing else: "
	"{\"pass\":true|false,\"reason\":\"one sentence\"}.\n";

const char soft_criteria_prompt[] =
	SOFT_FIRST_LINE "\n"
	"You judge the success criteria of a finished agent run. You get the mission, the criteria, every task "
	"with its soft-tier verdict and the ids of its trace entries, and the declared outputs (clipped). Reply "
	"with exactly one JSON object and nothing else: {\"criteria\":[{\"criterion\":S,\"pass\":true|false,"
	"\"evidence\":[entry ids]}...]}, one element per criterion, in their order.\n";

int soft_judgment_parse(const char *text, int *pass, char **reason)
{
	json_t *v = text ? parse_reply(text) : NULL;
	json_t *p = json_object_get(v, "pass"), *why = json_object_get(v, "reason");
	int ok = json_is_boolean(p) && json_is_string(why);
	*pass = ok && json_is_true(p);
	*reason = xstrdup(ok ? json_string_value(why) : REASON_JUDGE_INVALID);
	json_decref(v);
	return ok;
}

/* The majority of n judgments of which passes passed: a tie fails. */
static int soft_majority(int passes, int n)
{
	return 2 * passes > n;
}

void soft_tally_add(struct soft_tally *t, int pass, char *why)
{
	t->n++;
	t->passes += pass != 0;
	char **keep = pass ? &t->reason_pass : &t->reason_fail;
	if (!*keep)
		*keep = why;
	else
		free(why);
}

int soft_tally_verdict(const struct soft_tally *t, const char **reason)
{
	int pass = soft_majority(t->passes, t->n);
	*reason = pass ? t->reason_pass : t->reason_fail ? t->reason_fail : REASON_JUDGE_INVALID;
	return pass;
}

void soft_tally_free(struct soft_tally *t)
{
	free(t->reason_pass);
	free(t->reason_fail);
	*t = (struct soft_tally){0};
}

