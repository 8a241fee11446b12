/* suggest.h - "did you mean": the known word closest to a misspelt one. */
#ifndef SFMA_SUGGEST_H
#define SFMA_SUGGEST_H

#include <stddef.h>

/* The edit distance of a and b (optimal string alignment: insertions,
 * deletions, substitutions and transpositions of two adjacent bytes, each
 * costing 1), or limit + 1 when it exceeds limit (the work stops there).
 * Bytes compare exactly. */
size_t edit_distance(const char *a, const char *b, size_t limit);

/* The word of known (NULL-terminated) that word most likely misspells:
 * one equal to it but for ASCII case, else the nearest within edit
 * distance 2 (the first listed on a tie), else NULL. Never word itself. */
const char *suggest_word(const char *word, const char *const *known);

#endif
