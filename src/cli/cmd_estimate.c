/* vramfit estimate MODEL [options]: peak GPU memory of the training run. */
#include <string.h>

#include "cli/estimate_plot.h"
#include "cli/history_cli.h"
#include "cli/setup_config.h"

static const char usage[] =
    "usage: vramfit estimate MODEL [options]\n"
    "       vramfit estimate CONFIG [more configs] [MODEL] [options]\n\n"
    "Peak GPU memory of the training run (loading the weights, two optimizer steps,\n"
    "validation where the run validates, saving the checkpoint), as\n"
    "torch.cuda.max_memory_allocated(), max_memory_reserved() and nvidia-smi see it,\n"
    "with a breakdown at the peak.\n\n"
    "MODEL may be the training config itself (HF TrainingArguments or TRL, axolotl,\n"
    "LLaMA-Factory, torchtune, litgpt, Lightning, Hydra; a DeepSpeed or accelerate config as\n"
    "a further file): the model and the setup are read from it, each value with its file\n"
    "and line, and the options below override them.\n\n"
    "  --format F           the training config's tool, where its keys do not tell: hf, trl,\n"
    "                       trl-grpo, axolotl, llamafactory, torchtune, litgpt, lightning,\n"
    "                       hydra, deepspeed, accelerate\n"
    "  --batch N            micro batch per GPU (1)\n"
    "  --seq N              tokens per sample, the longest in the batch (2048)\n"
    "  --lengths L          fixed (every batch --seq long: packed or fixed-length data) |\n"
    "                       varied (each batch padded to its longest sample; the caching\n"
    "                       allocator then reserves more) (the framework's recipes) |\n"
    "                       varied:MEAN,MAX (padded batches of samples MEAN tokens long on\n"
    "                       average, MAX at most) | varied:FILE (a histogram of the dataset's\n"
    "                       sample lengths: a line 'LENGTH COUNT' per length)\n"
    "  --eval E             yes | no: the run validates (a no_grad forward over a batch of the\n"
    "                       micro batch's size, optimizer states alive) (the framework's loop:\n"
    "                       litgpt's scripts and Megatron validate, the others do not)\n"
    "  --accumulation N     micro batches per optimizer step; gradients persist between them\n"
    "                       (the framework's stock recipes: litgpt 4, torchtune 8, the others 1)\n"
    "  --task T             causal-lm | seq-classification | masked-lm\n"
    "  --framework F        hf | litgpt | torchtune | lightning | deepspeed | megatron | torchtitan (hf);\n"
    "                       F@VERSION for an older release (hf@4.46) or a month between releases\n"
    "                       (litgpt@2024-04): the newest release the profile describes not after it\n"
    "  --torch V            the PyTorch release of the run (2.1); behaviours that changed between\n"
    "                       releases follow it (the one the framework release was used with)\n"
    "  --weights D          dtype the weights are stored in: fp32 | bf16 | fp16 (fp32)\n"
    "  --amp D              autocast compute dtype: none | bf16 | fp16 (none)\n"
    "  --optimizer O        adamw | adamw-8bit | paged-adamw-8bit | adafactor | sgd |\n"
    "                       sgd-momentum | lion | none (adamw)\n"
    "  --loss L             default (the framework's) | chunked (the logits' cross-entropy one\n"
    "                       chunk at a time) | fused (Liger's fused linear cross-entropy) | cce\n"
    "                       (Cut Cross-Entropy): the last two never make the logits whole\n"
    "  --optimizer-in-bwd Y yes | no: each parameter's optimizer steps in the backward as soon\n"
    "                       as its gradient is made, which then goes (torchtune's\n"
    "                       optimizer_in_bwd; full fine-tuning, accumulation 1) (no)\n"
    "  --compile Y          yes | no: the run uses torch.compile (torchtitan's training.compile,\n"
    "                       torchtune's compile): the loss and the layers keep what their\n"
    "                       compiled graphs keep, where the framework compiles them; the\n"
    "                       rest as eager runs it (no)\n"
    "  --method M           full | lora | qlora | dora | adapter | adapter-v2 (full)\n"
    "  --lora-r N           LoRA rank (8)\n"
    "  --lora-targets L     comma list of q,k,v,o,gate,up,down,head, or all-linear (q,v)\n"
    "  --quant Q            none | nf4 | nf4-dq | int8 (qlora implies nf4-dq)\n"
    "  --grad-ckpt G        none | full | selective (none)\n"
    "  --attention A        eager | sdpa | flash (the framework's default)\n"
    "  --gpus N             GPUs in all (1): the data-parallel ones, times tp x pp x cp\n"
    "  --shard S            none | zero1 | zero2 | zero3 | fsdp | hsdp (none)\n"
    "  --dp-replicate N     hsdp: replicas, each sharding over its share of the data-parallel GPUs\n"
    "  --offload O          none | optimizer | params | activations (comma list)\n"
    "  --tp N, --pp N, --cp N   tensor / pipeline / context parallel sizes (1); --gpus is\n"
    "                       their product times the data-parallel replicas\n"
    "  --ep N               expert parallel size: each GPU holds experts / N of an MoE layer's\n"
    "                       experts, tokens sent to them and back (1)\n"
    "  --pp-schedule S      gpipe | 1f1b | interleaved-1f1b (the framework's); with --pp the\n"
    "                       micro batches of a step (--accumulation) are the pipeline's\n"
    "  --sequence-parallel Y  yes | no: tensor parallelism splits the norms' and residuals'\n"
    "                       tokens too (the framework's: torchtitan yes, Megatron no)\n"
    "  --gpu G              catalogue GPU (a100-40gb, rtx-4090, ...), a size (24GiB, 80GB)\n"
    "  --alloc-conf S       PYTORCH_CUDA_ALLOC_CONF to model (default: the environment's)\n"
    "  --json               machine-readable output\n"
    "  --events FILE        write the replayed events (every layer; the allocations and frees\n"
    "                       and the streams': record_stream, CUDA events, waits) to FILE, in\n"
    "                       the format of 'vramfit trace --events', to compare the two\n"
    "  --calibrate          scale the batch-dependent part (activations, temporaries) by what\n"
    "                       a run of this setup measured here ('vramfit history')\n"
    "  --plot FILE.svg      draw the replayed run (every layer) as an SVG image: allocated and\n"
    "                       reserved memory event by event, the phases, the peak and its\n"
    "                       breakdown, the GPU's capacity\n\n"
    "When this setup was measured on this machine ('vramfit probe --model ...'), the output\n"
    "says how far the estimate was from it.\n\n"
    "Each peak comes with a range: how far the estimator has missed on measured runs of\n"
    "similar setups (the framework and the kind of method; data/uncertainty.json). The fit\n"
    "is judged on the high end of the nvidia-smi range.\n\n"
    "Exit status: 0, or 1 when --gpu is given and the high end of the peak does not fit.\n";

enum { O_JSON = O_SETUP_END, O_HELP, O_EVENTS, O_CALIBRATE, O_PLOT };

static const struct option opts[] = {SETUP_OPTIONS, CONFIG_OPTIONS, {"json", no_argument, NULL, O_JSON},
                                     {"events", required_argument, NULL, O_EVENTS},
                                     {"plot", required_argument, NULL, O_PLOT},
                                     {"help", no_argument, NULL, O_HELP},
                                     {"calibrate", no_argument, NULL, O_CALIBRATE}, {NULL, 0, NULL, 0}};

/* What stood in for a version older than every release described, and a value given that the
 * framework changes (accelerate upcasts FSDP's trainable 16-bit weights under mixed precision;
 * soft-capped attention runs eager). */
static json_t *setup_notes(const struct setup_request *r, const struct setup_context *c,
                           const struct vf_profile_info *p) {
  json_t *notes = json_array();
  char line[256];
  if (p->release_predates) {
    snprintf(line, sizeof line, "%s predates the releases the %s profile describes: its oldest, %s (%s), stands in",
             r->framework, p->name, p->release, p->date);
    json_array_append_new(notes, json_string(line));
  }
  if (p->torch_predates) {
    snprintf(line, sizeof line, "torch %s predates the PyTorch releases described: the oldest stands in", p->torch);
    json_array_append_new(notes, json_string(line));
  }
  struct vf_setup used = r->setup;
  vf_setup_resolve(&used, &c->model, c->profile);
  if (r->setup.weights != VF_PREC_NONE && used.weights != r->setup.weights) {
    snprintf(line, sizeof line, "--weights %s: %s %s keeps the trainable weights in %s under FSDP with mixed precision",
             vf_enum_name(VF_ENUM_PRECISION, r->setup.weights), p->name, p->release,
             vf_enum_name(VF_ENUM_PRECISION, used.weights));
    json_array_append_new(notes, json_string(line));
  }
  if (used.lengths == VF_LENGTHS_VARIED && !used.length_dist.n) {
    snprintf(line, sizeof line, "lengths varied: the samples' lengths were not given; assumed spread evenly up to "
             "--seq %llu (--lengths varied:MEAN,MAX or varied:FILE gives them)", (unsigned long long)used.seq);
    json_array_append_new(notes, json_string(line));
  }
  if (r->setup.attention != VF_ATTN_DEFAULT && used.attention != r->setup.attention) {
    snprintf(line, sizeof line, "--attention %s: %s %s runs %s's soft-capped attention on the %s path",
             vf_enum_name(VF_ENUM_ATTENTION, r->setup.attention), p->name, p->release, c->model.name,
             vf_enum_name(VF_ENUM_ATTENTION, used.attention));
    json_array_append_new(notes, json_string(line));
  }
  return notes;
}

/* What --compile yes changed, and what it did not. */
static void compile_note(const struct vf_setup *s, const struct vf_estimate *e, const struct vf_profile_info *p,
                         json_t *notes) {
  if (s->compile != VF_COMPILE_YES) return;
  const char *loss = e->loss_compiled ? "the loss is compiled"
                     : p->compiled_loss ? "the loss is eager's (what the framework compiles here, a tensor-parallel "
                                          "loss or one over chunks of positions, is not modelled)"
                                        : "the loss is eager's (the framework does not compile it, or vramfit "
                                          "does not model how it does)";
  const char *layers = p->compiled_layers ? "the layers keep what their compiled graphs keep"
                                          : "the layers are eager's (what the framework compiles was not checked)";
  char line[400];
  snprintf(line, sizeof line, "--compile yes: %s; %s; what Inductor fuses of the temporaries is not modelled "
           "(eager's, higher)", loss, layers);
  json_array_append_new(notes, json_string(line));
}

/* What the replay met on the GPU given: its size reached, the allocator's cache freed. */
static void gpu_notes(const struct vf_estimate *e, json_t *notes) {
  char line[320], cap[32];
  cli_format_bytes(e->allocator_capacity, cap, sizeof cap);
  if (e->out_of_memory) {
    snprintf(line, sizeof line, "out of memory: past the %s the GPU leaves the allocator beside the CUDA "
             "context, even once it frees its cache; the figures go on as on a larger GPU", cap);
    json_array_append_new(notes, json_string(line));
  } else if (e->cache_releases) {
    snprintf(line, sizeof line, "the allocator fills the %s the GPU leaves it and frees its cached blocks to go on "
             "(%llu times), as PyTorch's does before it raises out of memory: a larger GPU would reserve more",
             cap, (unsigned long long)e->cache_releases);
    json_array_append_new(notes, json_string(line));
  }
}

/* The parallel layout and the pipeline rank the figures are for. */
static json_t *layout_json(const struct vf_setup *s, const struct vf_estimate *e) {
  uint64_t model_parallel = s->tp * s->pp * s->cp;
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:b, s:I, s:I, s:f}", "gpus", (json_int_t)s->gpus, "dp",
                   (json_int_t)(s->gpus / model_parallel), "tp", (json_int_t)s->tp, "pp", (json_int_t)s->pp, "cp",
                   (json_int_t)s->cp, "ep", (json_int_t)s->ep, "pp_schedule",
                   vf_enum_name(VF_ENUM_PP_SCHEDULE, e->pp_schedule),
                   "sequence_parallel", e->sequence_parallel, "peak_rank", (json_int_t)e->pp_rank, "peak_rank_layers",
                   (json_int_t)e->pp_rank_layers, "micro_batches_in_flight", e->pp_in_flight);
}

/* "tp 8 with sequence parallelism x pp 8 x dp 8 = 512 GPUs", and with a pipeline the rank
 * whose peak is shown. */
static void layout_text(const struct vf_setup *s, const struct vf_estimate *e) {
  if (s->tp == 1 && s->pp == 1 && s->cp == 1 && s->ep == 1) return;
  typedef unsigned long long ull;
  printf("layout: ");
  if (s->tp > 1) printf("tp %llu%s x ", (ull)s->tp, e->sequence_parallel ? " with sequence parallelism" : "");
  if (s->pp > 1) printf("pp %llu x ", (ull)s->pp);
  if (s->cp > 1) printf("cp %llu x ", (ull)s->cp);
  printf("dp %llu = %llu GPUs", (ull)(s->gpus / (s->tp * s->pp * s->cp)), (ull)s->gpus);
  if (s->ep > 1) printf(", experts over ep %llu", (ull)s->ep);
  printf("\n");
  if (s->pp == 1) return;
  bool last = e->pp_rank + 1 == s->pp;
  const char *part = e->pp_rank == 0 ? "first stage: the embedding and " : last ? "last stage: " : "";
  printf("pipeline: %s, %llu micro batch%s; the peak is rank %llu's (%s%llu blocks%s), %.3g micro batch%s in flight\n",
         vf_enum_name(VF_ENUM_PP_SCHEDULE, e->pp_schedule), (ull)e->accumulation, e->accumulation == 1 ? "" : "es",
         (ull)e->pp_rank, part, (ull)e->pp_rank_layers, last ? ", the head and the loss" : "",
         e->pp_in_flight, e->pp_in_flight == 1.0 ? "" : "es");
}

/* An estimate's peaks with their ranges, from the group of setups whose measured spread
 * gave them. */
struct shown {
  const struct vf_estimate *e;
  struct vf_ranges ranges;
  const char *group;
};

static json_t *range_json(const struct vf_range *r) {
  return json_pack("{s:I, s:I}", "low", (json_int_t)r->low, "high", (json_int_t)r->high);
}

static json_t *peak_json(const struct shown *p) {
  const struct vf_estimate *e = p->e;
  json_t *o = json_pack("{s:I, s:I, s:I, s:s}", "allocated_bytes", (json_int_t)e->allocated_peak, "reserved_bytes",
                        (json_int_t)e->reserved_peak, "device_bytes", (json_int_t)e->device_peak, "phase",
                        vf_phase_name(e->peak_phase));
  for (int k = 0; k < VF_PEAK_COUNT; k++) {
    char key[32];
    snprintf(key, sizeof key, "%s_range", vf_peak_kind_name((enum vf_peak_kind)k));
    json_object_set_new(o, key, range_json(&p->ranges.kind[k]));
  }
  json_object_set_new(o, "range_group", json_string(p->group));
  return o;
}

/* Whether the device peak fits capacity: judged on the high end of its range. */
static bool fits_high(const struct shown *p, uint64_t capacity) {
  return p->ranges.kind[VF_PEAK_DEVICE].high <= capacity;
}

static json_t *estimate_json(const struct setup_context *c, const struct shown *shown, uint64_t capacity,
                             const struct setup_request *r, const struct vf_profile_info *p) {
  const struct vf_model *m = &c->model;
  const struct vf_estimate *e = shown->e;
  json_t *timeline = json_array();
  for (int ph = VF_PHASE_LOAD; ph < VF_PHASE_COUNT; ph++) {
    if (ph == VF_PHASE_EVAL && e->eval != VF_EVAL_YES) continue; /* a phase the run does not have */
    json_array_append_new(timeline, json_pack("{s:s, s:I, s:I}", "phase", vf_phase_name((enum vf_phase)ph),
                                              "allocated_bytes", (json_int_t)e->phase_allocated[ph],
                                              "reserved_bytes", (json_int_t)e->phase_reserved[ph]));
  }
  json_t *o = json_object();
  json_object_set_new(o, "model", json_pack("{s:s, s:I, s:I}", "name", m->name, "params", (json_int_t)e->params,
                                            "trainable_params", (json_int_t)e->trainable_params));
  json_object_set_new(o, "peak", peak_json(shown));
  json_object_set_new(o, "breakdown", cli_breakdown_json(e));
  json_object_set_new(o, "timeline", timeline);
  json_object_set_new(o, "layout", layout_json(&r->setup, e));
  json_object_set_new(o, "setup", setup_values_json(r, c));
  json_object_set_new(o, "assumed", setup_assumed_json(r, c));
  json_object_set_new(o, "read_from", setup_read_from_json(r));
  json_t *notes = setup_notes(r, c, p);
  gpu_notes(e, notes);
  compile_note(&r->setup, e, p, notes);
  json_object_set_new(o, "notes", notes);
  json_object_set_new(o, "capacity_bytes", capacity ? json_integer((json_int_t)capacity) : json_null());
  json_object_set_new(o, "fits", capacity ? json_boolean(fits_high(shown, capacity)) : json_null());
  return o;
}

/* "18.18 - 24.88 GiB", the unit once when both ends share it. */
static void format_range(const struct vf_range *r, char *buf, size_t size) {
  char low[32], high[32];
  cli_format_bytes(r->low, low, sizeof low);
  cli_format_bytes(r->high, high, sizeof high);
  char *unit_low = strchr(low, ' ');
  const char *unit_high = strchr(high, ' ');
  if (unit_low && unit_high && strcmp(unit_low, unit_high) == 0) *unit_low = '\0';
  snprintf(buf, size, "%s - %s", low, high);
}

/* One figure; range: its range, or NULL. */
static void row(const char *label, uint64_t bytes, const struct vf_range *range, uint64_t capacity) {
  char human[32], of_gpu[16] = "", in_range[80] = "";
  cli_format_bytes(bytes, human, sizeof human);
  if (capacity) snprintf(of_gpu, sizeof of_gpu, "  %5.1f%%", 100.0 * (double)bytes / (double)capacity);
  if (range) {
    char r[72];
    format_range(range, r, sizeof r);
    snprintf(in_range, sizeof in_range, "  (%s)", r);
  }
  printf("  %-22s %12s%s%s\n", label, human, of_gpu, in_range);
}

/* The verdict, on the high end of the device range: fits even there; fits at the estimate
 * but not at the high end (too close to call: exit 1 all the same); does not fit. */
static void verdict(const struct shown *p, const struct vf_gpu_spec *gpu) {
  uint64_t cap = gpu->capacity_bytes, point = p->e->device_peak, high = p->ranges.kind[VF_PEAK_DEVICE].high;
  char capacity[32], room[32], at_high[32], at_point[32];
  cli_format_bytes(cap, capacity, sizeof capacity);
  cli_format_bytes(high, at_high, sizeof at_high);
  cli_format_bytes(point, at_point, sizeof at_point);
  bool fits = high <= cap, close = !fits && point <= cap, color = cli_use_color(stdout);
  const char *on = gpu->name[0] ? gpu->name : "the GPU";
  printf("\n%s%s%s on %s (%s)", color ? (fits ? "\033[32m" : close ? "\033[33m" : "\033[31m") : "",
         fits ? "fits" : "does not fit", color ? "\033[0m" : "", on, capacity);
  const struct vf_estimate *e = p->e;
  char live[32], usable[32];
  cli_format_bytes(p->ranges.kind[VF_PEAK_ALLOCATED].high, live, sizeof live);
  cli_format_bytes(e->allocator_capacity, usable, sizeof usable);
  if (fits && e->cache_releases) {
    printf(" once the allocator frees its cache: the tensors reach %s at the high end, of the %s it can hand out\n",
           live, usable);
  } else if (fits) {
    cli_format_bytes(cap - high, room, sizeof room);
    printf(" even at the high end, %s: %s to spare\n", at_high, room);
  } else if (e->out_of_memory && e->allocated_peak > e->allocator_capacity) {
    cli_format_bytes(e->allocated_peak, live, sizeof live);
    printf(": %s of tensors at the peak, more than the %s its allocator can hand out\n", live, usable);
  } else if (e->out_of_memory) {
    printf(": out of memory even with the allocator's cache freed, its %s cut into blocks too small\n", usable);
  } else if (close) {
    cli_format_bytes(high - cap, room, sizeof room);
    printf(" at the high end, %s: %s short; the estimate itself, %s, fits, with too little room for "
           "the estimator's error\n", at_high, room, at_point);
  } else {
    cli_format_bytes(point - cap, room, sizeof room);
    printf(": %s short\n", room);
  }
}

static void estimate_text(const struct setup_context *c, const struct setup_config *sc, const struct shown *shown,
                          const struct setup_request *r, const struct vf_profile_info *p) {
  const struct vf_model *m = &c->model;
  const struct vf_gpu_spec *gpu = &c->gpu;
  const struct vf_estimate *e = shown->e;
  uint64_t cap = gpu->capacity_bytes;
  char total[32], trainable[32];
  cli_group_digits(e->params, total, sizeof total);
  cli_group_digits(e->trainable_params, trainable, sizeof trainable);
  printf("%s: %s parameters, %s trainable\n", m->name, total, trainable);
  /* A distribution of sample lengths is named as it was given. */
  const char *lengths = r->lengths_spec && e->lengths == VF_LENGTHS_VARIED ? r->lengths_spec
                                                                          : vf_enum_name(VF_ENUM_LENGTHS, e->lengths);
  printf("%s %s (torch %s): %s attention, %llu micro batch%s per optimizer step, %s lengths%s\n", p->name,
         p->release, p->torch, vf_enum_name(VF_ENUM_ATTENTION, e->attention), (unsigned long long)e->accumulation,
         e->accumulation == 1 ? "" : "es", lengths, e->eval == VF_EVAL_YES ? ", validation after the steps" : "");
  setup_config_print(r, c, sc);
  setup_assumed_print(r, c);
  json_t *notes = setup_notes(r, c, p), *note;
  gpu_notes(e, notes);
  compile_note(&r->setup, e, p, notes);
  size_t i;
  json_array_foreach(notes, i, note) printf("note: %s\n", json_string_value(note));
  json_decref(notes);
  layout_text(&r->setup, e);
  printf("\n");
  if (e->peak_phase == VF_PHASE_LOAD)
    printf("the peak is while loading the weights%s\n\n",
           p->fsdp_full_load && vf_shard_fsdp(r->setup.shard)
               ? " under FSDP: loading a full checkpoint gathers the whole model on every GPU" : "");
  printf("  at the peak (%s)%s\n", vf_phase_name(e->peak_phase), cap ? "        bytes   of GPU" : "");
  for (int k = 0; k < VF_CAT_RUNTIME; k++) row(vf_category_name((enum vf_category)k), e->by_category[k], NULL, cap);
  row("allocator slack", e->allocator_slack, NULL, cap);
  row("CUDA, cuBLAS, NCCL", e->by_category[VF_CAT_RUNTIME] + e->context, NULL, cap);
  printf("\n");
  row("max_memory_allocated", e->allocated_peak, &shown->ranges.kind[VF_PEAK_ALLOCATED], cap);
  row("max_memory_reserved", e->reserved_peak, &shown->ranges.kind[VF_PEAK_RESERVED], cap);
  row("nvidia-smi (device)", e->device_peak, &shown->ranges.kind[VF_PEAK_DEVICE], cap);
  printf("  (ranges: how far off the estimator has been on %s runs)\n", shown->group);
  if (cap) verdict(shown, gpu);
}

/* --events: the replay in the tracer's event format (python/vramfit/trace/__main__.py). */
struct event_file {
  FILE *f;
  int phase, stage;
};

static void write_event(void *arg, const struct vf_timeline_event *e) {
  struct event_file *w = arg;
  if (e->stage != w->stage) { /* a pipeline's stages are separate runs: keep the last */
    rewind(w->f);
    fputs("vramfit-trace-events 1\n", w->f);
    w->stage = e->stage;
    w->phase = -1;
  }
  if (e->phase != w->phase) fprintf(w->f, "p %s\n", vf_phase_name((enum vf_phase)e->phase));
  w->phase = e->phase;
  unsigned long long id = e->id;
  switch (e->op) {
  case VF_TIMELINE_FREE: fprintf(w->f, "f %llu\n", id); return;
  case VF_TIMELINE_RECORD: fprintf(w->f, "r %llu %u\n", id, (unsigned)e->stream); return;
  case VF_TIMELINE_EVENT: fprintf(w->f, "m %llu %u\n", id, (unsigned)e->stream); return;
  case VF_TIMELINE_WAIT: fprintf(w->f, "w %llu\n", id); return;
  case VF_TIMELINE_EMPTY_CACHE: fputs("e\n", w->f); return;
  default: break;
  }
  if (e->stream) fprintf(w->f, "a %llu %llu %u\n", id, (unsigned long long)e->bytes, (unsigned)e->stream);
  else fprintf(w->f, "a %llu %llu\n", id, (unsigned long long)e->bytes);
  if (e->category <= VF_CAT_OPTIMIZER) fprintf(w->f, "c %llu %s\n", id, vf_category_name((enum vf_category)e->category));
}

/* What listens to the replay: --events and --plot, either or both. */
struct listeners {
  struct event_file events;
  struct estimate_plot plot;
};

static void tell_listeners(void *arg, const struct vf_timeline_event *e) {
  struct listeners *l = arg;
  if (l->events.f) write_event(&l->events, e);
  if (l->plot.path && e->op <= VF_TIMELINE_FREE) estimate_plot_add(&l->plot, e);
}

static int estimate_run(const struct setup_request *r, const struct setup_context *c, const char *events,
                        const char *plot, struct vf_estimate *e) {
  struct vf_diag d;
  vf_diag_clear(&d);
  struct listeners l = {.events = {.phase = -1}};
  if (events && !(l.events.f = fopen(events, "w")))
    return cli_error("estimate", EXIT_BAD_INPUT, "--events %s: cannot write it", events);
  if (l.events.f) fputs("vramfit-trace-events 1\n", l.events.f);
  estimate_plot_init(&l.plot, plot);
  int rc = events || plot
               ? vf_estimate_timeline(&c->model, &r->setup, c->profile, &c->conf, tell_listeners, &l, e, &d)
               : vf_estimate(&c->model, &r->setup, c->profile, &c->conf, e, &d);
  int code = rc ? cli_diag_error("estimate", rc, &d) : EXIT_OK;
  if (l.events.f && fclose(l.events.f) && !code)
    code = cli_error("estimate", EXIT_BAD_INPUT, "--events %s: write error", events);
  if (plot && !code) code = estimate_plot_write(&l.plot, r, c, e);
  estimate_plot_cleanup(&l.plot);
  return code;
}

/* What the command line asks for beyond the setup. */
struct flags {
  bool json, calibrate;
  const char *events, *plot;
};

/* The estimate of a loaded setup, shown. */
static int estimate_show(const struct setup_request *r, const struct setup_config *sc, const struct setup_context *ctx,
                         const struct flags *f) {
  struct vf_estimate e;
  int rc = estimate_run(r, ctx, f->events, f->plot, &e);
  if (rc) return rc;
  setup_config_warn(r, ctx, sc);
  /* What a run of this setup measured here, and --calibrate to it. */
  struct history_note note;
  history_note_find(r, sc->model, ctx, &note);
  if (f->calibrate && history_note_ratio(&note, "estimate") > 0) vf_estimate_calibrate(&e, note.ratio);
  const struct vf_uncertainty *u = vf_uncertainty_for(&ctx->uncertainty, &r->setup);
  struct shown shown = {.e = &e, .group = u->group};
  vf_estimate_ranges(&e, u, &shown.ranges);
  uint64_t cap = ctx->gpu.capacity_bytes;
  struct vf_profile_info profile;
  vf_profile_describe(ctx->profile, &profile);
  int code = EXIT_OK;
  if (f->json) {
    json_t *o = estimate_json(ctx, &shown, cap, r, &profile);
    if (setup_config_any(sc)) json_object_set_new(o, "warnings", setup_config_warnings_json(r, ctx, sc));
    history_note_json(&note, o);
    code = cli_print_json(o);
  } else {
    estimate_text(ctx, sc, &shown, r, &profile);
    history_note_print(&note);
  }
  if (code == EXIT_OK && cap && !fits_high(&shown, cap)) code = EXIT_NO;
  history_note_cleanup(&note);
  return code;
}

int cmd_estimate(int argc, char **argv) {
  struct setup_request r;
  setup_request_init(&r, "estimate");
  struct flags f = {0};
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == O_HELP || c == 'h') return fputs(usage, stdout), EXIT_OK;
    if (c == ':' || c == '?') return cli_option_error("estimate", c, argv);
    if (c == O_JSON) f.json = true;
    else if (c == O_EVENTS) f.events = optarg;
    else if (c == O_CALIBRATE) f.calibrate = true;
    else if (c == O_PLOT) f.plot = optarg;
    else if (setup_option(&r, c, optarg)) return EXIT_BAD_INPUT;
  }
  struct setup_config sc;
  struct setup_context ctx;
  int rc = setup_config_read(&r, argv + optind, argc - optind, &sc);
  if (!rc) rc = setup_context_load(&r, sc.model, &ctx);
  if (!rc) {
    rc = estimate_show(&r, &sc, &ctx, &f);
    setup_context_cleanup(&ctx);
  }
  setup_config_cleanup(&sc);
  return rc;
}
