#!/usr/bin/env bash
# vramfit trace end to end on tiny configs with the hf tracer (make trace-env builds its
# environment; without it this test fails, it does not skip): text and --json output, the
# events kept with --events, and the refusals: unknown model, a setup the tracer cannot
# run, a missing environment, bad flags.
NAME=trace
source "$(dirname "$0")/lib/harness.sh"

TINY=$SRC/tests/data/trace
if [ ! -x "${VRAMFIT_TRACE_ENV:-$SRC/.venv-trace}/hf/bin/python" ]; then
  bad "the hf tracer environment is missing: run 'make trace-env'"
  finish
  exit
fi

# --json: the contract's fields, a peak at least the two cuBLAS workspaces of an H100.
run trace "$TINY/tiny-llama" --weights bf16 --batch 2 --seq 128 --json --events "$TMP/events"
if [ "$rc" -ne 0 ]; then
  bad "trace --json: exit $rc ($(tail -n 3 "$TMP/err"))"
else
  python3 - "$TMP/out" <<'PY' && ok || bad "trace --json fields: $(head -c 400 "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1]))
t = d["traced"]
assert t["allocated_bytes"] >= 2 * 32 * 2**20 and t["reserved_bytes"] >= t["allocated_bytes"]
assert t["phase"] in t["phases"] and list(t["phases"]) == ["load", "forward", "loss", "backward", "optimizer"]
assert d["framework"]["name"] == "hf" and d["framework"]["version"]
assert d["torch"].startswith("2.") and d["seconds"] > 0
assert d["sdpa_backends"] == {"flash": 4}
PY
  head -1 "$TMP/events" | grep -qx "vramfit-trace-events 1" && ok || bad "--events: no event file"
  grep -q "^trace: .* backward" "$TMP/err" && ok || bad "no progress on stderr"
fi

# text: the phases and the two peaks.
run trace "$TINY/tiny-llama" --method lora --batch 1 --seq 64
grep -q "max_memory_allocated" "$TMP/out" && grep -q "<- peak" "$TMP/out" && [ "$rc" -eq 0 ] && ok ||
  bad "trace text: exit $rc: $(head -c 300 "$TMP/out")"

# A training config names the model and the setup; its validation setting is the
# estimator's (the tracer runs the framework's loop).
printf 'model_name_or_path: %s\noutput_dir: out\nper_device_train_batch_size: 2\nmax_seq_length: 64\neval_strategy: steps\n' \
  "$TINY/tiny-llama" >"$TMP/train.yaml"
run trace "$TMP/train.yaml" --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["traced"]["allocated_bytes"] > 0' "$TMP/out" 2>/dev/null &&
  [ "$rc" -eq 0 ] && ok || bad "trace of a training config: exit $rc: $(tail -n 2 "$TMP/err")"

# A Hub id of the local Hub cache: the tracer builds the model from the snapshot's config.
hub=$HF_HUB_CACHE/models--org--tiny-llama
mkdir -p "$hub/refs" "$hub/snapshots/0123abcd"
printf 0123abcd >"$hub/refs/main"
cp "$TINY/tiny-llama/config.json" "$hub/snapshots/0123abcd/"
run trace Org/Tiny-Llama --method lora --batch 1 --seq 64
grep -q "<- peak" "$TMP/out" && [ "$rc" -eq 0 ] && ok || bad "trace of a Hub id: exit $rc: $(head -c 300 "$TMP/err")"

# refusals, each one line and its exit code
fails 2 "unknown model 'no-such-model'" trace no-such-model
fails 2 "hybrid_shard is FSDP1's" trace "$TINY/tiny-llama" --gpus 4 --shard hsdp --dp-replicate 2
fails 2 "traces shard with FSDP only" trace "$TINY/tiny-llama" --gpus 2 --shard zero3
fails 2 "sharding needs --gpus 2 or more" trace "$TINY/tiny-llama" --shard fsdp
fails 2 "--tp 2: traces run data parallelism only" trace "$TINY/tiny-llama" --gpus 2 --tp 2
fails 2 "selective" trace "$TINY/tiny-llama" --grad-ckpt selective
fails 2 "--eval is the estimator's" trace "$TINY/tiny-llama" --eval yes
fails 2 "--batch" trace "$TINY/tiny-llama" --batch many
fails 2 "MODEL is missing" trace
fails 2 "no tracer driver" trace "$TINY/tiny-llama" --framework megatron
# many GPUs: torchtune's distributed recipes, rank 0 of a fake process group
if [ -x "${VRAMFIT_TRACE_ENV:-$SRC/.venv-trace}/torchtune/bin/python" ]; then
  fails 2 "always shard with FSDP2" trace "$TINY/tiny-llama" --framework torchtune --weights bf16 --gpus 2
  run trace "$TINY/tiny-llama-nf4" --framework torchtune --weights bf16 --batch 2 --seq 128 --gpus 2 --shard fsdp --json
  [ "$rc" -eq 0 ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["traced"]["allocated_bytes"] > 0' "$TMP/out" &&
    ok || bad "trace torchtune --gpus 2 --shard fsdp: exit $rc ($(tail -n 1 "$TMP/err"))"
else
  bad "the torchtune tracer environment is missing: run 'make trace-env'"
fi
VRAMFIT_TRACE_ENV=$TMP/nowhere fails 3 "make trace-env" trace "$TINY/tiny-llama"
succeeds "usage: vramfit trace" trace --help

finish
