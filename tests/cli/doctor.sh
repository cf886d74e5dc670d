#!/usr/bin/env bash
# vramfit doctor: environment checks against the scripted fake NVML, and the explanation of
# out-of-memory reports of several PyTorch versions, cuBLAS, cuDNN, NCCL, JAX and
# TensorFlow (tests/data/oom).
#
# Run by CTest with VRAMFIT, VF_SOURCE_DIR, VF_TEST_TMP and FAKE_NVML_LIB set.
NAME=doctor
source "$(dirname "$0")/lib/harness.sh"
source "$(dirname "$0")/lib/nvml.sh"
LOGS=$SRC/tests/data/oom
unset PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING \
  XLA_PYTHON_CLIENT_PREALLOCATE XLA_PYTHON_CLIENT_MEM_FRACTION TF_FORCE_GPU_ALLOW_GROWTH
cat >"$TMP/quiet.nvml" <<'EOF'
gpu index=0 name="NVIDIA A100-SXM4-80GB" uuid=GPU-a total=81920MiB cc=8.0
gpu index=1 name="NVIDIA A100-SXM4-80GB" uuid=GPU-b total=81920MiB cc=8.0
EOF
cat >"$TMP/busy.nvml" <<'EOF'
gpu index=0 name="NVIDIA L4" uuid=GPU-a total=23034MiB
gpu index=1 name="NVIDIA A100-SXM4-80GB" uuid=GPU-b total=80GiB
proc gpu=0 pid=3999999 name=/usr/bin/jupyter used=6GiB
EOF

# --- a healthy machine and a clean log: nothing to report
under "$TMP/quiet.nvml" doctor --log "$LOGS/no-oom.log"
expect 0 "healthy"
has "ok    driver     NVIDIA 555.42.06, CUDA 12.5, 2 GPUs" "driver line"
has "no process holds memory" "idle GPU"
has "no out-of-memory report" "clean log"
has "0 problems found" "summary"
hasnt "order" "identical GPUs need no CUDA_DEVICE_ORDER"
if grep -q $'\033' "$TMP/out"; then bad "escape codes off a terminal"; else ok; fi

# --- another process on the run's GPU; mixed GPUs without CUDA_DEVICE_ORDER
under "$TMP/busy.nvml" doctor
expect 1 "busy GPU"
has "warn  gpu 0      NVIDIA L4: 16.49 GiB free of 22.49 GiB; 1 other process holds 6.00 GiB: 3999999 jupyter (6.00 GiB)" "other process"
has "CUDA_DEVICE_ORDER=PCI_BUS_ID" "device order"
CUDA_DEVICE_ORDER=PCI_BUS_ID under "$TMP/busy.nvml" doctor
hasnt "warn  order" "device order set"

# --- CUDA_VISIBLE_DEVICES
CUDA_VISIBLE_DEVICES= under "$TMP/quiet.nvml" doctor
expect 1 "empty CUDA_VISIBLE_DEVICES"
has "FAIL  visible    CUDA_VISIBLE_DEVICES='' hides every GPU" "hides every GPU"
CUDA_VISIBLE_DEVICES=GPU-b under "$TMP/quiet.nvml" doctor
expect 0 "visible by UUID"
has "the run starts on GPU 1" "visible by UUID"
CUDA_VISIBLE_DEVICES=0,7,1 under "$TMP/quiet.nvml" doctor
expect 1 "bad entry"
has "CUDA stops at '7', so the run sees only 1 GPU" "bad entry"

# --- the allocator variables: which one PyTorch reads, and what it changes
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under "$TMP/quiet.nvml" doctor
expect 0 "expandable segments"
has "ok    allocator  PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True': segments grow in place" "effect"
PYTORCH_ALLOC_CONF=max_split_size_mb:512 under "$TMP/quiet.nvml" doctor
expect 1 "new name only"
has "only PYTORCH_ALLOC_CONF is set" "new name only"
has "blocks over 512 MiB are never split" "max_split effect"
PYTORCH_ALLOC_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 \
  under "$TMP/quiet.nvml" doctor
has "differ: PyTorch >= 2.8 reads only the first" "both names differ"
PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True under "$TMP/quiet.nvml" doctor
expect 1 "unknown key"
has "FAIL  allocator  PyTorch will refuse it: PYTORCH_CUDA_ALLOC_CONF" "unknown key"

# --- free memory against a plan
echo '{"recommended": {"peak_device_bytes": 21474836480}}' >"$TMP/fits.json"
echo '{"peak": {"device_bytes": 107374182400}}' >"$TMP/huge.json"
under "$TMP/quiet.nvml" doctor --plan "$TMP/fits.json"
expect 0 "plan fits"
has "ok    plan       the plan needs 20.00 GiB on GPU 0; 80.00 GiB is free" "plan fits"
under "$TMP/busy.nvml" doctor --plan "$TMP/fits.json"
expect 1 "plan squeezed"
has "FAIL  plan       the plan needs 20.00 GiB on GPU 0; 16.49 GiB is free of 22.49 GiB: other processes hold the rest" "plan squeezed"
under "$TMP/quiet.nvml" doctor --plan "$TMP/huge.json"
has "the GPU is too small for it" "estimate too big"
echo '{"recommended": {}' >"$TMP/broken.json"
under "$TMP/quiet.nvml" doctor --plan "$TMP/broken.json"
expect 2 "malformed plan"

# --- out-of-memory reports and their causes
check_log() { # check_log FILE SOURCE CAUSE
  under "$TMP/quiet.nvml" doctor --log "$LOGS/$1"
  expect 1 "$1"
  has "$2 out-of-memory report" "$1: source"
  has "cause: $3" "$1: cause"
}
check_log pytorch-1.0-cached.log PyTorch "the setting needs more memory than the GPU has"
has "vramfit plan MODEL --gpu 11.17GiB" "plan suggestion"
check_log pytorch-1.13-fragmentation.log PyTorch "fragmentation: 9.62 GiB sat reserved but unallocated"
has "expandable_segments:True" "fragmentation fix"
check_log pytorch-2.1-other-process.log PyTorch "another process: 6.02 GiB"
check_log pytorch-2.3-fragmentation.log PyTorch "fragmentation"
check_log pytorch-2.4-leak.log PyTorch "memory crept up"
check_log pytorch-2.5-too-large.log PyTorch "the setting needs more memory"
has "GPU 0: asked for 3.91 GiB, capacity 23.55 GiB, free 1.37 GiB" "numbers"
check_log torchrun-ranks.log PyTorch "the setting needs more memory"
has "(3 in the log)" "several reports"
check_log cublas.log cuBLAS "cuBLAS could not get memory"
has "report (likely)" "cuBLAS is likely, not certain"
check_log cudnn.log cuDNN "cuDNN could not get memory"
check_log nccl.log NCCL "NCCL could not get memory"
check_log jax.log JAX/XLA "the setting needs more memory"
has "asked for 6.00 GiB" "JAX numbers"
has "XLA_PYTHON_CLIENT_PREALLOCATE" "JAX preallocation"
check_log jax-request.log JAX/XLA "the setting needs more memory"
check_log tensorflow.log TensorFlow "the setting needs more memory"
has "GPU 0: asked for 196.00 MiB, capacity 13.34 GiB" "TensorFlow numbers"
check_log host-ram.log "host memory" "host memory (RAM) ran out"
under "$TMP/quiet.nvml" doctor --log "$LOGS/jax-warning-only.log"
expect 0 "XLA warning is not an OOM"

# Real reports that were misread once (each file is one of them, rewritten).
check_log container-self-listed.log PyTorch "the setting needs more memory than the GPU has. Process 121503 is this run itself"
has "process 121503 (this run) 14.59 GiB, other processes 0 B" "the listed run is not another process"
check_log container-zero-bytes.log PyTorch "the setting needs more memory than the GPU has. Process 3017 is this run itself"
check_log pytorch-1.12-outside.log PyTorch "memory held outside PyTorch: 6.47 GiB"
check_log pytorch-1.3-free-not-full.log PyTorch "not a full GPU: 9.28 GiB was free, more than the 12.50 MiB asked for"
has "the setting itself need not shrink" "not-full advice"
check_log pytorch-2.6-private-pools.log PyTorch "the setting needs more memory"
has "in private pools 46.00 MiB, reserved but unallocated 736.86 MiB" "private pools keep the reserved figure"
check_log two-workers.log PyTorch "another process: 17.85 GiB"
hasnt "35.70 GiB" "two reports summed"
check_log pytorch-1.9-fraction.log PyTorch "a memory limit: the process may use only 1.05 GiB of the 14.76 GiB GPU"
has "vramfit plan MODEL --gpu 1.05GiB" "plan for the limit, not the GPU"
under "$TMP/quiet.nvml" doctor --log "$LOGS/tensorflow-retries-finished.log"
expect 0 "TensorFlow INFO retries of a run that finished"
has "no out-of-memory report" "INFO retries are not reports"
check_log tensorflow-retries-then-oom.log TensorFlow "the setting needs more memory"
has "line 10: TensorFlow" "the real TensorFlow report, not the retry"
has "asked for 39.81 MiB, capacity 7.24 GiB" "size from the allocator's line"
check_log host-not-enough.log "host memory" "host memory (RAM) ran out"
has "asked for 25.00 GiB" "host request size"
check_log xla-resource-exhausted-case.log JAX/XLA "the setting needs more memory"
check_log xla-out-of-memory-allocating.log JAX/XLA "the setting needs more memory"
has "asked for 16.00 GiB" "XLA size"
check_log xla-cumemallocasync.log JAX/XLA "the setting needs more memory"
check_log nccl-cuda-failure-2.log NCCL "NCCL could not get memory"
has "asked for 6.00 MiB" "NCCL calloc size"
check_log pytorch-0.4-runtime-error.log PyTorch "the setting needs more memory"

# --- --json: every finding, the report's numbers and its cause
under "$TMP/quiet.nvml" doctor --log "$LOGS/container-self-listed.log" --json
expect 1 "doctor --json"
pycheck "doctor --json" "$TMP/out" "
r = j['log']['report']
assert j['problems'] == 1, j['problems']
assert {'level', 'topic', 'message'} <= set(j['findings'][0]), j['findings'][0]
assert [f['level'] for f in j['findings'] if f['topic'] == 'log'] == ['fail'], j['findings']
assert j['log']['file'].endswith('container-self-listed.log')
assert (r['source'], r['line'], r['count'], r['gpu'], r['cause']) == ('PyTorch', 7, 1, 0, 'too_large'), r
n = r['numbers']
assert n['process_bytes'] is None and n['other_process_bytes'] == 0, n
assert abs(n['tried_bytes'] - 1.96 * 2**30) < 0.01 * 2**30, n
assert r['processes'] == [{'pid': 121503, 'bytes': n['listed_process_bytes'], 'this_run': True}], r
assert r['explanation'].startswith('the setting needs more memory') and 'vramfit plan' in r['fix']
print('ok')"
under "$TMP/quiet.nvml" doctor --log "$LOGS/no-oom.log" --json
expect 0 "doctor --json, clean log"
pycheck "doctor --json, clean log" "$TMP/out" "
assert j['log'] == {'file': j['log']['file'], 'report': None} and j['problems'] == 0, j
print('ok')"
VRAMFIT_NVML=$TMP/none.so under "$TMP/quiet.nvml" doctor --json
expect 3 "doctor --json without a driver"
pycheck "doctor --json without a driver" "$TMP/out" "
assert j['findings'][0]['level'] == 'fail' and j['findings'][0]['topic'] == 'driver', j
assert j['log'] is None
print('ok')"

# A 'vramfit watch' log that warned about growth, then the OOM.
{
  echo '{"index":0,"warnings":["GPU 0 pid 42 (python3): memory keeps growing after warm-up (+60.0 MiB/min, now 70.00 GiB); out of memory in ~9 min at this rate"]}'
  cat "$LOGS/pytorch-2.5-too-large.log"
} >"$TMP/watched.log"
under "$TMP/quiet.nvml" doctor --log "$TMP/watched.log"
has "cause: a leak: 'vramfit watch' saw" "watch warning names the leak"

# --- no driver: the log is still read, and the missing driver is no problem of the log;
# without a log, exit 3
VRAMFIT_NVML=$TMP/none.so under "$TMP/quiet.nvml" doctor --log "$LOGS/pytorch-1.13-fragmentation.log"
expect 1 "no driver, log"
has "info  driver" "no driver said"
has "(the log is read all the same)" "no driver said, the log read"
has "cause: fragmentation" "log read without a driver"
has "1 problem found" "the log's problem only"
VRAMFIT_NVML=$TMP/none.so under "$TMP/quiet.nvml" doctor --log "$LOGS/no-oom.log"
expect 0 "no driver, a clean log"
has "0 problems found" "a clean log without a driver"
VRAMFIT_NVML=$TMP/none.so under "$TMP/quiet.nvml" doctor
expect 3 "no driver, no log"

# --- bad input
under "$TMP/quiet.nvml" doctor --log "$TMP/missing.log"
expect 2 "missing log"
if [ "$(wc -l <"$TMP/err")" = 1 ]; then ok; else bad "missing log: not one line"; fi
under "$TMP/quiet.nvml" doctor --bogus
expect 2 "unknown option"
under "$TMP/quiet.nvml" doctor --help
expect 0 "help"

finish
