#!/usr/bin/env bash
# `trace --workload` on the example's own model factory (the hf tracer environment; without
# it this test fails, it does not skip): four points traced and replayed, a fit that
# describes them, the estimate from the workload's parts within 10% of each traced peak, the
# file beside the workload, and `plan --workload` of a workload given by its factory only,
# which needs that file. Bad input: no factory, a broken fit file.
NAME=workload_trace
source "$(dirname "$0")/lib/harness.sh"

if [ ! -x "${VRAMFIT_TRACE_ENV:-$SRC/.venv-trace}/hf/bin/python" ]; then
  bad "the hf tracer environment is missing: run 'make trace-env'"
  finish
  exit
fi

cp -r "$SRC/examples/contrastive-embedder" "$TMP/ex"
rm -f "$TMP/ex"/*.trace.json
# The example's workload at four small points (both.yaml: its parts and its factory), and
# without its parts (factory.yaml): only the factory describes the model.
python3 - "$TMP/ex/workload.yaml" "$TMP/ex/both.yaml" "$TMP/ex/factory.yaml" <<'PY'
import re, sys
s = open(sys.argv[1]).read() + """
trace:
  points:
    - {batch: 4, n_negatives: 4, n_positives: 4}
    - {batch: 8, n_negatives: 4, n_positives: 4}
    - {batch: 16, n_negatives: 4, n_positives: 4}
    - {batch: 4, n_negatives: 12, n_positives: 4}
"""
open(sys.argv[2], "w").write(s)
s, n = re.subn(r"  encoders:.*?\n  heads:\n(    - [^\n]*\n)+", "", s, flags=re.S)
assert n == 1
open(sys.argv[3], "w").write(s)
PY
W=$TMP/ex/factory.yaml

fails 2 "factory\.yaml:[0-9]+:1: the model is a factory that has not been measured: run 'vramfit trace --workload" \
  plan --workload "$W" --gpu 24GiB

run trace --workload "$TMP/ex/both.yaml" --json
if [ "$rc" -ne 0 ]; then
  bad "trace --workload: exit $rc ($(tail -n 3 "$TMP/err"))"
else
  check=$(python3 - "$TMP/out" "$TMP/ex/both.trace.json" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
saved = json.load(open(sys.argv[2]))
assert saved["fit"] == d["fit"], "the file beside the workload holds another fit"
pts = d["points"]
assert [p["knobs"]["batch"] for p in pts] == [4, 8, 16, 4], pts
assert [p["sequences"] for p in pts] == [36, 72, 144, 68], [p["sequences"] for p in pts]
assert [p["loss_elements"] for p in pts] == [128, 512, 2048, 256]
for p in pts:
    assert p["reserved_bytes"] >= p["allocated_bytes"] > 500 * 2**20, p
    assert p["phase"] in ("forward", "loss", "backward", "optimizer"), p
    # The issue's check: the estimate from the parts agrees with the traced peak.
    assert abs(p["estimate_error"]) <= 0.10, p
    assert abs(p["estimate_allocated_bytes"] / p["allocated_bytes"] - 1 - p["estimate_error"]) < 1e-6, p
assert pts[0]["allocated_bytes"] < pts[1]["allocated_bytes"] < pts[2]["allocated_bytes"]
f = d["fit"]
assert f["points"] == 4 and f["terms"] == ["bytes", "per_sequence", "per_loss_element"], f
assert f["r2"] > 0.999 and f["max_error"] < 0.02, f
assert f["allocated_bytes"][1] > 0, f
for i in range(3):  # the categories sum to the allocated fit
    assert abs(sum(v[i] for v in f["breakdown"].values()) - f["allocated_bytes"][i]) < 1e-3 * max(1, abs(f["allocated_bytes"][i])), f
print("ok")
PY
)
  [ "$check" = ok ] && ok || bad "trace --workload --json: $check"
fi

# With the fit beside it, the factory's workload plans; at a traced point its peak is the
# traced one (allocated) within the fit's error.
cp "$TMP/ex/both.trace.json" "$TMP/ex/factory.trace.json"
run plan --workload "$W" --gpu 24GiB --json
check=$(python3 - "$TMP/out" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["found"], d
for s in d["stages"]:
    assert s["peak_device_bytes"] <= 0.85 * 24 * 2**30, s
    assert sum(s["breakdown"].values()) == s["peak_device_bytes"], s
print("ok")
PY
)
[ "$rc" -eq 0 ] && [ "$check" = ok ] && ok || bad "plan --workload of a traced factory: exit $rc: $check"

# A workload that gives its parts too is planned from the trace once there is one.
run plan --workload "$TMP/ex/workload.yaml" --gpu 24GiB --json
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["estimated_from"] == "parts"' "$TMP/out" && ok ||
  bad "without a trace, the parts: $(head -c 300 "$TMP/out")"
cp "$TMP/ex/factory.trace.json" "$TMP/ex/workload.trace.json"
run plan --workload "$TMP/ex/workload.yaml" --gpu 24GiB --json
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["estimated_from"] == "trace"' "$TMP/out" && ok ||
  bad "with a trace, the trace: $(head -c 300 "$TMP/out")"
succeeds '^estimated from the trace of embedder/model.py:build \(4 points, largest error [0-9.]+%\)$' \
  plan --workload "$TMP/ex/workload.yaml" --gpu 24GiB

# Bad input.
sed 's|^  factory: .*$||' "$TMP/ex/workload.yaml" >"$TMP/ex/nofactory.yaml"
fails 2 "nofactory\.yaml: the workload names no model\.factory to trace" trace --workload "$TMP/ex/nofactory.yaml"
fails 2 "give no MODEL" trace gpt2 --workload "$W"
fails 2 "--batch: the workload gives its own setup; with --workload only --gpu and --alloc-conf apply" \
  trace --workload "$W" --batch 4
echo '{"fit": {"allocated_bytes": [1, 2]}}' >"$TMP/ex/factory.trace.json"
fails 2 "factory\.trace\.json: no usable \"fit\"" plan --workload "$W" --gpu 24GiB

finish
