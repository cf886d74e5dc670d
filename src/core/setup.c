/* The training setup: names, defaults and the checks that reject impossible setups. */
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "core/profile.h"
#include "vramfit.h"

static const char *const task_names[] = {"auto", "causal-lm", "seq-classification", "masked-lm", NULL};
static const char *const precision_names[] = {"none", "fp32", "bf16", "fp16", NULL};
static const char *const optimizer_names[] = {"adamw", "adamw-8bit", "paged-adamw-8bit", "adafactor",
                                              "sgd", "sgd-momentum", "lion", "none", NULL};
static const char *const method_names[] = {"full", "lora", "qlora", "dora", "adapter", "adapter-v2", NULL};
static const char *const quant_names[] = {"default", "none", "nf4", "nf4-dq", "int8", NULL};
static const char *const ckpt_names[] = {"none", "full", "selective", NULL};
static const char *const attention_names[] = {"default", "eager", "sdpa", "flash", NULL};
static const char *const shard_names[] = {"none", "zero1", "zero2", "zero3", "fsdp", "hsdp", NULL};
static const char *const lengths_names[] = {"default", "fixed", "varied", NULL};
static const char *const eval_names[] = {"default", "no", "yes", NULL};
static const char *const pp_schedule_names[] = {"default", "none", "gpipe", "1f1b", "interleaved-1f1b", NULL};
static const char *const sp_names[] = {"default", "no", "yes", NULL};
static const char *const loss_names[] = {"default", "chunked", "fused", "cce", NULL};
static const char *const no_yes_names[] = {"no", "yes", NULL};

static const char *const *const enum_tables[] = {
    [VF_ENUM_TASK] = task_names,         [VF_ENUM_PRECISION] = precision_names,
    [VF_ENUM_OPTIMIZER] = optimizer_names, [VF_ENUM_METHOD] = method_names,
    [VF_ENUM_QUANT] = quant_names,       [VF_ENUM_CKPT] = ckpt_names,
    [VF_ENUM_ATTENTION] = attention_names, [VF_ENUM_SHARD] = shard_names,
    [VF_ENUM_LENGTHS] = lengths_names,   [VF_ENUM_EVAL] = eval_names,
    [VF_ENUM_PP_SCHEDULE] = pp_schedule_names, [VF_ENUM_SP] = sp_names,
    [VF_ENUM_LOSS] = loss_names,         [VF_ENUM_IN_BWD] = no_yes_names,
    [VF_ENUM_COMPILE] = no_yes_names,
};

const char *vf_enum_name(enum vf_enum_kind kind, int value) {
  const char *const *t = enum_tables[kind];
  for (int i = 0; t[i]; i++)
    if (i == value) return t[i];
  return "unknown";
}

/* --loss default is the contract's spelling of the framework's own loss, not a placeholder. */
static bool placeholder(enum vf_enum_kind kind, const char *name) {
  return strcmp(name, "auto") == 0 || (strcmp(name, "default") == 0 && kind != VF_ENUM_LOSS);
}

int vf_enum_parse(enum vf_enum_kind kind, const char *name, int *value) {
  const char *const *t = enum_tables[kind];
  for (int i = 0; t[i]; i++)
    if (strcmp(t[i], name) == 0 && !placeholder(kind, t[i])) {
      *value = i;
      return 0;
    }
  return VF_ENOTFOUND;
}

void vf_enum_choices(enum vf_enum_kind kind, char *buf, size_t size) {
  const char *const *t = enum_tables[kind];
  size_t o = 0;
  if (size) buf[0] = '\0';
  for (int i = 0; t[i] && o < size; i++)
    if (!placeholder(kind, t[i])) o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", " : "", t[i]);
}

void vf_setup_default(struct vf_setup *s) {
  memset(s, 0, sizeof *s);
  s->batch = 1;
  s->seq = 2048;
  s->accumulation = 0;
  s->task = VF_TASK_AUTO;
  s->weights = VF_PREC_NONE; /* the framework's: vf_setup_resolve() */
  s->amp = VF_PREC_NONE;
  s->optimizer = VF_OPT_ADAMW;
  s->method = VF_METHOD_FULL;
  s->lora_r = 8;
  s->lora_targets = (1u << VF_KIND_Q) | (1u << VF_KIND_V);
  s->quant = VF_QUANT_DEFAULT;
  s->grad_ckpt = VF_CKPT_NONE;
  s->attention = VF_ATTN_DEFAULT;
  s->gpus = s->tp = s->pp = s->cp = s->ep = 1;
  s->shard = VF_SHARD_NONE;
  s->dp_replicate = 1;
}

bool vf_shard_fsdp(enum vf_shard shard) { return shard == VF_SHARD_FSDP || shard == VF_SHARD_HSDP; }
bool vf_shard_weights(enum vf_shard shard) { return shard == VF_SHARD_ZERO3 || vf_shard_fsdp(shard); }

/* The weights' dtype when none is asked for: the checkpoint's where the framework loads it so,
 * float32 otherwise (and for a checkpoint stored in float32 or a dtype training cannot keep). */
static enum vf_precision default_weights(const struct vf_model *m, const struct vf_profile *p) {
  if (!p->checkpoint_dtype_weights) return VF_PREC_FP32;
  return m->arch.dtype == VF_DTYPE_BF16 ? VF_PREC_BF16 : m->arch.dtype == VF_DTYPE_F16 ? VF_PREC_FP16 : VF_PREC_FP32;
}

void vf_setup_resolve(struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p) {
  if (s->weights == VF_PREC_NONE) s->weights = default_weights(m, p);
  /* Full fine-tuning trains every weight, so all of them are upcast; adapters train apart
   * from their frozen 16-bit base, which stays as loaded. */
  if (p->fsdp_upcast_trainable && vf_shard_fsdp(s->shard) && s->amp != VF_PREC_NONE && s->method == VF_METHOD_FULL)
    s->weights = VF_PREC_FP32;
  if (s->task == VF_TASK_AUTO)
    s->task = m->arch.family == VF_FAMILY_BERT ? VF_TASK_SEQ_CLS : VF_TASK_CAUSAL_LM;
  if (s->attention == VF_ATTN_DEFAULT) s->attention = p->default_attention;
  /* Attention-score soft-capping (Gemma 2) has no fused kernel where the framework runs it:
   * the eager path, whatever was asked for (softcap_eager). */
  if (p->softcap_eager && m->arch.attn_logit_softcap > 0) s->attention = VF_ATTN_EAGER;
  if (!s->accumulation) s->accumulation = p->default_accumulation ? p->default_accumulation : 1;
  if (s->lengths == VF_LENGTHS_DEFAULT)
    s->lengths = p->varied_lengths ? VF_LENGTHS_VARIED : VF_LENGTHS_FIXED;
  if (s->eval == VF_EVAL_DEFAULT) s->eval = p->validates ? VF_EVAL_YES : VF_EVAL_NO;
  if (s->pp_schedule == VF_PP_DEFAULT) s->pp_schedule = s->pp > 1 ? p->pp_default_schedule : VF_PP_NONE;
  /* Without tensor parallelism there is no sequence to split (Megatron turns it off,
   * megatron/training/arguments.py: "Disabling sequence parallelism"). */
  if (s->sequence_parallel == VF_SP_DEFAULT || s->tp == 1)
    s->sequence_parallel = s->tp > 1 && p->sequence_parallel ? VF_SP_YES : VF_SP_NO;
}

int vf_lora_targets_parse(const char *text, uint32_t *bits) {
  static const enum vf_kind linear[] = {VF_KIND_Q, VF_KIND_K, VF_KIND_V, VF_KIND_O,
                                        VF_KIND_GATE, VF_KIND_UP, VF_KIND_DOWN};
  if (strcmp(text, "all-linear") == 0) {
    *bits = 0;
    for (size_t i = 0; i < sizeof linear / sizeof *linear; i++) *bits |= 1u << linear[i];
    return 0;
  }
  uint32_t out = 0;
  const char *p = text;
  while (*p) {
    size_t n = strcspn(p, ",");
    int found = 0;
    for (int k = 0; k <= VF_KIND_HEAD && !found; k++) {
      const char *name = vf_kind_name((enum vf_kind)k);
      if (strlen(name) == n && strncmp(p, name, n) == 0) {
        out |= 1u << k;
        found = 1;
      }
    }
    if (!found) return VF_EINVAL;
    p += n;
    if (*p == ',') p++;
  }
  if (!out) return VF_EINVAL;
  *bits = out;
  return 0;
}

enum vf_quant vf_setup_quant(const struct vf_setup *s) {
  if (s->quant != VF_QUANT_DEFAULT) return s->quant;
  return s->method == VF_METHOD_QLORA ? VF_QUANT_NF4_DQ : VF_QUANT_NONE;
}

static int bad(struct vf_diag *d, const char *why) {
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s", why);
}

/* Expert parallelism splits each MoE layer's experts over ep of the data- and
 * context-parallel GPUs (Megatron's expert model parallel group, torchtitan's ep mesh
 * borrowed from dp_shard x cp). */
static int check_experts(const struct vf_setup *s, const struct vf_model *m, struct vf_diag *d) {
  char msg[256];
  typedef unsigned long long ull;
  uint64_t dp_cp = s->gpus / (s->tp * s->pp);
  if (!s->ep) return bad(d, "--ep must be at least 1");
  if (s->ep == 1) return 0;
  if (!m->arch.experts) return bad(d, "--ep needs a mixture-of-experts model");
  if (m->arch.experts % s->ep) {
    snprintf(msg, sizeof msg, "--ep %llu does not divide the %llu experts", (ull)s->ep, (ull)m->arch.experts);
    return bad(d, msg);
  }
  if (dp_cp % s->ep == 0) return 0;
  snprintf(msg, sizeof msg, "--ep %llu does not divide the %llu data- and context-parallel GPUs (--gpus / (tp x pp))",
           (ull)s->ep, (ull)dp_cp);
  return bad(d, msg);
}

/* HSDP: replicas that each shard over a whole group of the data-parallel GPUs. */
static int check_replicas(const struct vf_setup *s, struct vf_diag *d) {
  char msg[256];
  uint64_t dp = s->gpus / (s->tp * s->pp * s->cp);
  if (!s->dp_replicate) return bad(d, "--dp-replicate must be at least 1");
  if (s->shard != VF_SHARD_HSDP) return s->dp_replicate > 1 ? bad(d, "--dp-replicate needs --shard hsdp") : 0;
  if (s->dp_replicate < 2) return bad(d, "--shard hsdp needs --dp-replicate N, its replicas (2 or more)");
  if (dp % s->dp_replicate == 0 && dp > s->dp_replicate) return 0;
  snprintf(msg, sizeof msg, "--dp-replicate %llu does not split the %llu data-parallel GPUs into shard groups of "
           "2 or more", (unsigned long long)s->dp_replicate, (unsigned long long)dp);
  return bad(d, msg);
}

static int check_parallel(const struct vf_setup *s, const struct vf_model *m, struct vf_diag *d) {
  char msg[256];
  if (!s->gpus) return bad(d, "--gpus must be at least 1");
  if (!s->tp || !s->pp || !s->cp) return bad(d, "--tp, --pp and --cp must be at least 1");
  if (s->tp * s->pp * s->cp > s->gpus) {
    snprintf(msg, sizeof msg, "--tp %llu x --pp %llu x --cp %llu needs more than --gpus %llu",
             (unsigned long long)s->tp, (unsigned long long)s->pp, (unsigned long long)s->cp,
             (unsigned long long)s->gpus);
    return bad(d, msg);
  }
  if (s->gpus % (s->tp * s->pp * s->cp)) {
    snprintf(msg, sizeof msg, "--gpus %llu is not a multiple of --tp %llu x --pp %llu x --cp %llu: the data-parallel "
             "replicas would not be whole", (unsigned long long)s->gpus, (unsigned long long)s->tp,
             (unsigned long long)s->pp, (unsigned long long)s->cp);
    return bad(d, msg);
  }
  if (m->has_arch && (m->arch.heads % s->tp || m->arch.kv_heads % s->tp)) {
    snprintf(msg, sizeof msg, "--tp %llu does not divide the %llu attention heads (%llu kv heads)",
             (unsigned long long)s->tp, (unsigned long long)m->arch.heads,
             (unsigned long long)m->arch.kv_heads);
    return bad(d, msg);
  }
  if (m->has_arch && s->pp > m->arch.layers) return bad(d, "--pp is larger than the number of layers");
  if (s->seq % s->cp) return bad(d, "--seq must be a multiple of --cp");
  int rc = check_experts(s, m, d);
  return rc ? rc : check_replicas(s, d);
}

int vf_setup_validate(const struct vf_setup *s, const struct vf_model *m, struct vf_diag *d) {
  if (!m->has_arch) return bad(d, "the model has no config: estimates need its dimensions");
  if (!s->batch) return bad(d, "--batch must be at least 1");
  if (!s->seq) return bad(d, "--seq must be at least 1");
  /* Past 2^31 tokens per micro batch, byte counts (tokens x vocabulary x bytes) could
   * overflow 64 bits; no GPU holds such a batch anyway. */
  if (s->batch > (1u << 20) || s->seq > (1u << 24) || s->batch * s->seq > (1ull << 31))
    return bad(d, "--batch x --seq is implausibly large (over 2^31 tokens per micro batch)");
  if (s->gpus > (1u << 20) || s->lora_r > (1u << 16) || s->accumulation > (1u << 20))
    return bad(d, "--gpus, --lora-r or --accumulation is implausibly large");
  /* A learned position table has one row per position: the run would index past it (rotary
   * positions simply extend). */
  if (m->arch.learned_positions && s->seq > m->arch.max_positions)
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "--seq %llu is longer than the model's %llu learned positions",
                   (unsigned long long)s->seq, (unsigned long long)m->arch.max_positions);
  bool adapters = s->method != VF_METHOD_FULL;
  if (s->method == VF_METHOD_QLORA && s->quant == VF_QUANT_NONE)
    return bad(d, "--method qlora quantizes the base weights: it contradicts --quant none");
  if (s->method == VF_METHOD_FULL && s->quant != VF_QUANT_NONE && s->quant != VF_QUANT_DEFAULT)
    return bad(d, "--quant needs an adapter method (lora, qlora, dora): quantized weights are frozen");
  if (adapters && (s->method == VF_METHOD_LORA || s->method == VF_METHOD_QLORA || s->method == VF_METHOD_DORA) &&
      (!s->lora_r || !s->lora_targets))
    return bad(d, "--lora-r must be at least 1 with a LoRA method");
  if (m->has_arch && s->lora_r > m->arch.hidden) return bad(d, "--lora-r is larger than the hidden size");
  if (vf_shard_weights(s->shard) && s->tp > s->gpus)
    return bad(d, "--shard with --tp larger than --gpus is impossible");
  if ((s->offload & VF_OFFLOAD_PARAMS) && !vf_shard_weights(s->shard))
    return bad(d, "--offload params needs --shard zero3, fsdp or hsdp");
  if (s->task == VF_TASK_CAUSAL_LM && m->arch.family == VF_FAMILY_BERT)
    return bad(d, "--task causal-lm does not apply to an encoder; use masked-lm or seq-classification");
  if (s->task == VF_TASK_MASKED_LM && m->arch.family != VF_FAMILY_BERT)
    return bad(d, "--task masked-lm needs an encoder model");
  return check_parallel(s, m, d);
}
