/* hardtier.c - the hard tier of sfma-exec, compiled into the replay as it
 * is: the replay decides every gate with the code that decided the run. */
#include "../sfma-exec/hardtier.c"
