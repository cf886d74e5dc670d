# A fake trainer whose peak grows with the batch, for the tests that run vramfit against the
# fake NVML (history.sh, probe.sh); sourced after lib/nvml.sh.
#
# Provides: `trainer DIR GPU_GIB`, which writes DIR/train.sh and DIR/gpu.nvml and sets
# FAKE_NVML_SCRIPT to the latter. train.sh BATCH holds FIXED + PER x BATCH MiB (the
# exported FIXED and PER; BATCH 0 when not given), out of memory above the GPU (having
# filled it). It stays until NVML has seen what it holds (the fake NVML makes PEAKFILE.seen)
# and holds nothing once it is gone, so the next launch starts from nothing.
trainer() {
  local dir=$1 gib=$2
  export PEAKFILE=$dir/peak GPU_MIB=$((gib * 1024))
  cat >"$dir/train.sh" <<'SH'
#!/bin/sh
peak=$((FIXED + PER * ${1:-0}))
trap 'rm -f "$PEAKFILE" "$PEAKFILE.seen"' EXIT
rm -f "$PEAKFILE.seen"
[ "$peak" -gt "$GPU_MIB" ] && echo "${GPU_MIB}MiB" >"$PEAKFILE" || echo "${peak}MiB" >"$PEAKFILE"
for _ in $(seq 600); do [ -e "$PEAKFILE.seen" ] && break; sleep 0.05; done
if [ "$peak" -gt "$GPU_MIB" ]; then
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
  exit 1
fi
SH
  chmod +x "$dir/train.sh"
  cat >"$dir/gpu.nvml" <<NVML
gpu index=0 name="NVIDIA L4" uuid=GPU-l4 total=${gib}GiB
proc gpu=0 pid=child used=file:$PEAKFILE
NVML
  export FAKE_NVML_SCRIPT=$dir/gpu.nvml
}
