/* blackboard.h - the tasks loops share (sfma-plan(1), Loops). */
#ifndef SFMA_BLACKBOARD_H
#define SFMA_BLACKBOARD_H

#include <jansson.h>
#include <stddef.h>

/* Task tool refusals. */
#define REASON_PENDING_CEILING "pending task ceiling"
#define REASON_DUPLICATE_TASK "duplicate task id"

/* The blackboard's task {"id","description","role","class"} (new). */
json_t *task_def(const char *id, const char *description, const json_t *role, const char *cls);
/* The adopted candidate's firstTasks as the blackboard's first tasks:
 * ids made unique (t<i> for a missing or reused one); none: the run's task
 * itself, "main". New reference. */
json_t *first_tasks(const json_t *candidate, const char *task);
/* The first message of a loop's conversation (malloc'd). */
char *assigned_task_text(const json_t *def, int loop, const char *clarification);
/* The gate of a task post against the tasks so far (defs) and the pending
 * count: 1 and "task posted", or 0 and the refusal, in reason. */
int task_post_check(const json_t *call, const json_t *defs, size_t pending, long max_pending, char *reason,
                    size_t n);

#endif
