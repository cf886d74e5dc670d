/* Rules that tie values together, across the files of one call:
 *  - DeepSpeed: train_batch_size = micro x accumulation x data-parallel GPUs (fixed here
 *    when micro or accumulation change; "auto" is left to the HF Trainer);
 *  - HF Trainer + DeepSpeed JSON: concrete batch values must match TrainingArguments;
 *  - Lightning + DeepSpeed JSON: no gradient_accumulation_steps in the JSON at all;
 *  - DeepSpeed: not fp16 and bf16 together; offload_param only with ZeRO stage 3;
 *  - torchtune: optimizer_in_bwd needs gradient_accumulation_steps 1;
 *  - litgpt: the accumulation is global_batch_size / (devices x num_nodes) / micro batch;
 *  - a TrainingArguments file naming a DeepSpeed JSON the call does not hold gets a note;
 *  - Hydra: values its defaults list overrides (hydra.c). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "edit/internal.h"

static bool fmt_is(const struct afile *f, const char *name) {
  return f->fmt && strcmp(f->fmt->name, name) == 0;
}

static bool hf_family(const struct afile *f) {
  return fmt_is(f, "hf") || fmt_is(f, "trl") || fmt_is(f, "axolotl") || fmt_is(f, "llamafactory");
}

/* The file that loads ds: an HF-style "deepspeed: ds.json" or Lightning's strategy config. */
static struct afile *owner_of(const struct astate *s, const struct afile *ds, bool *lightning) {
  for (size_t i = 0; i < s->n; i++) {
    struct afile *g = &s->f[i];
    *lightning = fmt_is(g, "lightning");
    const char *key = hf_family(g) ? "deepspeed" : *lightning ? "trainer.strategy.init_args.config" : NULL;
    struct vf_value v;
    if (g == ds || !key || queue_get(g, key, &v, NULL) == 0 || v.kind != VF_VALUE_STRING) continue;
    if (strcmp(path_base(v.s), path_base(ds->pub->path)) == 0 || strcmp(path_base(v.s), path_base(ds->pub->target)) == 0)
      return g;
  }
  *lightning = false;
  return NULL;
}

static bool orig_value(const struct afile *f, const char *path, struct vf_value *v) {
  struct yfind fd;
  return ytree_find(&f->doc.t, path, &fd, NULL) == 0 && fd.node && ynode_value(fd.node, v);
}

/* A logical key's value in an HF-style file: before (after = false) or after the edits. */
static bool owner_int(const struct afile *f, const char *key, bool after, long long *out) {
  const json_t *paths = json_object_get(format_key(f->fmt, key), "paths");
  for (size_t i = 0; i < json_array_size(paths); i++) {
    const char *p = json_string_value(json_array_get(paths, i));
    struct vf_value v;
    bool has = after ? queue_get(f, p, &v, NULL) != 0 : orig_value(f, p, &v);
    if (has && v.kind == VF_VALUE_INT) return *out = v.i, true;
    if (has) return false;
  }
  const json_t *def = format_default(f->fmt, json_string_value(json_array_get(paths, 0)));
  if (!json_is_integer(def)) return false;
  *out = json_integer_value(def);
  return true;
}

/* A DeepSpeed batch value as the run will see it: concrete, "auto" filled by the owner, or
 * absent (then *absent is set and the value is 1, a stand-in DeepSpeed infers around). */
static bool ds_int(const struct afile *ds, const struct afile *own, const char *path,
                   const char *key, bool after, long long *out, bool *absent) {
  struct vf_value v;
  bool has = after ? queue_get(ds, path, &v, NULL) != 0 : orig_value(ds, path, &v);
  *absent = !has;
  if (!has) return *out = 1, true;
  if (v.kind == VF_VALUE_INT) return *out = v.i, true;
  return v.kind == VF_VALUE_STRING && strcmp(v.s, "auto") == 0 && own && owner_int(own, key, after, out);
}

static int refuse(const struct afile *f, const char *path, struct vf_diag *d, const char *why) {
  struct vf_value v;
  size_t at = 0;
  queue_get(f, path, &v, &at);
  return ytree_diag(&f->doc.t, d, VF_EINVAL, at, "%s", why);
}

static int check_mismatch(const struct afile *ds, const struct afile *own, const char *path,
                          const char *key, struct vf_diag *d) {
  struct vf_value v;
  long long want;
  if (!queue_get(ds, path, &v, NULL) || v.kind != VF_VALUE_INT || !owner_int(own, key, true, &want) ||
      v.i == want)
    return 0;
  char why[512];
  snprintf(why, sizeof why,
           "%s is %lld but %s in %s gives %lld: the HF Trainer stops on the mismatch; set "
           "both the same, or this one to \"auto\"",
           path, v.i, key, own->pub->path, want);
  return refuse(ds, path, d, why);
}

struct batch {
  long long m0, m1, a0, a1, t0;
  bool accum_absent;
};

static int world_size(const struct astate *s, const struct afile *ds, struct batch *b, long long *w,
                      struct vf_diag *d) {
  char why[512];
  long long unit;
  if (s->o->gpus) {
    *w = (long long)s->o->gpus;
    if (!b->accum_absent) return 0;
    /* DeepSpeed infers the accumulation; keep what it inferred before. */
    if (!__builtin_mul_overflow(b->m0, *w, &unit) && b->t0 % unit == 0) {
      b->a0 = b->a1 = b->t0 / unit;
      return 0;
    }
    snprintf(why, sizeof why, "train_batch_size %lld is not a multiple of micro %lld x %lld GPUs",
             b->t0, b->m0, *w);
    return refuse(ds, "train_batch_size", d, why);
  }
  if (!__builtin_mul_overflow(b->m0, b->a0, &unit) && b->t0 % unit == 0) {
    *w = b->t0 / unit;
    return 0;
  }
  snprintf(why, sizeof why,
           "train_batch_size %lld is not micro %lld x accumulation %lld x GPUs, so the GPU "
           "count is unknown: pass --gpus N",
           b->t0, b->m0, b->a0);
  return refuse(ds, "train_batch_size", d, why);
}

static int fix_train_batch(const struct astate *s, struct afile *ds, const struct afile *own,
                           struct vf_diag *d) {
  struct vf_value t, t0;
  int how = queue_get(ds, "train_batch_size", &t, NULL);
  if (!how || t.kind != VF_VALUE_INT || !orig_value(ds, "train_batch_size", &t0) || t0.kind != VF_VALUE_INT)
    return 0;
  struct batch b = {.t0 = t0.i};
  bool absent;
  if (!ds_int(ds, own, "train_micro_batch_size_per_gpu", "batch", false, &b.m0, &absent) || absent ||
      !ds_int(ds, own, "train_micro_batch_size_per_gpu", "batch", true, &b.m1, &absent) ||
      !ds_int(ds, own, "gradient_accumulation_steps", "accumulation", false, &b.a0, &b.accum_absent) ||
      !ds_int(ds, own, "gradient_accumulation_steps", "accumulation", true, &b.a1, &absent))
    return 0;
  long long before, after;
  if (b.m0 < 1 || b.a0 < 1 || b.m1 < 1 || b.a1 < 1 || b.t0 < 1 ||
      __builtin_mul_overflow(b.m0, b.a0, &before) || __builtin_mul_overflow(b.m1, b.a1, &after) ||
      (before == after && how == 1))
    return 0;
  long long w = 1, want;
  int rc = world_size(s, ds, &b, &w, d);
  if (rc) return rc;
  if (__builtin_mul_overflow(b.m1, b.a1, &want) || __builtin_mul_overflow(want, w, &want))
    return refuse(ds, "train_batch_size", d, "micro x accumulation x GPUs is too large");
  char why[512];
  if (how == 2 && t.i != want) {
    snprintf(why, sizeof why, "train_batch_size %lld is not micro %lld x accumulation %lld x %lld GPUs = %lld",
             t.i, b.m1, b.a1, w, want);
    return refuse(ds, "train_batch_size", d, why);
  }
  if (t.i == want) return 0;
  snprintf(why, sizeof why, "= micro %lld x accumulation %lld x %lld GPUs", b.m1, b.a1, w);
  struct vf_value v = {.kind = VF_VALUE_INT, .i = want};
  return queue_add(ds, "train_batch_size", "train_batch_size", &v, 0, 0, why, d);
}

static bool is_true(const struct afile *f, const char *path) {
  struct vf_value v;
  return queue_get(f, path, &v, NULL) && v.kind == VF_VALUE_BOOL && v.b;
}

static int check_ds_rules(const struct afile *ds, struct vf_diag *d) {
  if (is_true(ds, "bf16.enabled") && is_true(ds, "fp16.enabled"))
    return refuse(ds, "fp16.enabled", d, "fp16 and bf16 cannot both be enabled in DeepSpeed");
  struct vf_value dev, stage = {.kind = VF_VALUE_INT, .i = 0};
  queue_get(ds, "zero_optimization.stage", &stage, NULL);
  if (queue_get(ds, "zero_optimization.offload_param.device", &dev, NULL) && dev.kind == VF_VALUE_STRING &&
      (strcmp(dev.s, "cpu") == 0 || strcmp(dev.s, "nvme") == 0) &&
      !(stage.kind == VF_VALUE_INT && stage.i == 3))
    return refuse(ds, "zero_optimization.offload_param.device", d,
                  "offload_param works only with ZeRO stage 3: also set zero_stage=3");
  return 0;
}

static int check_deepspeed(struct astate *s, struct afile *ds, struct vf_diag *d) {
  bool lightning;
  const struct afile *own = owner_of(s, ds, &lightning);
  struct vf_value v;
  if (own && lightning && queue_get(ds, "gradient_accumulation_steps", &v, NULL))
    return refuse(ds, "gradient_accumulation_steps", d,
                  "Lightning refuses gradient_accumulation_steps in a DeepSpeed config (it comes "
                  "from trainer.accumulate_grad_batches): remove this key");
  int rc = 0;
  if (own && !lightning) {
    rc = check_mismatch(ds, own, "train_micro_batch_size_per_gpu", "batch", d);
    if (!rc) rc = check_mismatch(ds, own, "gradient_accumulation_steps", "accumulation", d);
  }
  if (!rc) rc = fix_train_batch(s, ds, lightning ? NULL : own, d);
  return rc ? rc : check_ds_rules(ds, d);
}

static int check_torchtune(const struct afile *f, struct vf_diag *d) {
  struct vf_value acc;
  if (is_true(f, "optimizer_in_bwd") && queue_get(f, "gradient_accumulation_steps", &acc, NULL) &&
      acc.kind == VF_VALUE_INT && acc.i > 1)
    return refuse(f, "gradient_accumulation_steps", d,
                  "optimizer_in_bwd: True needs gradient_accumulation_steps 1");
  return 0;
}

/* A litgpt value before (after = false) or after the edits, else the map's default. */
static bool litgpt_value(const struct afile *f, const char *path, bool after, struct vf_value *v) {
  if (after ? queue_get(f, path, v, NULL) != 0 : orig_value(f, path, v)) return true;
  const json_t *def = format_default(f->fmt, path);
  return def && value_from_json(def, v) == 0;
}

static bool litgpt_int(const struct afile *f, const char *path, bool after, long long *out) {
  struct vf_value v;
  if (!litgpt_value(f, path, after, &v) || v.kind != VF_VALUE_INT) return false;
  *out = v.i;
  return true;
}

/* The GPUs litgpt trains on: devices x num_nodes, or --gpus where devices is "auto" (every
 * GPU of the machine, litgpt/utils.py parse_devices). */
static int litgpt_world(const struct astate *s, const struct afile *f, long long *w, struct vf_diag *d) {
  long long devices, nodes;
  char why[512];
  if (!litgpt_int(f, "num_nodes", true, &nodes) || nodes < 1) nodes = 1;
  if (!litgpt_int(f, "devices", true, &devices) || devices < 1) {
    if (!s->o->gpus)
      return refuse(f, "devices", d, "devices is \"auto\" (every GPU of the machine), so the "
                    "accumulation that train.global_batch_size gives is unknown: pass --gpus N");
    *w = (long long)s->o->gpus;
    return 0;
  }
  *w = devices * nodes;
  if (!s->o->gpus || (uint64_t)*w == s->o->gpus) return 0;
  snprintf(why, sizeof why, "devices %lld x num_nodes %lld = %lld GPUs, but --gpus %llu: set "
           "devices too (--set devices=N), or leave --gpus out", devices, nodes, *w,
           (unsigned long long)s->o->gpus);
  return refuse(f, "devices", d, why);
}

/* litgpt has no accumulation key: it divides train.global_batch_size by the micro batch and
 * the GPUs (litgpt/args.py). A new micro batch keeps the accumulation the file gives; both
 * are written as the global batch that gives them. */
static int check_litgpt(const struct astate *s, struct afile *f, struct vf_diag *d) {
  long long m0, m1, g0, w = 1, want;
  struct vf_value given;
  if (!litgpt_int(f, "train.micro_batch_size", false, &m0) ||
      !litgpt_int(f, "train.micro_batch_size", true, &m1) ||
      !litgpt_int(f, "train.global_batch_size", false, &g0) || m0 < 1 || m1 < 1 ||
      (m1 == m0 && !f->accumulation) || queue_get(f, "train.global_batch_size", &given, NULL) == 2)
    return 0;
  int rc = litgpt_world(s, f, &w, d);
  if (rc) return rc;
  char why[512];
  long long a0 = g0 / w / m0, a1 = f->accumulation ? f->accumulation : a0;
  if (a0 < 1) {
    snprintf(why, sizeof why, "train.global_batch_size %lld is below micro %lld x %lld GPUs: "
             "litgpt stops on it; fix it first", g0, m0, w);
    return refuse(f, "train.global_batch_size", d, why);
  }
  if (__builtin_mul_overflow(m1, a1, &want) || __builtin_mul_overflow(want, w, &want))
    return refuse(f, "train.global_batch_size", d, "micro x accumulation x GPUs is too large");
  if (want == g0 && orig_value(f, "train.global_batch_size", &given)) return 0;
  snprintf(why, sizeof why, "= micro %lld x accumulation %lld x %lld GPU%s", m1, a1, w, w == 1 ? "" : "s");
  struct vf_value v = {.kind = VF_VALUE_INT, .i = want};
  return queue_add(f, f->accumulation ? "accumulation" : "batch", "train.global_batch_size", &v,
                   s->o->create, 0, why, d);
}

static bool in_call(const struct astate *s, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(path_base(name), path_base(s->f[i].pub->path)) == 0 ||
        strcmp(path_base(name), path_base(s->f[i].pub->target)) == 0)
      return true;
  return false;
}

/* An HF-style file names its DeepSpeed JSON ("deepspeed: ds.json"), whose batch values must
 * agree with it; apply can keep them so only when the JSON is one of the call's files. */
static int note_deepspeed_json(struct astate *s, const struct afile *f) {
  struct vf_value v;
  if (!hf_family(f) || !orig_value(f, "deepspeed", &v) || v.kind != VF_VALUE_STRING ||
      !str_ends_with(v.s, ".json") || in_call(s, v.s))
    return 0;
  char near[4096];
  const char *slash = strrchr(f->pub->target, '/');
  snprintf(near, sizeof near, "%.*s/%s", slash ? (int)(slash - f->pub->target) : 1,
           slash ? f->pub->target : ".", v.s);
  if (access(v.s, F_OK) != 0 && (v.s[0] == '/' || access(near, F_OK) != 0))
    return queue_note(s->a, "%s: deepspeed: %s was not found (from here or beside the file): "
                      "the run will fail to load it", f->pub->path, v.s);
  return queue_note(s->a, "%s: deepspeed: %s is not among the files given, so its batch "
                    "values were not checked against this file: give it too", f->pub->path, v.s);
}

int check_consistency(struct astate *s, struct vf_diag *d) {
  for (size_t i = 0; i < s->n; i++) {
    int rc = fmt_is(&s->f[i], "deepspeed") ? check_deepspeed(s, &s->f[i], d)
             : fmt_is(&s->f[i], "torchtune") ? check_torchtune(&s->f[i], d)
             : fmt_is(&s->f[i], "litgpt")    ? check_litgpt(s, &s->f[i], d)
                                             : note_deepspeed_json(s, &s->f[i]);
    if (!rc) rc = check_hydra_defaults(s, &s->f[i], d);
    if (rc) return rc;
  }
  return 0;
}
