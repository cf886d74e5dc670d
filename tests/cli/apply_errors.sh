#!/usr/bin/env bash
# `vramfit apply` on bad input: exit 2, one line "vramfit apply: FILE[:LINE:COL]: why",
# the file byte-identical and no backup. Also the safety rules: existing backups are never
# replaced, symlinks are followed, the mode is kept, consistency rules refuse or fix.
set -u
VRAMFIT=${VRAMFIT:?set VRAMFIT to the vramfit binary}
SRC=${VF_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
CASES=$SRC/tests/data/apply
TMP=${VF_TEST_TMP:-/tmp/vramfit-test}/apply-errors
pass=0
fail=0
rm -rf "$TMP" && mkdir -p "$TMP" && cd "$TMP" || exit 1

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# refused NAME PATTERN FILE ARGS...: exit 2, one stderr line matching PATTERN, FILE untouched
refused() {
  local name=$1 pattern=$2 file=$3
  shift 3
  local before
  before=$(mktemp "$TMP/before.XXXXXX")
  [ -d "$file" ] || cp -p "$file" "$before"
  "$VRAMFIT" apply "$@" >out.txt 2>err.txt
  local rc=$?
  local lines
  lines=$(wc -l <err.txt)
  if [ $rc -ne 2 ]; then bad "$name: exit $rc, want 2 ($(cat err.txt))"
  elif [ "$lines" -ne 1 ]; then bad "$name: $lines lines on stderr: $(cat err.txt)"
  elif ! grep -Eq "^vramfit apply: $pattern" err.txt; then bad "$name: message '$(cat err.txt)' !~ $pattern"
  elif [ ! -d "$file" ] && ! cmp -s "$before" "$file"; then bad "$name: $file changed"
  elif ls "$file".backup* >/dev/null 2>&1; then bad "$name: a backup was written"
  else ok; fi
  rm -f "$before"
}

expect() { # expect NAME COMMAND...: one assertion
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

cat >hf.yaml <<'EOF'
# TrainingArguments
per_device_train_batch_size: 4
gradient_accumulation_steps: 2
learning_rate: 2.0e-04
bf16: true
lora_target_modules:
- q_proj
- v_proj
base: &base
  warmup_ratio: 0.1
alias_here: *base
notes: |
  a block scalar
data_dir: ${oc.env:DATA}
EOF

# ---- unparsable files ----
printf 'a: [1, 2\nb: 3\n' >broken.yaml
refused "unparsable YAML" 'broken\.yaml:[0-9]+:[0-9]+: invalid YAML' broken.yaml broken.yaml --set a=1
printf '{"train_batch_size": 8,,}\n' >broken.json
refused "unparsable JSON" 'broken\.json:1:[0-9]+: invalid JSON' broken.json broken.json --set batch=1
printf 'a: 1\n---\na: 2\n' >two.yaml
refused "two documents" 'two\.yaml:2:1: more than one YAML document' two.yaml two.yaml --set a=5
printf 'a: 1\na: 2\n' >dup.yaml
refused "duplicate key" "dup\.yaml:2:1: duplicate key 'a'" dup.yaml dup.yaml --set a=5
printf '\xff\xfea\x00:\x00' >utf16.yaml
refused "UTF-16" 'utf16\.yaml:1:1: UTF-16' utf16.yaml utf16.yaml --set a=5

# ---- keys and values ----
refused "missing key" 'hf\.yaml:2:1: no gradient_checkpointing for grad_ckpt=full .*--create' hf.yaml hf.yaml --set grad_ckpt=full
refused "missing dotted key" 'hf\.yaml:2:1: no key no_such.key' hf.yaml hf.yaml --set no_such.key=3
refused "key maps to a list" 'hf\.yaml:7:1: lora_target_modules holds a list' hf.yaml hf.yaml --set lora_target_modules=all
refused "key maps to a mapping" 'hf\.yaml:9:7: base holds a mapping' hf.yaml hf.yaml --set base=1
refused "alias of a mapping" 'hf\.yaml:11:13: alias_here is an alias of a mapping, not a single value' hf.yaml hf.yaml --set alias_here=1
refused "path through alias" 'hf\.yaml:11:13: the path goes through the alias \*base' hf.yaml hf.yaml --set alias_here.warmup_ratio=0.2
refused "block scalar" 'hf\.yaml:12:8: notes is a block scalar' hf.yaml hf.yaml --set notes=x
refused "interpolation" 'hf\.yaml:14:11: data_dir is the interpolation \$\{oc\.env:DATA\}' hf.yaml hf.yaml --map seq=data_dir --set seq=128
refused "logical value of the wrong type" 'batch=four: expects a whole number' hf.yaml hf.yaml --set batch=four
refused "zero batch" 'batch=0: expects a whole number from 1' hf.yaml hf.yaml --set batch=0
refused "unknown enum value" 'grad_ckpt=maybe: expects one of none full selective' hf.yaml hf.yaml --set grad_ckpt=maybe
refused "number replaced by a string" 'hf\.yaml:4:16: learning_rate holds a number, not a string' hf.yaml hf.yaml --set learning_rate=fast
refused "bool replaced by a number" 'hf\.yaml:5:7: bf16 holds true or false' hf.yaml hf.yaml --set bf16=3
refused "unknown format" "unknown format 'yolo'" hf.yaml hf.yaml --format yolo --set batch=1
refused "no place for a key" 'hf\.yaml:1:1: zero_stage=2 has no place in a hf config' hf.yaml hf.yaml --set zero_stage=2
printf 'a: 1\n' >plain.yaml
refused "unknown ecosystem" 'plain\.yaml:1:1: cannot tell which tool' plain.yaml plain.yaml --set batch=4
refused "bad flag" "unknown option '--bogus'" hf.yaml hf.yaml --bogus --set batch=1
refused "set without =" "--set expects KEY=VALUE" hf.yaml hf.yaml --set batch
refused "map of an unknown key" "--map speed=lr: speed is not a logical key" hf.yaml hf.yaml --map speed=lr --set batch=1
printf '{"recommended": {"batch": 2, "set": {"a": {"b": 1}}}}' >nested.json
refused "plan set with a mapping" 'nested\.json: "set": a must be a single value' hf.yaml hf.yaml --plan nested.json
printf '{"recommended": {"batch": 2, "shard": "fsdp"}}' >fsdp.json
refused "plan with FSDP" 'fsdp\.json: the plan asks for shard fsdp' hf.yaml hf.yaml --plan fsdp.json

# ---- files ----
cp hf.yaml ro.yaml && chmod 444 ro.yaml
refused "read-only file" 'ro\.yaml: the file is read-only' ro.yaml ro.yaml --set batch=8
mkdir -p adir
refused "directory" 'adir: is a directory' adir adir --set batch=8
refused "missing file" 'nope\.yaml: cannot open' hf.yaml nope.yaml --set batch=8
ln -sf hf.yaml same.yaml
refused "one file twice" 'same\.yaml: is the same file as hf\.yaml' hf.yaml hf.yaml same.yaml --set batch=8
rm -f same.yaml

# ---- consistency across files ----
printf '{\n  "train_micro_batch_size_per_gpu": "auto",\n  "gradient_accumulation_steps": "auto"\n}\n' >auto.json
refused "auto with no TrainingArguments" 'auto\.json:2:37: train_micro_batch_size_per_gpu is "auto"' auto.json auto.json --set batch=8
printf 'trainer:\n  accumulate_grad_batches: 1\n  strategy:\n    class_path: lightning.pytorch.strategies.DeepSpeedStrategy\n    init_args:\n      config: ds_l.json\ndata:\n  batch_size: 8\nseed_everything: 1\n' >lit.yaml
printf '{\n  "train_micro_batch_size_per_gpu": 8,\n  "gradient_accumulation_steps": 1,\n  "zero_optimization": {"stage": 2}\n}\n' >ds_l.json
refused "Lightning + DeepSpeed accumulation" 'ds_l\.json:3:34: Lightning refuses gradient_accumulation_steps' lit.yaml lit.yaml ds_l.json --set accumulation=4
printf 'per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\ndeepspeed: ds_m.json\noutput_dir: out\n' >hfm.yaml
printf '{\n  "train_batch_size": 64,\n  "train_micro_batch_size_per_gpu": 8,\n  "gradient_accumulation_steps": 2,\n  "zero_optimization": {"stage": 2}\n}\n' >ds_m.json
refused "HF and DeepSpeed disagree" 'ds_m\.json:3:37: train_micro_batch_size_per_gpu is 8 but batch in hfm\.yaml gives 4' hfm.yaml hfm.yaml ds_m.json --set accumulation=2
refused "offload_param below stage 3" 'ds_m\.json:.*offload_param works only with ZeRO stage 3' ds_m.json ds_m.json --set offload=params --create
printf '{\n  "train_batch_size": 60,\n  "train_micro_batch_size_per_gpu": 8,\n  "gradient_accumulation_steps": 2\n}\n' >ds_odd.json
refused "unknown GPU count" 'ds_odd\.json:2:23: train_batch_size 60 is not micro 8 x accumulation 2' ds_odd.json ds_odd.json --set batch=4
printf 'batch_size: 2\ngradient_accumulation_steps: 1\noptimizer_in_bwd: True\nmodel:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\nenable_activation_checkpointing: True\n' >tt.yaml
refused "torchtune optimizer_in_bwd" 'tt\.yaml:2:30: optimizer_in_bwd: True needs gradient_accumulation_steps 1' tt.yaml tt.yaml --set accumulation=4

# ---- tools whose keys differ from the logical ones ----
cp "$CASES/trl_grpo/grpo.yaml" grpo.yaml
refused "GRPO has no max_length" 'grpo\.yaml:1:1: seq=2048 has no place in a trl-grpo config: GRPOConfig and RLOOConfig have no max_length: .*max_completion_length' grpo.yaml grpo.yaml --set seq=2048
cp "$CASES/litgpt_pretrain/tinyllama.yaml" tinyllama.yaml
refused "litgpt devices auto without --gpus" 'tinyllama\.yaml:[0-9]+:10: devices is "auto" .*pass --gpus N' tinyllama.yaml tinyllama.yaml --set batch=8
refused "litgpt grad_ckpt" 'tinyllama\.yaml:1:1: grad_ckpt=full has no place in a litgpt config: litgpt has no switch for it' tinyllama.yaml tinyllama.yaml --set grad_ckpt=full
cp "$CASES/litgpt_lora/lora.yaml" lora.yaml
refused "litgpt --gpus against devices" 'lora\.yaml:[0-9]+:10: devices 1 x num_nodes 1 = 1 GPUs, but --gpus 4' lora.yaml lora.yaml --set accumulation=2 --gpus 4
refused "a family the tool lacks" 'hf\.yaml:1:1: precision=bf16-true has no place in a hf config' hf.yaml hf.yaml --set precision=bf16-true
refused "a literal path is a path" 'hf\.yaml:2:1: no key precision; --create adds it' hf.yaml hf.yaml --set .precision=bf16

# A DPO config (TRL <= 0.27 wording) is no GRPO config: its max_length is the whole sample.
cat >dpo.yaml <<'EOF'
model_name_or_path: Qwen/Qwen2-0.5B-Instruct
dataset_name: trl-lib/ultrafeedback_binarized
learning_rate: 5.0e-07
num_train_epochs: 1
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
gradient_checkpointing: true
beta: 0.1
max_length: 1024
max_prompt_length: 512
max_completion_length: 512
logging_steps: 25
output_dir: Qwen2-0.5B-DPO
EOF
"$VRAMFIT" apply dpo.yaml --set seq=2048 >out.txt 2>err.txt
expect "DPO: seq is max_length" grep -qx 'max_length: 2048' dpo.yaml
expect "DPO: detected as trl" grep -q 'max_length 1024 -> 2048' err.txt

# ---- Hydra: the defaults list decides where a value comes from ----
mkdir -p conf/data conf/trainer
cp "$CASES/hydra_defaults/conf/config.yaml" conf/config.yaml
cp "$CASES/hydra_defaults/conf/data/alpaca.yaml" conf/data/alpaca.yaml
cp "$CASES/hydra_defaults/conf/trainer/default.yaml" conf/trainer/default.yaml
refused "value a later defaults entry overrides" "conf/config\.yaml:[0-9]+:[0-9]+: data\.batch_size: the defaults entry 'data: alpaca' comes after _self_ and sets it too .*give .*conf/data/alpaca\.yaml too, or move _self_ to the end" conf/config.yaml conf/config.yaml --set batch=4 --create
# With _self_ last the primary config wins: the value is written where it was asked for.
grep -v '^  - _self_$' conf/config.yaml | sed 's/^  - trainer: default$/  - trainer: default\n  - _self_/' >conf/last.yaml
"$VRAMFIT" apply conf/last.yaml --set batch=4 --create >out.txt 2>err.txt
expect "_self_ last: written in the primary config" grep -q '^  batch_size: 4$' conf/last.yaml
expect "_self_ last: the group config untouched" grep -q '^batch_size: 16$' conf/data/alpaca.yaml
# Without --create too: the value goes where it takes effect, never to a top-level key.
refused "missing key a later defaults entry sets" "conf/config\.yaml:[0-9]+:[0-9]+: data\.batch_size: the defaults entry 'data: alpaca' comes after _self_ and sets it too \(conf/data/alpaca\.yaml\)" conf/config.yaml conf/config.yaml --set batch=4
"$VRAMFIT" apply conf/config.yaml conf/data/alpaca.yaml --set batch=4 >out.txt 2>err.txt
expect "missing key moved to the later config" grep -q '^batch_size: 4$' conf/data/alpaca.yaml
expect "the primary config untouched" test "$(grep -c batch_size conf/config.yaml)" -eq 0
# Stage configs the project loads over the primary one (a folder its defaults do not compose).
mkdir -p stages && cp -r "$CASES/hydra_curriculum/conf" stages/ && cd stages || exit 1
printf '\ndata_loader:\n  batch_size: 8\n' >>conf/text_curriculum/02_text.yaml
printf '\ndata_loader:\n  batch_size: 4\n' >>conf/text_curriculum/03_text.yaml
refused "key the stage configs set" 'conf/config\.yaml:11:15: data_loader\.batch_size \(for batch=6\) is set by conf/text_curriculum/02_text\.yaml and 1 more, which the run loads over this file a stage at a time.*give those files$' conf/config.yaml conf/config.yaml --set batch=6
refused "stage config left out" 'conf/config\.yaml:11:15: .*is set by conf/text_curriculum/03_text\.yaml, which .*give that file$' conf/text_curriculum/02_text.yaml conf/config.yaml conf/text_curriculum/02_text.yaml --set batch=6
sed -i '/^  batch_size: 12$/d' conf/config.yaml
refused "key only the stage configs set, --create" 'conf/config\.yaml:[0-9]+:[0-9]+: data_loader\.batch_size \(for batch=6\) is set by conf/text_curriculum/02_text\.yaml and 1 more' conf/config.yaml conf/config.yaml --set batch=6 --create
"$VRAMFIT" apply conf/config.yaml conf/text_curriculum/02_text.yaml conf/text_curriculum/03_text.yaml --set batch=6 >out.txt 2>err.txt
expect "stage configs given: exit 0" test $? -eq 0
expect "written in every stage" test "$(grep -h '^  batch_size: 6$' conf/text_curriculum/0[23]_text.yaml | wc -l)" -eq 2
expect "the primary config left alone" test "$(grep -c batch_size conf/config.yaml)" -eq 0
cd .. || exit 1
# A primary config with a defaults list is Hydra's, even with a Lightning trainer block inline.
cat >conf/inline.yaml <<'EOF'
defaults:
  - _self_
  - data: alpaca
trainer:
  accelerator: gpu
  devices: 2
  precision: bf16-mixed
  accumulate_grad_batches: 4
  max_epochs: 3
EOF
refused "Hydra file named hydra" 'conf/inline\.yaml:1:1: zero_stage=2 has no place in a hydra config' conf/inline.yaml conf/inline.yaml --set zero_stage=2

# ---- YAML anchors: one key set, not every key that uses its anchor ----
printf 'per_device_train_batch_size: 4\nlearning_rate: &lr 1.0e-4\nwarmup:\n  start_lr: *lr\nfinal_lr: *lr\n' >anchors.yaml
refused "value other keys use through its anchor" 'anchors\.yaml:2:16: learning_rate carries the anchor &lr, which line 4 and 1 more use as \*lr: a new value here would change them too: --set those keys too' anchors.yaml anchors.yaml --set learning_rate=2.0e-4
"$VRAMFIT" apply anchors.yaml --set warmup.start_lr=1.0e-5 >out.txt 2>err.txt
expect "an alias set: exit 0" test $? -eq 0
expect "the alias replaced by the value" grep -qx '  start_lr: 1.0e-05' anchors.yaml
expect "the anchor and its other use kept" test "$(grep -c '&lr 1.0e-4$\|^final_lr: \*lr$' anchors.yaml)" -eq 2
expect "the replacement is said" grep -q 'anchors.yaml:4: warmup.start_lr: warmup.start_lr \*lr -> 1.0e-05 (written in place of the alias \*lr; &lr keeps its value for the keys that still use it)' err.txt

# ---- which tool a file is for ----
cp "$SRC/tests/data/readme/pretrain_512m.yaml" own.yaml
refused "no tool's keys: not guessed" "own\.yaml:1:1: cannot tell which tool reads this file for seq=1536 \(its keys .* are not enough to take it for [a-z]+\): use --format F" own.yaml own.yaml --set seq=1536
"$VRAMFIT" apply own.yaml --set max_seq_len=1536 >out.txt 2>err.txt
expect "the project's own key written" grep -q '^max_seq_len: 1536 ' own.yaml
printf 'per_device_train_batch_size: 4\noutput_dir: out\n' >told.yaml
"$VRAMFIT" apply told.yaml --set batch=2 >out.txt 2>err.txt
expect "the tool taken is said, with its keys" grep -qx 'note: told.yaml: taken for hf by its keys per_device_train_batch_size, output_dir (--format names another tool)' err.txt
printf 'BATCH_SIZE = 8\nSEQ_LEN = 1024\n' >config.py
refused ".py config" 'config\.py:1:1: a Python file, not a YAML or JSON config: its settings are code' config.py config.py --set batch=4

# ---- what must work ----
mkdir -p ok && cp ds_m.json ok/ && cd ok || exit 1
printf 'per_device_train_batch_size: 8\ngradient_accumulation_steps: 2\ndeepspeed: ds_m.json\noutput_dir: out\n' >hfm.yaml
"$VRAMFIT" apply hfm.yaml ds_m.json --set batch=2 --set accumulation=4 >out.txt 2>err.txt
expect "HF + DeepSpeed: exit 0" test $? -eq 0
expect "train_batch_size fixed to micro x accumulation x GPUs" grep -q '"train_batch_size": 32,' ds_m.json
expect "the fix is explained" grep -q 'train_batch_size 64 -> 32 (= micro 2 x accumulation 4 x 4 GPUs)' err.txt
"$VRAMFIT" apply ds_m.json --set batch=4 --gpus 2 >out.txt 2>err.txt
expect "--gpus sets the world size" grep -q '"train_batch_size": 32,' ds_m.json

printf 'per_device_train_batch_size: 4\n' >keep.yaml
printf 'first backup\n' >keep.yaml.backup
chmod 640 keep.yaml
"$VRAMFIT" apply keep.yaml --set batch=8 >/dev/null 2>&1
expect "existing backup kept" grep -qx 'first backup' keep.yaml.backup
expect "next backup holds the old file" grep -qx 'per_device_train_batch_size: 4' keep.yaml.backup.1
expect "mode kept" test "$(stat -c %a keep.yaml)" = 640
"$VRAMFIT" apply keep.yaml --set batch=16 >/dev/null 2>&1
expect "third backup" grep -qx 'per_device_train_batch_size: 8' keep.yaml.backup.2

mkdir -p real && printf 'per_device_train_batch_size: 4\n' >real/target.yaml && ln -sf real/target.yaml link.yaml
"$VRAMFIT" apply link.yaml --set batch=2 >/dev/null 2>&1
expect "symlink still a symlink" test -L link.yaml
expect "symlink target edited" grep -qx 'per_device_train_batch_size: 2' real/target.yaml
expect "backup next to the target" test -f real/target.yaml.backup

"$VRAMFIT" apply --env new.env >out.txt 2>err.txt
expect "--env creates the file" grep -qx 'export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True' new.env
expect "--env sets both names" grep -qx 'export PYTORCH_ALLOC_CONF=expandable_segments:True' new.env
expect "--env on a new file makes no backup" test ! -e new.env.backup

printf 'per_device_train_batch_size: 4\n' >j.yaml
"$VRAMFIT" apply j.yaml --set batch=6 --json >out.json 2>err.txt
expect "--json exit 0" test $? -eq 0
expect "--json lists the change" python3 -c '
import json, sys
r = json.load(open("out.json"))
c = r["files"][0]["changes"][0]
sys.exit(0 if (c["key"], c["path"], c["old"], c["new"], c["line"]) == ("batch", "per_device_train_batch_size", "4", "6", 1)
       and r["files"][0]["backup"].endswith("j.yaml.backup") and r["files"][0]["diff"].startswith("--- j.yaml") else 1)'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
