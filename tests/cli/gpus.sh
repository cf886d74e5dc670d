#!/usr/bin/env bash
# vramfit gpus against the scripted fake NVML: table, contract --json, failing fields and
# GPUs, an old driver's library, no driver (exit 3), and the catalogue.
#
# Run by CTest with VRAMFIT, VF_TEST_TMP and FAKE_NVML_LIB / FAKE_NVML_LEGACY_LIB set.
set -u

VRAMFIT=${VRAMFIT:?set VRAMFIT to the vramfit binary}
FAKE=${FAKE_NVML_LIB:?set FAKE_NVML_LIB to the fake NVML library}
LEGACY=${FAKE_NVML_LEGACY_LIB:?set FAKE_NVML_LEGACY_LIB}
TMP=${VF_TEST_TMP:-/tmp}/gpus.$$
rm -rf "$TMP" && mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
unset CUDA_VISIBLE_DEVICES VRAMFIT_DATA_DIR

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

# run ARGS...: stdout in $TMP/out, stderr in $TMP/err, exit code in $rc.
run() {
  "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
}

# expect CODE WHAT: the last run exited with CODE.
expect() {
  if [ "$rc" = "$1" ]; then ok; else bad "$2: exit $rc, want $1 ($(head -c 300 "$TMP/err"))"; fi
}

has() { # has FILE TEXT WHAT
  if grep -qF -- "$2" "$1"; then ok; else bad "$3: '$2' not in $(head -c 600 "$1")"; fi
}

# pycheck WHAT PYTHON: runs PYTHON with the JSON of $TMP/out as `j`; it must print ok.
pycheck() {
  local why
  why=$(python3 -c "import json,sys; j=json.load(open('$TMP/out'))
$2" 2>&1)
  if [ "$why" = ok ]; then ok; else bad "$1: $why"; fi
}

cat >"$TMP/two.nvml" <<EOF
driver version=550.54.15 cuda=12040
gpu index=0 name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100 total=81920MiB reserved=512MiB cc=8.0 util=87 temp=61 power=312W limit=400W base=1GiB
gpu index=1 name="NVIDIA L4" uuid=GPU-l4 total=23034MiB cc=8.9 util=3
gpu index=2 name="NVIDIA H100 80GB HBM3" uuid=GPU-lost total=81559MiB
proc gpu=0 pid=$$ used=10GiB
proc gpu=0 pid=3999999 name=/usr/bin/ghost used=3GiB
proc gpu=1 pid=$$ used=na
err fn=nvmlDeviceGetPowerUsage gpu=1 code=NOT_SUPPORTED
err fn=nvmlDeviceGetTemperature gpu=1 code=NOT_SUPPORTED
err fn=nvmlDeviceGetHandleByIndex gpu=2 code=GPU_IS_LOST
EOF
export VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=$TMP/two.nvml

# --- the table
run gpus
expect 0 "gpus"
has "$TMP/out" "driver 550.54.15, CUDA 12.4, 3 GPUs" "driver line"
has "$TMP/out" "GPU 0 NVIDIA A100-SXM4-80GB  14.00 GiB / 80.00 GiB  util 87%  312 W/400 W  61C" "gpu 0 line"
has "$TMP/out" "GPU-a100" "uuid"
has "$TMP/out" "ghost" "process name from NVML"
has "$TMP/out" "GPU 1 NVIDIA L4  0 B / 22.49 GiB  util 3%" "gpu 1 without power and temperature"
has "$TMP/out" "GPU 2 (unnamed)  does not answer" "lost GPU"
if grep -q $'\033' "$TMP/out"; then bad "escape codes on a pipe"; else ok; fi

# --- contract --json
run gpus --json
expect 0 "gpus --json"
pycheck "contract fields" "
want = {'index','name','uuid','total_bytes','used_bytes','free_bytes','utilization_gpu','processes'}
assert len(j) == 3, len(j)
for g in j: assert want <= set(g), set(g) ^ want
a = j[0]
assert a['total_bytes'] == 81920 << 20 and a['used_bytes'] == 14 << 30, a
assert a['free_bytes'] == (81920 - 512) * 2**20 - (14 << 30), a['free_bytes']
assert a['reserved_bytes'] == 512 << 20 and a['utilization_gpu'] == 87
assert a['power_w'] == 312.0 and a['power_limit_w'] == 400.0 and a['temperature_c'] == 61
assert a['compute_capability'] == '8.0'
procs = {p['pid']: p for p in a['processes']}
assert procs[$$]['used_bytes'] == 10 << 30 and procs[$$]['name'] == 'bash', procs
assert procs[3999999]['name'] == 'ghost'
l4 = j[1]
assert l4['power_w'] is None and l4['temperature_c'] is None and l4['utilization_gpu'] == 3
assert l4['processes'][0]['used_bytes'] is None
lost = j[2]
assert lost['error'] and lost['total_bytes'] is None and lost['processes'] == []
print('ok')"

# --- v2 memory refused and v3 processes missing: v1 numbers, same processes
cat "$TMP/two.nvml" >"$TMP/old.nvml"
printf 'err fn=nvmlDeviceGetMemoryInfo_v2 code=ARGUMENT_VERSION_MISMATCH\nerr fn=nvmlDeviceGetComputeRunningProcesses_v3 code=FUNCTION_NOT_FOUND\n' >>"$TMP/old.nvml"
FAKE_NVML_SCRIPT=$TMP/old.nvml run gpus --json
expect 0 "gpus --json, v1 fallbacks"
pycheck "v1 fallbacks" "
a = j[0]
assert a['used_bytes'] == (14 << 30) + (512 << 20), a['used_bytes']
assert a['reserved_bytes'] is None
assert sorted(p['pid'] for p in a['processes']) == sorted([$$, 3999999])
print('ok')"

# --- a driver from before R450: unversioned symbols only
VRAMFIT_NVML=$LEGACY run gpus --json
expect 0 "legacy library"
pycheck "legacy library" "
assert j[0]['used_bytes'] == (14 << 30) + (512 << 20) and len(j[0]['processes']) == 2, j[0]
print('ok')"

# --- no driver: exit 3, one line, nothing on stdout
VRAMFIT_NVML=$TMP/missing/libnvidia-ml.so.1 run gpus
expect 3 "no library"
if [ "$(wc -l <"$TMP/err")" = 1 ] && [ ! -s "$TMP/out" ]; then ok; else bad "no library: not one line"; fi
has "$TMP/err" "vramfit gpus: " "no library message"
echo 'init error=DRIVER_NOT_LOADED' >"$TMP/down.nvml"
FAKE_NVML_SCRIPT=$TMP/down.nvml run gpus --json
expect 3 "driver not loaded"
has "$TMP/err" "Driver Not Loaded" "driver not loaded message"
echo 'driver version=1' >"$TMP/none.nvml"
FAKE_NVML_SCRIPT=$TMP/none.nvml run gpus
expect 3 "no GPU"
FAKE_NVML_SCRIPT=$TMP/none.nvml run gpus --json
expect 0 "no GPU, --json"
pycheck "empty list" "assert j == []; print('ok')"

# --- the catalogue needs no driver
VRAMFIT_NVML=$TMP/missing run gpus --catalog
expect 0 "catalog"
for name in v100-16gb a100-40gb a100-80gb a10g l4 l40s t4 h100-80gb h100-96gb h200-141gb b200 \
  rtx-3090 rtx-4090 rtx-5090 rtx-a6000 rtx-6000-ada quadro-rtx-6000 mi250x mi300x; do
  has "$TMP/out" "$name " "catalog lists $name"
done
VRAMFIT_NVML=$TMP/missing run gpus --catalog --json
expect 0 "catalog --json"
pycheck "catalog json" "
names = {g['name'] for g in j}
assert len(j) == 28 and 'h100-80gb' in names, len(j)
h = next(g for g in j if g['name'] == 'h100-80gb')
assert 'h100-sxm-80gb' in h['aliases'] and h['capacity_bytes'] == 81559 << 20
assert h['compute_capability'] == '9.0' and h['bf16_tflops'] > 900
print('ok')"

# --- usage
run gpus --bogus
expect 2 "unknown option"
run gpus extra
expect 2 "extra argument"
run gpus --help
expect 0 "help"
has "$TMP/out" "--catalog" "help text"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
