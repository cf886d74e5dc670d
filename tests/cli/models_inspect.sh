#!/usr/bin/env bash
# vramfit models / inspect: golden output, MODEL forms, exit codes and one-line errors.
#
# Run by CTest with VRAMFIT (the binary), VF_SOURCE_DIR and VF_TEST_TMP set.
# UPDATE_GOLDEN=1 rewrites the golden files from the current output instead of comparing;
# look at the diff (git diff tests/data/golden) before committing it.
set -u

VRAMFIT=${VRAMFIT:?set VRAMFIT to the vramfit binary}
SRC=${VF_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GOLDEN=$SRC/tests/data/golden
TMP=${VF_TEST_TMP:-/tmp}/models_inspect.$$
rm -rf "$TMP" && mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
# Goldens are of the embedded catalogue, uncoloured.
unset VRAMFIT_DATA_DIR
export NO_COLOR=1

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

# run ARGS...: runs vramfit, leaving stdout in $TMP/out, stderr in $TMP/err, exit code in $rc.
run() {
  "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

# golden NAME ARGS...: stdout must equal tests/data/golden/NAME byte for byte, exit 0,
# nothing on stderr.
golden() {
  local name=$1
  shift
  run "$@"
  if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
    mkdir -p "$GOLDEN"
    cp "$TMP/out" "$GOLDEN/$name"
    echo "updated $GOLDEN/$name"
  fi
  if [ "$rc" -ne 0 ]; then
    bad "vramfit $*: exit $rc, want 0 ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/err" ]; then
    bad "vramfit $*: unexpected stderr: $(head -c 300 "$TMP/err")"
  elif ! cmp -s "$TMP/out" "$GOLDEN/$name"; then
    bad "vramfit $*: output differs from golden/$name:"
    diff -u "$GOLDEN/$name" "$TMP/out" | head -40 >&2
  else
    ok
  fi
}

# fails CODE PATTERN ARGS...: exit CODE, nothing on stdout, exactly one line on stderr
# matching the extended regex PATTERN.
fails() {
  local want=$1 pattern=$2
  shift 2
  run "$@"
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$rc" -ne "$want" ]; then
    bad "vramfit $*: exit $rc, want $want ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/out" ]; then
    bad "vramfit $*: unexpected stdout: $(head -c 300 "$TMP/out")"
  elif [ "$lines" -ne 1 ]; then
    bad "vramfit $*: $lines lines on stderr, want 1:"
    cat "$TMP/err" >&2
  elif ! grep -Eq -- "$pattern" "$TMP/err"; then
    bad "vramfit $*: stderr '$(cat "$TMP/err")' does not match '$pattern'"
  else
    ok
  fi
}

# succeeds PATTERN ARGS...: exit 0, stdout matches PATTERN, nothing on stderr.
succeeds() {
  local pattern=$1
  shift
  run "$@"
  if [ "$rc" -ne 0 ]; then
    bad "vramfit $*: exit $rc, want 0 ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/err" ]; then
    bad "vramfit $*: unexpected stderr: $(head -c 300 "$TMP/err")"
  elif ! grep -Eq -- "$pattern" "$TMP/out"; then
    bad "vramfit $*: stdout does not match '$pattern': $(head -c 300 "$TMP/out")"
  else
    ok
  fi
}

# same_json A B: two inspect --json outputs describe the same model (all but name and source).
same_json() {
  if diff <(grep -Ev '^  "(name|source)":' "$1") <(grep -Ev '^  "(name|source)":' "$2") >/dev/null
  then ok
  else
    bad "$3: JSON differs from the catalogue entry's"
    diff <(grep -Ev '^  "(name|source)":' "$1") <(grep -Ev '^  "(name|source)":' "$2") | head -20 >&2
  fi
}

# ---- golden output ----------------------------------------------------------------------
golden models.txt models
golden models.json models --json
golden inspect-llama-3.1-8b.txt inspect llama-3.1-8b
golden inspect-gpt2.json inspect gpt2 --json
golden inspect-bert-large-uncased-tensors.json inspect bert-large-uncased --json --tensors
# Flag order does not matter.
golden inspect-bert-large-uncased-tensors.json inspect --tensors bert-large-uncased --json

# ---- the catalogue agrees with the calibration table ------------------------------------
# models --json lists every model of models.tsv with its total_params, and nothing else.
TSV=$SRC/../shared/calibration/models.tsv
if [ -f "$TSV" ]; then
  run models --json
  got=$(grep -Eo '"(name|params)": ("[^"]*"|[0-9]+)' "$TMP/out" | paste - - |
        sed -E 's/"name": "([^"]*)"\t"params": ([0-9]+)/\1 \2/' | sort)
  # Rows whose total is '?' (not published) are left out of both sides.
  unknown=$(awk -F'\t' 'NR > 1 && $14 !~ /^[0-9]+$/ { print $1 }' "$TSV")
  got=$(echo "$got" | grep -vxF -f <(for u in $unknown; do echo "$u"; done; echo '#none'))
  want=$(awk -F'\t' 'NR > 1 && $14 ~ /^[0-9]+$/ { print $1, $14 }' "$TSV" | sort)
  if [ "$got" = "$want" ]; then ok; else
    bad "models --json differs from models.tsv:"
    diff <(echo "$want") <(echo "$got") >&2
  fi
fi

# ---- MODEL forms --------------------------------------------------------------------------
# Catalogue names are case-insensitive and reported in lower case.
succeeds '^llama-2-7b$' inspect LLAMA-2-7B
succeeds '^  parameters +6,738,415,616$' inspect LLAMA-2-7B
succeeds '"name": "qwen2.5-7b"' inspect Qwen2.5-7B --json

# A config.json file, and a folder holding one, describe the same model as the catalogue.
mkdir -p "$TMP/llama"
cp "$SRC/data/models/llama-3.1-8b.json" "$TMP/llama/config.json"
run inspect llama-3.1-8b --json
cp "$TMP/out" "$TMP/catalogue.json"
succeeds '"params": 8030261248' inspect "$TMP/llama/config.json" --json
same_json "$TMP/out" "$TMP/catalogue.json" "inspect FILE"
succeeds "\"source\": \"$TMP/llama/config.json\"" inspect "$TMP/llama/config.json" --json
succeeds '"params": 8030261248' inspect "$TMP/llama" --json
same_json "$TMP/out" "$TMP/catalogue.json" "inspect FOLDER"
succeeds "^$TMP/llama\$" inspect "$TMP/llama"
# A config.json with any name works.
cp "$SRC/data/models/gpt2.json" "$TMP/my-gpt.json"
succeeds '^  parameters +124,439,808$' inspect "$TMP/my-gpt.json"
# --tensors lists every tensor: 148 for GPT-2 (the tied head adds none).
run inspect gpt2 --tensors
n=$(grep -c '^  transformer\.' "$TMP/out")
if [ "$rc" -eq 0 ] && [ "$n" -eq 148 ]; then ok; else bad "inspect gpt2 --tensors: $n tensors, want 148"; fi
succeeds '^  transformer\.h\.0\.attn\.c_attn\.weight +768 x 2304 +F32$' inspect gpt2 --tensors

# ---- errors: exit code and one line on stderr -----------------------------------------------
fails 2 "^vramfit inspect: unknown model 'no-such-model'.*vramfit models" inspect no-such-model
fails 2 "^vramfit inspect: MODEL is missing" inspect
fails 2 "^vramfit inspect: MODEL is missing" inspect --json
fails 2 "^vramfit inspect: expects exactly one MODEL" inspect gpt2 llama-2-7b
fails 2 "^vramfit inspect: unknown option '--bogus'" inspect gpt2 --bogus
fails 2 "^vramfit inspect: unknown option '-x'" inspect -x gpt2
fails 2 "^vramfit models: unknown option '--bogus'" models --bogus
fails 2 "^vramfit models: unknown option '--json=yes'" models --json=yes
fails 2 "^vramfit models: unexpected argument 'gpt2'" models gpt2
fails 2 "^vramfit: 'nosuchcmd' is not a command" nosuchcmd
# A malformed config names the file, line and column.
printf '{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n' >"$TMP/broken.json"
fails 2 "^vramfit inspect: $TMP/broken.json:3:23: invalid JSON" inspect "$TMP/broken.json"
mkdir -p "$TMP/broken"
cp "$TMP/broken.json" "$TMP/broken/config.json"
fails 2 "^vramfit inspect: $TMP/broken/config.json:3:23: invalid JSON" inspect "$TMP/broken"
printf '{"model_type": "llama", "num_hidden_layers": 2}' >"$TMP/missing.json"
fails 2 "^vramfit inspect: $TMP/missing.json: missing 'hidden_size'" inspect "$TMP/missing.json"
printf '{"model_type": "t5"}' >"$TMP/t5.json"
fails 2 "^vramfit inspect: $TMP/t5.json: model_type 't5' is not supported; supported: llama, " inspect "$TMP/t5.json"
printf '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 10}' >"$TMP/kv.json"
fails 2 "^vramfit inspect: $TMP/kv.json: num_key_value_heads must divide num_attention_heads" inspect "$TMP/kv.json"
mkdir -p "$TMP/empty"
fails 2 "^vramfit inspect: $TMP/empty: no config.json" inspect "$TMP/empty"
: >"$TMP/weights.bin"
fails 2 "^vramfit inspect: $TMP/weights.bin: unrecognised model file" inspect "$TMP/weights.bin"

# ---- help and version -------------------------------------------------------------------------
succeeds '^usage: vramfit models \[--json\]' models --help
succeeds '^usage: vramfit models' models -h
succeeds '^usage: vramfit inspect MODEL \[--json\] \[--tensors\]' inspect --help
succeeds '^usage: vramfit inspect' inspect gpt2 --help
succeeds '^vramfit [0-9]+\.[0-9]+\.[0-9]+$' --version
succeeds '^  inspect ' --help

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
