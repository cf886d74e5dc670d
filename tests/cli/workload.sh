#!/usr/bin/env bash
# Workloads: `plan --workload` on the example (every stage within the budget, a larger GPU
# never less work per step, the contract's JSON, exit 1 when nothing fits) and bad specs
# (one line naming file:line, exit 2).
NAME=workload
source "$(dirname "$0")/lib/harness.sh"

EX=$SRC/examples/contrastive-embedder
cp -r "$EX" "$TMP/ex"
rm -f "$TMP/ex/"*.trace.json # planned from the parts, not from a trace a developer left
W=$TMP/ex/workload.yaml
GIB=$((1 << 30))

# ---- a 24 GiB plan keeps every stage within 85% of it (the workload's safety) -------------
run plan --workload "$W" --gpu 24GiB --json
cp "$TMP/out" "$TMP/plan24.json"
check=$(python3 - "$TMP/out" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["workload"] == "contrastive-embedder" and d["found"] is True
cap = d["capacity_bytes"]
assert cap == 24 * 2**30, cap
assert len(d["stages"]) == 5
for s in d["stages"]:
    for k, t in {"name": str, "file": str, "batch": int, "accumulation": int, "effective_batch": int,
                 "knobs": dict, "peak_device_bytes": int, "budget_bytes": int}.items():
        assert isinstance(s[k], t), (k, s)
    assert s["peak_device_bytes"] <= 0.85 * cap, s
    assert s["budget_bytes"] <= 0.85 * cap
    # The target, or the nearest to it that the micro batch reaches (above: by less than the
    # accumulation; below: by at most half the micro batch).
    assert s["effective_batch"] == s["batch"] * s["accumulation"], s
    over = s["effective_batch"] - 256
    assert (0 <= over < s["accumulation"]) or (0 < -over <= s["batch"] // 2), s
    assert set(s["knobs"]) == {"n_positives", "n_negatives"}
    assert s["set"] == {"n_positives": s["knobs"]["n_positives"], "n_negatives": s["knobs"]["n_negatives"]}
    assert sum(s["breakdown"].values()) == s["peak_device_bytes"], s["breakdown"]
    lo = (16, 16) if s["name"] == "01" else (8, 4)
    hi = (32, 32) if s["name"] == "01" else (16, 16)
    assert lo[0] <= s["knobs"]["n_positives"] <= hi[0] and lo[1] <= s["knobs"]["n_negatives"] <= hi[1], s
assert d["recommended"] == d["stages"][0]
assert d["shared"]["set"] == {"data_loader.batch_size": d["stages"][0]["batch"],
                              "training.trainer.accumulate_grad_batches": d["stages"][0]["accumulation"]}
assert d["changes"] and all(isinstance(c, str) for c in d["changes"])
print("ok")
PY
)
[ "$rc" -eq 0 ] && [ "$check" = ok ] && ok || bad "plan --workload 24GiB: $check"

# ---- a larger GPU never gets less work per step ------------------------------------------
prev=""
for g in 8 12 16 24 32 40 48 64 80 96 141; do
  run plan --workload "$W" --gpu "${g}GiB" --json
  [ "$rc" -eq 0 ] || { bad "plan --workload ${g}GiB: exit $rc"; continue; }
  work=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(str(s["batch"] * s["sequences"]) for s in d["stages"]))' "$TMP/out")
  if [ -n "$prev" ]; then
    less=$(python3 -c 'import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); print(sum(int(y) < int(x) for x, y in zip(a, b)))' "$prev" "$work")
    [ "$less" -eq 0 ] && ok || bad "${g}GiB does less work per step than the GPU before it: $prev -> $work"
  fi
  prev=$work
done

# ---- text output, the target, --safety ------------------------------------------------------
# The effective batch is the nearest to the target that the largest micro batch that fits
# reaches: accumulation = round(target / micro); where that overshoots, the smallest micro
# batch that still reaches the target, micro = ceil(target / accumulation).
nearest() {
  python3 -c '
import re, sys
m = re.search(r"^micro batch (\d+), accumulation (\d+): effective batch (\d+) \(target (\d+)\)$", open(sys.argv[1]).read(), re.M)
micro, acc, eff, target = map(int, m.groups())
assert eff == micro * acc, m.group(0)
assert micro == -(-target // acc) if eff >= target else target - eff <= micro // 2, m.group(0)' "$TMP/out" && ok || bad "not the nearest effective batch: $(head -2 "$TMP/out")"
}
succeeds '^micro batch [0-9]+, accumulation [0-9]+: effective batch [0-9]+ \(target 256\)$' plan --workload "$W" --gpu 24GiB
nearest
grep -q '^  01 ' "$TMP/out" && grep -q '^  activations ' "$TMP/out" && ok || bad "no stage table or breakdown: $(cat "$TMP/out")"
succeeds 'effective batch [0-9]+ \(target 512\)' plan --workload "$W" --gpu 80GiB --target-effective-batch 512
nearest
run plan --workload "$W" --gpu 24GiB --safety 0.6 --json
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert all(s["peak_device_bytes"] <= 0.6 * 24 * 2**30 for s in d["stages"])' "$TMP/out" && ok || bad "--safety 0.6 not held"

# ---- a stage fits as a model plan judges it: the high end of its range, within --safety ------
run plan --workload "$W" --gpu 24GiB --json
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["stages"]:
    r = s["peak_device_range"]
    assert r["low"] < s["peak_device_bytes"] < r["high"] <= s["budget_bytes"] and s["fits"], s' "$TMP/out" && ok ||
  bad "plan --workload does not hold the high end to the budget"
# --gpus N: data parallel, every GPU counted in the effective batch.
run plan --workload "$W" --gpu 24GiB --gpus 2 --json
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["gpus"] == 2
for s in d["stages"]:
    assert s["effective_batch"] == s["batch"] * s["accumulation"] * 2 and 256 <= s["effective_batch"] < 256 + 2 * s["accumulation"], s' \
  "$TMP/out" && ok || bad "plan --workload --gpus 2: exit $rc $(head -c 300 "$TMP/err")"
# --keep names the workload's knobs, held at the values the configs give (24 and 8 negatives).
run plan --workload "$W" --gpu 24GiB --keep n_negatives --json
[ "$(python3 -c 'import json,sys; print([s["knobs"]["n_negatives"] for s in json.load(open(sys.argv[1]))["stages"]])' "$TMP/out")" = "[24, 8, 8, 8, 8]" ] &&
  ok || bad "plan --workload --keep n_negatives: exit $rc $(head -c 300 "$TMP/err")"
fails 2 "^vramfit plan: --keep: 'seq' is not a knob of" plan --workload "$W" --gpu 24GiB --keep seq
# What a workload plan cannot honour is refused.
fails 2 '^vramfit plan: --calibrate: a workload plan takes --gpu, --gpus' plan --workload "$W" --gpu 24GiB --calibrate
fails 2 '^vramfit plan: --batch: a workload plan takes' plan --workload "$W" --gpu 24GiB --batch 8

# ---- nothing fits: exit 1 with the stage that does not ------------------------------------
run plan --workload "$W" --gpu 1GiB
[ "$rc" -eq 1 ] && grep -q '^nothing fits: stage 01 needs' "$TMP/out" && ok || bad "1GiB: exit $rc: $(tail -2 "$TMP/out")"

# ---- apply: the shared values into config.yaml, each stage's into its file, only values --
(cd "$TMP/ex" && "$VRAMFIT" apply conf/config.yaml conf/text_curriculum/*.yaml --plan "$TMP/plan24.json" \
  >"$TMP/out" 2>"$TMP/err")
rc=$?
check=$(python3 - "$TMP/plan24.json" "$TMP/ex" <<'PY' 2>&1
import json, os, re, sys
d, ex = json.load(open(sys.argv[1])), sys.argv[2]
files = ["conf/config.yaml"] + [s["file"] for s in d["stages"]]
for f in files:
    new, old = open(os.path.join(ex, f)).read().splitlines(), open(os.path.join(ex, f + ".backup")).read().splitlines()
    assert len(new) == len(old), f
    for a, b in zip(old, new):  # a changed line differs in its number only
        assert a == b or re.sub(r"\d+ *", "N", a) == re.sub(r"\d+ *", "N", b), (f, a, b)
def at(f, key):
    m = re.search(r"^ *" + key + r": (\d+)", open(os.path.join(ex, f)).read(), re.M)
    return int(m.group(1))
assert at("conf/config.yaml", "batch_size") == d["stages"][0]["batch"]
assert at("conf/config.yaml", "accumulate_grad_batches") == d["stages"][0]["accumulation"]
for s in d["stages"]:
    for k, v in s["knobs"].items():
        assert at(s["file"], k) == v, (s["file"], k)
print("ok")
PY
)
[ "$rc" -eq 0 ] && [ "$check" = ok ] && ok || bad "apply --plan of a workload plan: exit $rc: $check $(cat "$TMP/err")"
# Applied, the configs hold the plan: planning again changes nothing.
run plan --workload "$W" --gpu 24GiB
grep -q '^  the configs hold this plan already$' "$TMP/out" && ok || bad "a second plan still changes: $(grep -- '  - ' "$TMP/out")"

# ---- probe --stage: the stage's knobs in the command, confirmed at the planned batch ------
cat >"$TMP/train.sh" <<'EOF'
#!/bin/sh
# train.sh --batch=B --negatives=N: fits up to $T anchors per micro batch.
b=${1#--batch=}
echo "$b ${2#--negatives=} $VRAMFIT_N_NEGATIVES $VRAMFIT_N_POSITIVES $VRAMFIT_BATCH" >>"$TMP/launches"
if [ "$b" -gt "$T" ]; then
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." >&2
  exit 1
fi
EOF
chmod +x "$TMP/train.sh"
export TMP
probe_stage() { # T ARGS...
  : >"$TMP/launches"
  T=$1 VRAMFIT_NVML=/nonexistent/libnvidia-ml.so.1 "$VRAMFIT" probe --workload "$W" --gpu 24GiB "${@:2}" \
    -- "$TMP/train.sh" --batch={batch} --negatives={n_negatives} >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
}
probe_stage 400 --stage 02 --json
check=$(python3 - "$TMP/out" "$TMP/launches" "$TMP/plan24.json" <<'PY' 2>&1
import json, sys
d, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
stage = next(s for s in plan["stages"] if s["name"] == "02")
assert d["stage"] == {"name": "02", "knobs": stage["knobs"], "planned_batch": stage["batch"], "confirmed": True}, d["stage"]
assert d["max_batch"] == 400 and d["estimate_batch"] > 0, d
for line in open(sys.argv[2]).read().splitlines():
    b, neg, env_neg, env_pos, env_b = map(int, line.split())
    assert neg == env_neg == stage["knobs"]["n_negatives"] and env_pos == stage["knobs"]["n_positives"] and b == env_b, line
print("ok")
PY
)
[ "$rc" -eq 0 ] && [ "$check" = ok ] && ok || bad "probe --stage 02: exit $rc: $check $(cat "$TMP/err")"
# The real GPU holds less than planned: exit 1, not confirmed.
probe_stage 20 --stage 02
[ "$rc" -eq 1 ] && grep -q '^stage 02 not confirmed: the planned micro batch [0-9]* does not fit' "$TMP/out" && ok ||
  bad "probe --stage short of the plan: exit $rc: $(cat "$TMP/out" "$TMP/err")"
grep -q '^stage 02 of .*workload.yaml: n_negatives [0-9]*, n_positives [0-9]*; planned micro batch [0-9]*$' "$TMP/out" && ok ||
  bad "probe --stage text: $(head -2 "$TMP/out")"
fails 2 "--stage 09: .*workload.yaml has no such stage \(01, 02, 03, 04, 05\)" probe --workload "$W" --gpu 24GiB --stage 09 -- true
fails 2 "--workload and --stage go together" probe --workload "$W" --gpu 24GiB -- true
fails 2 "--gpu needs --model or --workload" probe --gpu 24GiB -- true

# ---- bad specs: one line naming file:line, exit 2 ------------------------------------------
bad_spec() { # NAME SED-EXPRESSION PATTERN
  sed "$2" "$W" >"$TMP/ex/$1.yaml"
  fails 2 "$3" plan --workload "$TMP/ex/$1.yaml" --gpu 24GiB
}
bad_spec unknown 's/1 + n_positives + n_negatives/1 + n_positives + n_negative/' \
  "^vramfit plan: .*/unknown\.yaml:[0-9]+:[0-9]+: sequences: unknown knob 'n_negative'"
bad_spec cycle 's/^  candidates: n_positives + n_negatives$/  candidates: n_positives + more\n  more: candidates - 1/' \
  "cycle\.yaml:[0-9]+:[0-9]+: defines refer to each other in a cycle: candidates -> more -> candidates$"
bad_spec nofile 's/03_stage.yaml/33_stage.yaml/' \
  "nofile\.yaml:[0-9]+:[0-9]+: stage '03': its file .*33_stage\.yaml does not exist$"
bad_spec range 's/n_negatives: {min: 16, max: 32}/n_negatives: {min: 16, max: 99}/' \
  "range\.yaml:[0-9]+:[0-9]+: stage '01': n_negatives range 16\.\.99 cannot be met within the knob's 1\.\.64$"
bad_spec empty 's/min: 1, max: 64, priority: 1/min: 65, max: 64, priority: 1/' \
  "empty\.yaml:[0-9]+:[0-9]+: knob 'n_negatives': min 65 is above max 64$"
bad_spec encoder 's|encoders/config.json, method: lora, lora_r: 8, lora_targets: "q,v", grad_ckpt: full, tokens: 128|nope.json, tokens: 128|' \
  "encoder\.yaml:[0-9]+:[0-9]+: encoder 'description': unknown model 'nope\.json'"
fails 2 "no-such\.yaml: cannot open" plan --workload "$TMP/no-such.yaml" --gpu 24GiB
fails 2 "give no MODEL" plan gpt2 --workload "$W" --gpu 24GiB
fails 2 "--gpu is required" plan --workload "$W"

finish
