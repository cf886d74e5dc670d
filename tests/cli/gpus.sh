#!/usr/bin/env bash
# vramfit gpus against the scripted fake NVML: table, contract --json, failing fields and
# GPUs, an old driver's library, no driver (exit 3), and the catalogue.
#
# Run by CTest with VRAMFIT, VF_TEST_TMP and FAKE_NVML_LIB / FAKE_NVML_LEGACY_LIB set.
NAME=gpus
source "$(dirname "$0")/lib/harness.sh"
source "$(dirname "$0")/lib/nvml.sh"
LEGACY=${FAKE_NVML_LEGACY_LIB:?set FAKE_NVML_LEGACY_LIB to the legacy fake NVML library}
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

# --- the table
under "$TMP/two.nvml" gpus
expect 0 "gpus"
has "driver 550.54.15, CUDA 12.4, 3 GPUs" "driver line"
has "GPU 0 NVIDIA A100-SXM4-80GB  14.00 GiB / 80.00 GiB  util 87%  312 W/400 W  61C" "gpu 0 line"
has "GPU-a100" "uuid"
has "ghost" "process name from NVML"
has "GPU 1 NVIDIA L4  0 B / 22.49 GiB  util 3%" "gpu 1 without power and temperature"
has "GPU 2 (unnamed)  does not answer" "lost GPU"
if grep -q $'\033' "$TMP/out"; then bad "escape codes on a pipe"; else ok; fi

# --- contract --json
under "$TMP/two.nvml" gpus --json
expect 0 "gpus --json"
pycheck "contract fields" "$TMP/out" "
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
under "$TMP/old.nvml" gpus --json
expect 0 "gpus --json, v1 fallbacks"
pycheck "v1 fallbacks" "$TMP/out" "
a = j[0]
assert a['used_bytes'] == (14 << 30) + (512 << 20), a['used_bytes']
assert a['reserved_bytes'] is None
assert sorted(p['pid'] for p in a['processes']) == sorted([$$, 3999999])
print('ok')"

# --- a driver from before R450: unversioned symbols only
VRAMFIT_NVML=$LEGACY under "$TMP/two.nvml" gpus --json
expect 0 "legacy library"
pycheck "legacy library" "$TMP/out" "
assert j[0]['used_bytes'] == (14 << 30) + (512 << 20) and len(j[0]['processes']) == 2, j[0]
print('ok')"

# --- no driver: exit 3, one line, nothing on stdout
VRAMFIT_NVML=$TMP/missing/libnvidia-ml.so.1 under "$TMP/two.nvml" gpus
expect 3 "no library"
if [ "$(wc -l <"$TMP/err")" = 1 ] && [ ! -s "$TMP/out" ]; then ok; else bad "no library: not one line"; fi
has "vramfit gpus: " "no library message" "$TMP/err"
echo 'init error=DRIVER_NOT_LOADED' >"$TMP/down.nvml"
under "$TMP/down.nvml" gpus --json
expect 3 "driver not loaded"
has "Driver Not Loaded" "driver not loaded message" "$TMP/err"
echo 'driver version=1' >"$TMP/none.nvml"
under "$TMP/none.nvml" gpus
expect 3 "no GPU"
under "$TMP/none.nvml" gpus --json
expect 0 "no GPU, --json"
pycheck "empty list" "$TMP/out" "assert j == []; print('ok')"

# --- the catalogue needs no driver
VRAMFIT_NVML=$TMP/missing under "$TMP/two.nvml" gpus --catalog
expect 0 "catalog"
for name in v100-16gb a100-40gb a100-80gb a10g l4 l40s t4 h100-80gb h100-96gb h200-141gb b200 \
  rtx-3090 rtx-4090 rtx-5090 rtx-a6000 rtx-6000-ada quadro-rtx-6000 mi250x mi300x; do
  has "$name " "catalog lists $name"
done
VRAMFIT_NVML=$TMP/missing under "$TMP/two.nvml" gpus --catalog --json
expect 0 "catalog --json"
pycheck "catalog json" "$TMP/out" "
names = {g['name'] for g in j}
assert len(j) == 28 and 'h100-80gb' in names, len(j)
h = next(g for g in j if g['name'] == 'h100-80gb')
assert 'h100-sxm-80gb' in h['aliases'] and h['capacity_bytes'] == 81559 << 20
assert h['compute_capability'] == '9.0' and h['bf16_tflops'] > 900
print('ok')"

# --- usage
under "$TMP/two.nvml" gpus --bogus
expect 2 "unknown option"
under "$TMP/two.nvml" gpus extra
expect 2 "extra argument"
under "$TMP/two.nvml" gpus --help
expect 0 "help"
has "--catalog" "help text"

# --- estimate --gpu auto: the detected GPU's generation, and only its free memory counts
cat >"$TMP/busy.nvml" <<EOF
driver version=550.54.15 cuda=12040
gpu index=0 name="NVIDIA L4" uuid=GPU-l4 total=23034MiB cc=8.9
proc gpu=0 pid=3999999 name=/usr/bin/other used=20GiB
EOF
under "$TMP/busy.nvml" estimate llama-3.2-1b --weights bf16 --method lora --seq 512 --gpu auto --json
expect 1 "estimate --gpu auto on a busy GPU does not fit"
pycheck "capacity is the free memory" "$TMP/out" "
assert j['capacity_bytes'] == 23034 * 2**20 - (20 << 30), j['capacity_bytes']
assert j['fits'] is False
print('ok')"
CUDA_VISIBLE_DEVICES=GPU-l4 under "$TMP/busy.nvml" estimate gpt2 --seq 128 --optimizer sgd --gpu auto
expect 0 "gpt2 fits in what is left, chosen by UUID"
has "fits on" "verdict"

finish
