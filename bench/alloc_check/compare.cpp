// Replays vramfit trace event files through PyTorch's own caching allocator (the
// libc10_cuda.so of the torch wheel, running on fakecudart.c) and through vramfit's model
// of it (libvramfit.so), event by event, and compares reserved bytes and segment counts
// after every event.
//
//   compare [--every] EVENTS...
//
// The allocator's configuration is the environment's (PYTORCH_ALLOC_CONF, read by both
// sides); the device's capacity VF_FAKE_CUDA_CAPACITY (unlimited by default, as `vramfit
// trace` replays). One line per file: events, peak reserved on each side, the largest
// difference in reserved at any event (bytes and percent of PyTorch's figure there), how
// many events differ in reserved and in segments, and the first event that differs;
// --every prints every event that differs. Exit status 1 when a file differs anywhere.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/PeerToPeerAccess.h>
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "vramfit/alloc.h"
#include "vramfit/trace.h"
}

// Exported by libc10_cuda.so, declared in no installed header: ATen's CUDA hooks register
// the primary-context check there (CUDAHooks::init), which MaybeSetDevice asks before a
// stream is made.
namespace c10::cuda::_internal {
C10_CUDA_API void setHasPrimaryContext(bool (*func)(DeviceIndex));
}

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

struct Sides {
  uint64_t reserved, segments, allocated;
};

struct Outcome {
  uint64_t events = 0, peak_torch = 0, peak_model = 0, worst = 0, worst_at = 0;
  uint64_t worst_torch = 0, reserved_diffs = 0, segment_diffs = 0, first = UINT64_MAX;
  uint64_t allocated_diffs = 0;
  uint64_t ooms = 0, oom_diffs = 0; // out-of-memory allocations, and those one side alone had
};

bool read_file(const char* path, std::string* out) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return false;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  std::fclose(f);
  return true;
}

// The trace's stream numbers as PyTorch streams: 0 the default stream, others from the pool.
c10::cuda::CUDAStream stream_of(std::map<uint32_t, c10::cuda::CUDAStream>* streams, uint32_t id) {
  auto it = streams->find(id);
  if (it != streams->end()) return it->second;
  auto s = id == 0 ? c10::cuda::getDefaultCUDAStream(0) : c10::cuda::getStreamFromPool(false, 0);
  streams->emplace(id, s);
  return s;
}

Sides torch_side() {
  auto st = cca::get()->getDeviceStats(0);
  const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {static_cast<uint64_t>(st.reserved_bytes[all].current),
          static_cast<uint64_t>(st.segment[all].current),
          static_cast<uint64_t>(st.allocated_bytes[all].current)};
}

Sides model_side(const vf_allocator* a) {
  vf_alloc_stats s;
  vf_allocator_stats(a, &s);
  return {s.reserved, s.segments, s.allocated};
}

struct Replay {
  vf_allocator model{};
  std::vector<c10::DataPtr> torch_blocks;
  std::vector<uint64_t> model_blocks;
  std::vector<bool> dead;  // allocations that ran out of memory
  std::map<uint32_t, c10::cuda::CUDAStream> streams;
  struct Event {
    cudaEvent_t torch = nullptr;
    uint64_t mark = 0;
  };
  std::vector<Event> events;  // the trace's CUDA events, on both sides
};

// An allocation on both sides. Where the device is full, both must say so (PyTorch
// throws, the model returns VF_ERANGE); the storage then never lives, and its later
// events are skipped.
bool allocate(Replay* r, const vf_trace_event& e, Outcome* o) {
  c10::cuda::setCurrentCUDAStream(stream_of(&r->streams, e.stream));
  bool torch_oom = false;
  try {
    r->torch_blocks[e.id] = cca::get()->allocate(e.bytes);
  } catch (const c10::OutOfMemoryError&) {
    torch_oom = true;
  }
  int rc = vf_allocator_malloc(&r->model, e.bytes, e.stream, &r->model_blocks[e.id]);
  bool model_oom = rc == VF_ERANGE;
  o->ooms += torch_oom || model_oom;
  o->oom_diffs += torch_oom != model_oom;
  if (torch_oom || model_oom) {
    r->torch_blocks[e.id].clear();
    if (!model_oom) vf_allocator_free(&r->model, r->model_blocks[e.id]);
    r->model_blocks[e.id] = 0;
    r->dead[e.id] = true;
    return true;
  }
  return rc == 0;
}

// One event on both sides; false when the file is inconsistent.
bool apply(Replay* r, const vf_trace_event& e, Outcome* o) {
  bool storage = e.kind == VF_TRACE_ALLOC || e.kind == VF_TRACE_FREE || e.kind == VF_TRACE_RECORD;
  if (storage && e.kind != VF_TRACE_ALLOC && r->dead[e.id]) return true;
  switch (e.kind) {
    case VF_TRACE_ALLOC:
      r->dead[e.id] = false;
      return allocate(r, e, o);
    case VF_TRACE_FREE:
      r->torch_blocks[e.id].clear();
      return vf_allocator_free(&r->model, r->model_blocks[e.id]) == 0;
    case VF_TRACE_RECORD:
      if (!r->model_blocks[e.id]) return true;  // a tensor of no bytes
      cca::get()->recordStream(r->torch_blocks[e.id], stream_of(&r->streams, e.stream));
      return vf_allocator_record_stream(&r->model, r->model_blocks[e.id], e.stream) == 0;
    case VF_TRACE_SYNC:
      if (e.stream == VF_ALLOC_ALL_STREAMS) cudaDeviceSynchronize();
      else cudaStreamSynchronize(stream_of(&r->streams, e.stream).stream());
      vf_allocator_sync(&r->model, e.stream, VF_ALLOC_ALL_WORK);
      return true;
    case VF_TRACE_EVENT: {
      auto& ev = r->events[e.id];
      if (!ev.torch) cudaEventCreateWithFlags(&ev.torch, cudaEventDisableTiming);
      cudaEventRecord(ev.torch, stream_of(&r->streams, e.stream).stream());
      return vf_allocator_record_event(&r->model, e.stream, &ev.mark) == 0;
    }
    case VF_TRACE_WAIT: {
      auto& ev = r->events[e.id];
      if (ev.torch) cudaEventSynchronize(ev.torch);
      if (ev.mark) vf_allocator_sync(&r->model, VF_ALLOC_ALL_STREAMS, ev.mark);
      return true;
    }
    case VF_TRACE_EMPTY_CACHE:
      cca::get()->emptyCache();
      return vf_allocator_empty_cache(&r->model) == 0;
    default:
      return true;
  }
}

void observe(Outcome* o, uint64_t at, const Sides& t, const Sides& m, bool every) {
  o->peak_torch = std::max(o->peak_torch, t.reserved);
  o->peak_model = std::max(o->peak_model, m.reserved);
  uint64_t diff = t.reserved > m.reserved ? t.reserved - m.reserved : m.reserved - t.reserved;
  if (diff > o->worst) {
    o->worst = diff;
    o->worst_at = at;
    o->worst_torch = t.reserved;
  }
  bool differs = diff || t.segments != m.segments;
  o->reserved_diffs += diff != 0;
  o->segment_diffs += t.segments != m.segments;
  o->allocated_diffs += t.allocated != m.allocated;
  if (differs && o->first == UINT64_MAX) o->first = at;
  if (differs && every)
    std::printf("  event %" PRIu64 ": reserved %" PRIu64 " / %" PRIu64 ", segments %" PRIu64 " / %" PRIu64
                ", allocated %" PRIu64 " / %" PRIu64 " (torch / vramfit)\n",
                at, t.reserved, m.reserved, t.segments, m.segments, t.allocated, m.allocated);
}

bool compare_file(const char* path, const vf_alloc_conf& conf, uint64_t capacity, bool every, Outcome* o) {
  std::string text;
  vf_trace t;
  vf_trace_init(&t);
  vf_diag d{};
  if (!read_file(path, &text) || vf_trace_parse(text.data(), text.size(), &t, &d) != 0) {
    std::fprintf(stderr, "compare: %s: cannot read the events (line %d)\n", path, d.line);
    return false;
  }
  Replay r;
  r.torch_blocks.resize(t.max_id + 1);
  r.model_blocks.assign(t.max_id + 1, 0);
  r.dead.assign(t.max_id + 1, false);
  r.events.resize(t.max_event + 1);
  bool ok = vf_allocator_init(&r.model, &conf, capacity) == 0;
  for (size_t i = 0; ok && i < t.n; i++) {
    ok = apply(&r, t.events[i], o);
    observe(o, i + 1, torch_side(), model_side(&r.model), every);
  }
  o->events = t.n;
  r.torch_blocks.clear();  // every block back to PyTorch's cache,
  cca::get()->emptyCache();  // and the cache to the device, for the next file
  vf_allocator_cleanup(&r.model);
  vf_trace_cleanup(&t);
  if (!ok) std::fprintf(stderr, "compare: %s: an event the allocators refused\n", path);
  return ok;
}

double mib(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  bool every = argc > 1 && std::strcmp(argv[1], "--every") == 0;
  vf_alloc_conf conf;
  vf_diag d{};
  if (vf_alloc_conf_from_env(std::getenv("PYTORCH_ALLOC_CONF"), std::getenv("PYTORCH_CUDA_ALLOC_CONF"), nullptr,
                             &conf, &d) != 0) {
    std::fprintf(stderr, "compare: the allocator configuration is refused: %s\n", d.msg);
    return 2;
  }
  const char* cap = std::getenv("VF_FAKE_CUDA_CAPACITY");
  uint64_t capacity = cap && *cap ? std::strtoull(cap, nullptr, 10) : 0;
  // As torch.cuda's initialization does (THCPModule_initExtension).
  c10::cuda::detail::init_p2p_access_cache(1);
  c10::cuda::_internal::setHasPrimaryContext([](c10::DeviceIndex) { return true; });
  cca::get()->init(1);
  int status = 0;
  std::printf("%-28s %8s %12s %12s %12s %8s %8s %8s %8s\n", "events file", "events", "torch MiB", "vramfit MiB",
              "worst MiB", "worst %", "res diff", "seg diff", "first");
  for (int i = every ? 2 : 1; i < argc; i++) {
    Outcome o;
    if (!compare_file(argv[i], conf, capacity, every, &o)) status = 2;
    const char* base = std::strrchr(argv[i], '/');
    double pct = o.worst_torch ? 100.0 * static_cast<double>(o.worst) / static_cast<double>(o.worst_torch) : 0;
    std::printf("%-28s %8" PRIu64 " %12.1f %12.1f %12.1f %7.2f%% %8" PRIu64 " %8" PRIu64 " %8s\n",
                base ? base + 1 : argv[i], o.events, mib(o.peak_torch), mib(o.peak_model), mib(o.worst), pct,
                o.reserved_diffs, o.segment_diffs,
                o.first == UINT64_MAX ? "-" : std::to_string(o.first).c_str());
    if (o.ooms) std::printf("  %" PRIu64 " allocations out of memory, %" PRIu64 " on one side only\n", o.ooms, o.oom_diffs);
    if ((o.first != UINT64_MAX || o.oom_diffs) && status == 0) status = 1;
  }
  return status;
}
