/* The tape's lists of allocations, and the release of a layer's saved tensors after its
 * backward, some of which autograd's graph holds past it (litgpt's loss and logits
 * variables). The events, and the saved tensors themselves, are written by internal.h's
 * inline helpers (tape_take, tape_give, tape_keep), which every mechanism calls for every
 * tensor. */
#include "core/estimate/internal.h"

/* A list that cannot grow fails the whole tape: the replay returns VF_ENOMEM. */
void ids_push(struct ctx *x, struct ids *g, uint32_t id) {
  uint32_t *grown = array_grow(g->id, &g->cap, g->n + 1, sizeof *grown);
  if (!grown) {
    x->tape.rc = VF_ENOMEM;
    return;
  }
  g->id = grown;
  g->id[g->n++] = id;
}

void ids_give(struct ctx *x, struct ids *g) {
  for (size_t i = 0; i < g->n; i++) tape_give(x, g->id[i]);
  g->n = 0;
}

/* A tensor kept on its autograd node rather than saved for backward is not released by
 * the backward: it lives until the graph is freed (tape_drop_graph). */
void tape_release(struct ctx *x, struct saved *sv) {
  for (size_t i = 0; i < sv->n; i++) {
    if (sv->on_graph[i]) ids_push(x, &x->tape.graph, sv->id[i]);
    else tape_give(x, sv->id[i]);
  }
  sv->n = 0;
}

/* The training loop's variables (litgpt's loss and logits) hold the last micro batch's
 * graph until the next micro batch's loss replaces it. */
void tape_drop_graph(struct ctx *x) { ids_give(x, &x->tape.graph); }
