/* The planner's throughput model: deliberately simple, so that it ranks settings rather
 * than predicts a run. Every constant is an assumption, named here. */
#include "core/plan_internal.h"

/* Model-FLOPs utilisation reaches MFU_CAP for large micro batches and half of it at
 * MFU_HALF_TOKENS tokens per micro batch: small ones leave the GPU waiting on kernel
 * launches and weight reads. */
#define MFU_CAP 0.45
#define MFU_HALF_TOKENS 512.0
/* Rates of a GPU known only by its size (--gpu 24GiB): what matters is their ratio. */
#define NOMINAL_TENSOR_TFLOPS 100.0
#define NOMINAL_FP32_TFLOPS 20.0
/* Host link (PCIe 4.0 x16 in practice) and a CPU optimizer step (DeepSpeed's CPU Adam). */
#define HOST_LINK_BYTES_PER_S 25e9
#define CPU_OPTIMIZER_PARAMS_PER_S 1e9
/* 4-bit and 8-bit base weights are dequantized for every matmul: assumed a quarter slower. */
#define DEQUANT_SLOWDOWN 1.25

uint64_t plan_data_parallel(const struct vf_setup *s) {
  uint64_t group = s->tp * s->pp * s->cp;
  return group && s->gpus >= group ? s->gpus / group : 1;
}

static enum vf_precision compute_dtype(const struct vf_setup *s) {
  return s->amp != VF_PREC_NONE ? s->amp : s->weights;
}

/* FLOP/s of one GPU in dtype p. A GPU without bf16 tensor cores runs bf16 at its fp32 rate. */
static double peak_flops(const struct vf_gpu_spec *g, enum vf_precision p) {
  bool known = g && (g->bf16_tflops > 0 || g->fp16_tflops > 0 || g->fp32_tflops > 0);
  double tflops;
  if (!known) tflops = p == VF_PREC_FP32 ? NOMINAL_FP32_TFLOPS : NOMINAL_TENSOR_TFLOPS;
  else if (p == VF_PREC_BF16 && g->bf16_tflops > 0) tflops = g->bf16_tflops;
  else if (p == VF_PREC_FP16 && g->fp16_tflops > 0) tflops = g->fp16_tflops;
  else tflops = g->fp32_tflops > 0 ? g->fp32_tflops : NOMINAL_FP32_TFLOPS;
  return tflops * 1e12;
}

/* Training FLOPs per token (see vf_plan_tokens_per_second in vramfit/plan.h). */
static double flops_per_token(const struct vf_model *m, const struct vf_setup *s, double params,
                              double trainable) {
  double linear = trainable < params ? 4 * params + 6 * trainable : 6 * params;
  double attention_pass = 4.0 * (double)m->arch.layers * (double)s->seq * (double)m->arch.heads *
                          (double)m->arch.head_dim;
  double attention = 3 * attention_pass;
  if (s->grad_ckpt == VF_CKPT_FULL) linear += 2 * params, attention += attention_pass;
  if (s->grad_ckpt == VF_CKPT_SELECTIVE) linear += 0.5 * params, attention += attention_pass;
  bool quantized = vf_setup_quant(s) != VF_QUANT_NONE;
  return (linear + attention) * (quantized ? DEQUANT_SLOWDOWN : 1.0);
}

/* Seconds per token one GPU spends waiting on the host link and CPU: nothing overlaps. */
static double offload_seconds_per_token(const struct vf_setup *s, double params, double trainable,
                                        double activation_bytes) {
  double dp = (double)plan_data_parallel(s), micro_tokens = (double)(s->batch * s->seq);
  double step_tokens = micro_tokens * (double)(s->accumulation ? s->accumulation : 1);
  double weight_bytes = s->weights == VF_PREC_FP32 ? 4 : 2, t = 0;
  double sharded = s->shard == VF_SHARD_NONE ? 1 : dp;
  if (s->offload & VF_OFFLOAD_OPTIMIZER) /* gradients down, weights up, a CPU step */
    t += (trainable / sharded) * (2 * weight_bytes / HOST_LINK_BYTES_PER_S + 1 / CPU_OPTIMIZER_PARAMS_PER_S) /
         step_tokens;
  if (s->offload & VF_OFFLOAD_PARAMS) /* weights up for the forward and again for the backward */
    t += 2 * (params / dp) * weight_bytes / HOST_LINK_BYTES_PER_S / micro_tokens;
  if (s->offload & VF_OFFLOAD_ACTIVATIONS) /* saved tensors down and back up */
    t += 2 * activation_bytes / HOST_LINK_BYTES_PER_S / micro_tokens;
  return t;
}

double plan_rate(const struct vf_model *m, const struct vf_setup *s, uint64_t params,
                 uint64_t trainable, uint64_t activation_bytes, const struct vf_gpu_spec *gpu) {
  double tokens = (double)(s->batch * s->seq), p = (double)params, t = (double)trainable;
  double mfu = MFU_CAP * tokens / (tokens + MFU_HALF_TOKENS);
  /* Model-parallel GPUs split a token's FLOPs; every GPU computes. */
  double per_gpu = flops_per_token(m, s, p, t) / (peak_flops(gpu, compute_dtype(s)) * mfu);
  double seconds = per_gpu / (double)s->gpus + offload_seconds_per_token(s, p, t, (double)activation_bytes) /
                                                   (double)plan_data_parallel(s);
  return seconds > 0 ? 1 / seconds : 0;
}

double vf_plan_tokens_per_second(const struct vf_model *m, const struct vf_setup *s,
                                 const struct vf_estimate *e, const struct vf_gpu_spec *gpu) {
  return plan_rate(m, s, e->params, e->trainable_params, e->by_category[VF_CAT_ACTIVATIONS], gpu);
}
