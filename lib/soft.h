/* soft.h - the soft tier's judgments (sfma-plan(1), The soft tier). */
#ifndef SFMA_SOFT_H
#define SFMA_SOFT_H

/* The first line of every soft-tier judgment request: a proxy, an
 * observer or a test server tells judgments from work by it. */
#define SOFT_VERSION "1"
#define SOFT_FIRST_LINE "sfma soft-tier judgment " SOFT_VERSION

/* A judge's reply is {"pass":bool,"reason":S}; anything else fails with this. */
#define REASON_JUDGE_INVALID "judge reply invalid"
/* The soft verdict when no judge gave a valid judgment: the task stands,
 * not a pass for certification (sfma-plan(1), The soft tier). */
#define REASON_UNJUDGED "unjudged: no valid judgment"

/* The judge the array-form mock answers as, with no call (sfma-model). */
#define MOCK_JUDGE "mock-judge"

/* The judge's and the criteria judgment's system prompts. */
extern const char soft_judge_prompt[], soft_criteria_prompt[];

/* 1 with *pass and *reason (malloc'd) set when text is a judgment, else
 * 0 with *reason REASON_JUDGE_INVALID. text may be NULL (no reply). */
int soft_judgment_parse(const char *text, int *pass, char **reason);

/* Judgments counted as they come: the verdict is their majority (a tie
 * fails), its reason the first passing judge's when it passes, else the
 * first failing one's (REASON_JUDGE_INVALID without any). soft_tally_add
 * takes why. */
struct soft_tally {
	int n, passes;
	char *reason_pass, *reason_fail;
};
void soft_tally_add(struct soft_tally *t, int pass, char *why);
int soft_tally_verdict(const struct soft_tally *t, const char **reason);
void soft_tally_free(struct soft_tally *t);

#endif
