#!/usr/bin/env bash
# The run history end to end, against the fake NVML and a fake trainer whose peak grows with
# the batch (it writes what it holds to a file the fake NVML reports for it): probe launches
# and watch runs are kept and listed (`history`, `--json` with the contract's fields and the
# estimate's setup); estimate and plan of a measured setup say how far they were from the
# measurement, and --calibrate scales by it; plan keeps its result, and doctor without
# --plan checks it; a broken or unwritable store costs a warning, never a run.
NAME=history
source "$(dirname "$0")/lib/harness.sh"
export FAKE_NVML_LIB=${FAKE_NVML_LIB:-${VF_BUILD_DIR:-}/tests/libfake_nvml.so}
source "$(dirname "$0")/lib/nvml.sh"

source "$(dirname "$0")/lib/trainer.sh"

# The trainer: peak 3000 + 700 x batch MiB on a 24 GiB L4.
export FIXED=3000 PER=700
trainer "$TMP" 24
STORE=$XDG_STATE_HOME/vramfit/history.sqlite3

# ---- an empty history ---------------------------------------------------------------------
succeeds "^no runs kept yet: .*vramfit/history.sqlite3" history
run history --json
pycheck "empty json" "$TMP/out" "
assert j['runs'] == [] and j['store'].endswith('vramfit/history.sqlite3'), j
print('ok')"
if [ -e "$STORE" ]; then bad "listing made a store"; else ok; fi

# ---- probe steered by the peaks: 30 fits (3000 + 700 x 30 MiB), 31 does not ---------------
under "$TMP/gpu.nvml" probe --json -- "$TMP/train.sh" {batch}
expect 0 "steered probe"
pycheck "steered probe json" "$TMP/out" "
t = j['trials']
assert j['max_batch'] == 30, j
assert j['launches'] <= 5, [(x['batch'], x['move']) for x in t]   # doubling and bisecting: 10
assert t[0]['move'] == 'start' and t[-1]['batch'] == 30 and t[-1]['outcome'] == 'ok', t
# 31 would hold 24.12 GiB: the measured peaks settle that it does not fit, without a launch.
s = j['settled_by_peaks']
assert s['batch'] == 31 and s['limit_bytes'] == 24 * 2**30, s
assert abs(s['predicted_peak_bytes'] - (3000 + 700 * 31) * 2**20) < 2**20, s
assert all(x['peak_device_bytes'] == (3000 + 700 * x['batch']) * 2**20 for x in t if x['outcome'] == 'ok'), t
p = [x for x in t if x['move'] == 'predicted']
assert p and all(x['predicted_peak_bytes'] for x in p), t
print('ok')"
under "$TMP/gpu.nvml" probe -- "$TMP/train.sh" {batch}
has "steering by the measured peaks: 24.00 GiB free on NVIDIA L4" "steering line"
grep -Eq "^batch 30: ok, 23.44 GiB peak \(predicted 23.44 GiB\), [0-9.]+ s$" "$TMP/out" && ok ||
  bad "predicted trial line: $(cat "$TMP/out")"
has "batch 31 not launched: the measured peaks put it at 24.12 GiB, over the 24.00 GiB a launch can hold" \
  "settled line"

# With the estimate's setup: the launches are kept with it.
SETUP=(gpt2 --seq 1024 --amp bf16)
under "$TMP/gpu.nvml" probe --model "${SETUP[@]}" --json -- "$TMP/train.sh" {batch}
expect 0 "probe with --model"
pycheck "probe from the estimate" "$TMP/out" "
assert j['max_batch'] == 30 and j['estimate_batch'], j
assert j['launches'] <= 4, [(x['batch'], x['move']) for x in j['trials']]
print('ok')"
# Out of memory at once: kept too.
under "$TMP/gpu.nvml" probe --model "${SETUP[@]}" --min 31 --max 31 -- "$TMP/train.sh" {batch}
expect 1 "probe where --min runs out of memory"
run history --json
pycheck "history json" "$TMP/out" "
runs = j['runs']
for r in runs:
    assert {'when', 'command', 'batch', 'outcome', 'peak_device_bytes', 'gpu', 'setup', 'source', 'driver'} <= set(r), r
    assert r['gpu'] == 'NVIDIA L4' and r['driver'] == '555.42.06' and r['source'] == 'probe', r
    assert r['when'].endswith('Z') and r['command'].startswith('$TMP/train.sh '), r
with_setup = [r for r in runs if r['setup']]
assert with_setup and len(with_setup) < len(runs), len(with_setup)
s = with_setup[0]['setup']
assert s['model'] == 'gpt2' and s['seq'] == 1024 and s['amp'] == 'bf16' and s['framework'] == 'hf', s
assert [r['outcome'] for r in with_setup][-1] == 'oom'
print('ok')"
run history --limit 2
if [ "$rc" = 0 ] && [ "$(wc -l <"$TMP/out")" = 3 ]; then ok; else bad "history --limit 2: $(cat "$TMP/out")"; fi
grep -Eq "^[0-9-]+ [0-9:]+  probe +31  oom +24.00 GiB  NVIDIA L4 +$TMP/train.sh 31$" "$TMP/out" && ok ||
  bad "history line: $(cat "$TMP/out")"

# ---- estimate and plan of the measured setup ------------------------------------------------
run estimate "${SETUP[@]}" --gpu 24GiB --batch 8
grep -Eq "^measured 23.44 GiB at batch 30 on NVIDIA L4, [0-9]{4}-[0-9]{2}-[0-9]{2}; this estimate was [0-9]+% (high|low)$" \
  "$TMP/out" && ok || bad "measured line: $(tail -3 "$TMP/out")"
run estimate "${SETUP[@]}" --gpu 24GiB --batch 8 --json
cp "$TMP/out" "$TMP/plain.json"
pycheck "measured json" "$TMP/plain.json" "
m = j['measured']
assert m['batch'] == 30 and m['peak_device_bytes'] == 24000 * 2**20 and m['gpu'] == 'NVIDIA L4', m
assert abs(m['error'] - (m['estimate_device_bytes'] / m['peak_device_bytes'] - 1)) < 1e-3, m
assert 'calibration' not in j
print('ok')"
run estimate "${SETUP[@]}" --gpu 24GiB --batch 8 --calibrate --json
pycheck "calibrated json" "$TMP/out" "
plain = json.load(open('$TMP/plain.json'))
k = j['calibration']['batch_part_ratio']
assert j['calibration']['measured_batch'] == 30 and 0 < k < 1, j['calibration']
part = plain['breakdown']['activations'] + plain['breakdown']['temporaries']
want = plain['peak']['device_bytes'] + (k - 1) * part
assert abs(j['peak']['device_bytes'] - want) < 2**20, (j['peak'], want)
assert sum(j['breakdown'].values()) == j['peak']['device_bytes'], j['breakdown']
print('ok')"
run estimate "${SETUP[@]}" --gpu 24GiB --batch 8 --calibrate
grep -Eq "^calibrated: the batch-dependent part \(activations, temporaries\) scaled by 0\.[0-9]{3}, as measured at batch 30$" \
  "$TMP/out" && ok || bad "calibrated line: $(tail -3 "$TMP/out")"
# Another setup has no measurement: nothing said, and --calibrate only warns.
run estimate gpt2 --seq 512 --amp bf16 --gpu 24GiB
hasnt "measured" "unmeasured setup"
run estimate gpt2 --seq 512 --amp bf16 --gpu 24GiB --calibrate
if [ "$rc" = 0 ] && [ "$(wc -l <"$TMP/err")" = 1 ] &&
  grep -q "warning: --calibrate: no run of this setup was measured" "$TMP/err"; then ok; else
  bad "--calibrate without a measurement: exit $rc, $(cat "$TMP/err")"; fi

run plan "${SETUP[@]}" --gpu 24GiB --batch 8
has "measured 23.44 GiB at batch 30 on NVIDIA L4" "plan says what was measured"
run plan "${SETUP[@]}" --gpu 24GiB --batch 8 --json
cp "$TMP/out" "$TMP/plan.json"
run plan "${SETUP[@]}" --gpu 24GiB --batch 8 --calibrate --json
pycheck "calibrated plan" "$TMP/out" "
plain = json.load(open('$TMP/plan.json'))
assert plain['measured']['batch'] == 30 and j['calibration']['measured_batch'] == 30, j
assert j['given']['peak_device_bytes'] < plain['given']['peak_device_bytes'], (j['given'], plain['given'])
print('ok')"

# ---- doctor checks the last plan made for this project ----------------------------------------
under "$TMP/gpu.nvml" doctor
expect 0 "doctor with the last plan"
has "the last plan made for this project: gpt2 on 24GiB, " "doctor names the plan"
grep -Eq "^  ok    plan       the plan needs [0-9.]+ GiB on GPU 0; 24.00 GiB is free of 24.00 GiB$" "$TMP/out" && ok ||
  bad "doctor plan line: $(cat "$TMP/out")"
# --plan still wins.
printf '{"recommended": {"peak_device_bytes": 30000000000}}' >"$TMP/big.json"
under "$TMP/gpu.nvml" doctor --plan "$TMP/big.json"
expect 1 "doctor --plan"
hasnt "the last plan made" "--plan over the kept plan"

# Plans belong to their project (the git work tree they were made in, and the config's): a
# plan made in one never reaches doctor in another.
mkdir -p "$TMP/proj-a/.git" "$TMP/proj-b/.git" "$TMP/proj-b/conf" "$TMP/proj-c/.git"
cp "$SRC/tests/data/configs/trl/sft_qlora.yaml" "$TMP/proj-b/conf/"
in_project() { # in_project DIR ARGS...: vramfit in DIR, with the fake L4
  local dir=$1
  shift
  (cd "$dir" && FAKE_NVML_SCRIPT=$TMP/gpu.nvml timeout 20 "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null)
  rc=$?
}
in_project "$TMP/proj-a" plan "${SETUP[@]}" --gpu 24GiB --batch 2
expect 0 "plan in project a"
in_project "$TMP/proj-c" doctor
expect 0 "doctor in a project without plans"
hasnt "the last plan" "another project's plan is not this one's"
in_project "$TMP/proj-a" doctor
has "the last plan made for this project: gpt2 on 24GiB, " "the project's own plan"
# Made in project a of a config in project b: both have it.
in_project "$TMP/proj-a" plan "$TMP/proj-b/conf/sft_qlora.yaml" --gpu 24GiB
expect 0 "plan of another project's config"
in_project "$TMP/proj-b/conf" doctor
has "the last plan made for this project: mistralai/Mistral-7B-v0.1 on 24GiB, " "the config's project"
in_project "$TMP/proj-a" doctor
has "the last plan made for this project: mistralai/Mistral-7B-v0.1 on 24GiB, " "the project it was made in"

# ---- watch -- CMD is kept too -------------------------------------------------------------------
under "$TMP/gpu.nvml" watch --interval 0.1 -- "$TMP/train.sh" 10
expect 0 "watched run"
run history --json --limit 1
pycheck "watch kept" "$TMP/out" "
r = j['runs'][0]
assert r['source'] == 'watch' and r['outcome'] == 'ok' and r['exit_code'] == 0, r
assert r['peak_device_bytes'] == 10000 * 2**20 and r['gpu'] == 'NVIDIA L4' and r['batch'] is None, r
assert r['command'] == '$TMP/train.sh 10' and r['setup'] is None, r
print('ok')"

# ---- a store that cannot be used costs a warning, never a run ---------------------------------
cp "$STORE" "$TMP/good.sqlite3"
rm -f "$STORE"-wal "$STORE"-shm
printf 'not a database at all, just some text that is long enough to be read as a header' >"$STORE"
fails 2 "vramfit history: .*history.sqlite3: .*not a database" history
under "$TMP/gpu.nvml" probe --min 2 --max 2 -- "$TMP/train.sh" {batch}
expect 0 "probe with a broken store"
if [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "warning: runs are not kept in the history: .*history.sqlite3" "$TMP/err"; then ok; else
  bad "broken store warning: $(cat "$TMP/err")"; fi
run estimate "${SETUP[@]}" --gpu 24GiB
if [ "$rc" = 0 ] && grep -q "warning: the history cannot be read" "$TMP/err"; then ok; else bad "estimate, broken store: $rc $(cat "$TMP/err")"; fi
XDG_STATE_HOME=$TMP/train.sh under "$TMP/gpu.nvml" probe --min 2 --max 2 -- "$TMP/train.sh" {batch}
expect 0 "probe with a store folder that cannot be made"
has "warning: runs are not kept in the history" "unwritable warning" "$TMP/err"

# ---- flags ------------------------------------------------------------------------------------
succeeds "^usage: vramfit history" history --help
fails 2 "unknown option '--bogus'" history --bogus
fails 2 "--limit expects a whole number" history --limit x
fails 2 "unexpected argument 'x'" history x

finish
