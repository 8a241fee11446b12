/* tools-standin.c - the same stand-in for lib/tools.c as the planner's. */
#include "../sfma-plan/tools-standin.c"
