/* text.c - the JSON text of host bytes, as sfma-exec makes it: the path
 * facts the replay rebuilds come through the same code. */
#include "../sfma-exec/text.c"
