/* The planner's throughput model: deliberately simple, so that it ranks settings rather
 * than predicts a run. Every constant is an assumption, named here. */
#include "core/params.h"
#include "core/pipeline.h"
#include "core/plan/internal.h"

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
/* A GPU whose link is unknown talks to the others of its node over a PCIe 4.0 x16 slot. */
#define PCIE_LINK_GBPS 32.0

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

/* The link between GPUs of a group of n consecutive ranks: inside a node when the group
 * fits one, else the network. An unknown GPU's link is taken as a PCIe 4.0 slot's. */
static double link_bytes_per_s(const struct vf_gpu_spec *g, const struct plan_cluster *c, uint64_t n) {
  if (n > c->gpus_per_node) return c->network_gbps * 1e9;
  return (g && g->link_gbps > 0 ? g->link_gbps : PCIE_LINK_GBPS) * 1e9;
}

/* A ring all-reduce moves 2 (n - 1) / n of the buffer through each GPU's link; an
 * all-gather or a reduce-scatter half that. */
static double ring_share(uint64_t n) { return n > 1 ? 2.0 * (double)(n - 1) / (double)n : 0; }

/* GPU-seconds per token of tensor parallelism: Megatron's two all-reduces (or all-gather
 * and reduce-scatter pairs under sequence parallelism, the same bytes) per block in the
 * forward and two in the backward, two more when the block is recomputed; every GPU of
 * the group moves them for every token of the group. */
static double tp_seconds(const struct vf_model *m, const struct vf_setup *s, const struct vf_gpu_spec *g,
                         const struct plan_cluster *c) {
  if (s->tp < 2) return 0;
  double per_block = s->grad_ckpt == VF_CKPT_FULL ? 6 : 4;
  double bytes = per_block * ring_share(s->tp) * (double)m->arch.hidden * precision_bytes(compute_dtype(s));
  return (double)s->tp * (double)m->arch.layers * bytes / link_bytes_per_s(g, c, s->tp);
}

/* Ring attention: each GPU of the context-parallel group passes its keys and values on
 * cp - 1 times per block in the forward, and keys, values and their gradients in the
 * backward. */
static double cp_seconds(const struct vf_model *m, const struct vf_setup *s, const struct vf_gpu_spec *g,
                         const struct plan_cluster *c) {
  if (s->cp < 2) return 0;
  double kv = 2.0 * (double)(m->arch.kv_heads * m->arch.head_dim / s->tp) * precision_bytes(compute_dtype(s));
  double bytes = 3 * (double)(s->cp - 1) * kv;
  return (double)s->tp * (double)m->arch.layers * bytes / link_bytes_per_s(g, c, s->tp * s->cp);
}

/* Expert parallelism: each MoE block sends a token's hidden state to each of its experts'
 * GPUs and back (all-to-all), in the forward and again in the backward; (ep - 1) / ep of it
 * leaves the GPU. */
static double ep_seconds(const struct vf_model *m, const struct vf_setup *s, const struct vf_gpu_spec *g,
                         const struct plan_cluster *c) {
  if (s->ep < 2) return 0;
  double bytes = 4.0 * (double)m->arch.experts_per_token * (double)m->arch.hidden *
                 precision_bytes(compute_dtype(s)) * (double)(s->ep - 1) / (double)s->ep;
  return (double)m->arch.layers * bytes / link_bytes_per_s(g, c, s->tp * s->ep);
}

/* Pipeline stages send each token's hidden state forward and its gradient back. */
static double pp_seconds(const struct vf_model *m, const struct vf_setup *s, const struct vf_gpu_spec *g,
                         const struct plan_cluster *c) {
  if (s->pp < 2) return 0;
  double bytes = 2.0 * (double)m->arch.hidden * precision_bytes(compute_dtype(s));
  return (double)(s->pp - 1) * bytes / link_bytes_per_s(g, c, s->tp * s->cp * s->pp);
}

/* Each stage idles (p - 1) of the m x v + p - 1 slots of a step with m micro batches over
 * v model chunks per rank (GPipe and 1F1B: v = 1): the work is stretched by the ratio. */
static double bubble_stretch(const struct vf_setup *s, const struct plan_cluster *c) {
  if (s->pp < 2) return 1;
  double mv = (double)(s->accumulation ? s->accumulation : 1) *
              (double)(s->pp_schedule == VF_PP_INTERLEAVED ? c->pp_chunks : 1);
  return (mv + (double)(s->pp - 1)) / mv;
}

/* GPU-seconds per token of data parallelism: per optimizer step each GPU reduces its
 * gradients over the data-parallel (and context-parallel) GPUs, all-reduced or
 * reduce-scattered then gathered, the same bytes; sharded weights are all-gathered for
 * every forward and backward (once per step under a pipeline, which keeps them). */
static double dp_seconds(const struct vf_setup *s, double params, double trainable, const struct vf_gpu_spec *g,
                         const struct plan_cluster *c) {
  uint64_t replicas = plan_data_parallel(s) * s->cp, model_parallel = s->tp * s->pp;
  if (replicas < 2) return 0;
  double micro = (double)(s->accumulation ? s->accumulation : 1), share = ring_share(replicas);
  double grad_bytes = s->weights == VF_PREC_FP32 ? 4 : 2;
  double bytes = share * trainable / (double)model_parallel * grad_bytes;
  if (s->shard == VF_SHARD_ZERO3 || s->shard == VF_SHARD_FSDP || s->shard == VF_SHARD_HSDP)
    bytes += (s->pp > 1 ? 1 : micro) * share * params / (double)model_parallel * precision_bytes(compute_dtype(s));
  double step_tokens = (double)(s->batch * s->seq) * micro;
  return (double)(model_parallel * s->cp) * bytes / link_bytes_per_s(g, c, s->gpus) / step_tokens;
}

double plan_rate(const struct vf_model *m, const struct vf_setup *s, uint64_t params, uint64_t trainable,
                 uint64_t activation_bytes, const struct vf_gpu_spec *gpu, const struct plan_cluster *c) {
  double tokens = (double)(s->batch * s->seq / s->cp), p = (double)params, t = (double)trainable;
  double mfu = MFU_CAP * tokens / (tokens + MFU_HALF_TOKENS);
  /* GPU-seconds per token, shared by every GPU: compute and the model-parallel traffic,
   * stretched by the pipeline's bubble, then the data-parallel traffic. Nothing overlaps. */
  double work = flops_per_token(m, s, p, t) / (peak_flops(gpu, compute_dtype(s)) * mfu) + tp_seconds(m, s, gpu, c) +
                cp_seconds(m, s, gpu, c) + ep_seconds(m, s, gpu, c) + pp_seconds(m, s, gpu, c);
  double gpu_seconds = work * bubble_stretch(s, c) + dp_seconds(s, p, t, gpu, c);
  double seconds = gpu_seconds / (double)s->gpus +
                   offload_seconds_per_token(s, p, t, (double)activation_bytes) / (double)plan_data_parallel(s);
  return seconds > 0 ? 1 / seconds : 0;
}

struct plan_cluster plan_cluster_of(const struct vf_plan_request *r) {
  struct plan_cluster c = {r->gpus_per_node ? r->gpus_per_node : PLAN_NODE_GPUS,
                           r->network_gbps > 0 ? r->network_gbps : PLAN_NETWORK_GBPS,
                           r->profile ? pipeline_chunks(VF_PP_INTERLEAVED, r->profile) : 1};
  return c;
}

double vf_plan_tokens_per_second(const struct vf_model *m, const struct vf_setup *s,
                                 const struct vf_estimate *e, const struct vf_gpu_spec *gpu) {
  const struct plan_cluster c = {PLAN_NODE_GPUS, PLAN_NETWORK_GBPS, 2};
  return plan_rate(m, s, e->params, e->trainable_params, e->by_category[VF_CAT_ACTIVATIONS], gpu, &c);
}
