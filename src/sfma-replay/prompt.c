/* prompt.c - the planner's genesis prompt and reply parser, compiled into
 * the replay as they are. */
#include "../sfma-plan/prompt.c"
