/* "Did you mean": the catalogue names closest to a name that was mistyped, shared by the
 * GPU catalogue and the model catalogue. */
#ifndef VF_BASE_CLOSEST_H
#define VF_BASE_CLOSEST_H

#include <stddef.h>

#define CLOSEST_NAME 64 /* longest folded name compared, and longest name listed */
#define CLOSEST_MAX 64  /* entries kept */
#define CLOSEST_SHOWN 6 /* entries listed */

/* Lower case, without the separators people vary: "RTX 4090" == "rtx-4090" == "rtx4090",
 * "Qwen2_5-7B" == "qwen2.5-7b". Writes at most size - 1 characters. */
void name_fold(const char *s, size_t len, char *out, size_t size);

struct closest_name {
  size_t distance, order;
  char name[CLOSEST_NAME];
};

struct closest {
  char want[CLOSEST_NAME]; /* what was typed, folded */
  size_t n;
  struct closest_name c[CLOSEST_MAX];
};

/* Starts a search for the names closest to text. */
void closest_start(struct closest *s, const char *text, size_t len);
/* Offers one spelling of the entry listed as name (folded: name_fold). Its distance from
 * what was typed is 0 when it contains it ("a100" in "a100-80gb"), else the edit distance;
 * the spellings of an entry are offered one after another, and the entry stands at the
 * nearest. Kept within a third of what was typed, so that unrelated names never show. */
void closest_offer(struct closest *s, const char *name, const char *folded);
/* Writes the nearest names offered into list, comma-separated, in the order offered among
 * equals; returns how many. Only those at the least distance are listed: one typo should
 * name one entry, not its neighbours ("qwen2.5-7b-instrct": qwen2.5-7b, not
 * qwen2.5-72b). */
size_t closest_list(struct closest *s, char *list, size_t size);

#endif
