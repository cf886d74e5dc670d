#!/usr/bin/env bash
# vramfit models / inspect: golden output, MODEL forms, exit codes and one-line errors.
#
# Run by CTest with VRAMFIT (the binary), VF_SOURCE_DIR and VF_TEST_TMP set; the checks
# come from lib/harness.sh.
NAME=models_inspect
source "$(dirname "$0")/lib/harness.sh"

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
# models --json lists every model of models.tsv with its total_params; the models added since
# are held to their own published counts by unit/test_model.
TSV=$SRC/../shared/calibration/models.tsv
if [ -f "$TSV" ]; then
  run models --json
  got=$(grep -Eo '"(name|params)": ("[^"]*"|[0-9]+)' "$TMP/out" | paste - - |
        sed -E 's/"name": "([^"]*)"\t"params": ([0-9]+)/\1 \2/' | sort)
  # Rows whose total is '?' (not published) are left out of both sides.
  unknown=$(awk -F'\t' 'NR > 1 && $14 !~ /^[0-9]+$/ { print $1 }' "$TSV")
  got=$(echo "$got" | grep -vxF -f <(for u in $unknown; do echo "$u"; done; echo '#none'))
  want=$(awk -F'\t' 'NR > 1 && $14 ~ /^[0-9]+$/ { print $1, $14 }' "$TSV" | sort)
  listed=$(echo "$want" | grep -xF -f <(echo "$got"))
  if [ "$listed" = "$want" ]; then ok; else
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

finish
