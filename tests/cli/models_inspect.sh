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

# ---- Hub ids, aliases and the Hub cache -------------------------------------------------
# models WORD: the entries whose name, Hub id or an alias contains it, any case.
run models qwen2.5
if [ "$rc" -eq 0 ] && [ "$(grep -c '^qwen2\.5-' "$TMP/out")" -eq 7 ] && [ "$(wc -l <"$TMP/out")" -eq 15 ]
then ok; else bad "models qwen2.5: exit $rc, want the seven qwen2.5 entries: $(cat "$TMP/out")"; fi
succeeds '^llama-3\.1-8b +llama +8,030,261,248  meta-llama/Llama-3\.1-8B$' models META-LLAMA-3.1-8B-instruct
succeeds '^  aliases: .*meta-llama/Meta-Llama-3\.1-8B-Instruct' models META-LLAMA-3.1-8B-instruct
succeeds '"hub_id": "Qwen/Qwen2\.5-7B"' models qwen2.5-7b-instruct --json
succeeds '^ +"qwen2\.5-7b-instruct"$' models qwen2.5-7b-instruct --json
fails 1 "^vramfit models: no catalogue model matches 'zzz'$" models zzz
exits 1 models zzz --json
if [ "$(cat "$TMP/out")" = "[]" ]; then ok; else bad "models zzz --json: $(cat "$TMP/out"), want []"; fi

# A catalogue model by its Hub id or an alias, in any case, is the catalogue entry.
succeeds '^qwen2\.5-7b$' inspect Qwen/Qwen2.5-7B-Instruct
succeeds '"name": "qwen2\.5-7b"' inspect QWEN/qwen2.5-7b-INSTRUCT --json
succeeds '"source": "catalogue"' inspect qwen2.5-7B-instruct --json
succeeds '^llama-3\.1-8b$' inspect meta-llama/Meta-Llama-3.1-8B-Instruct
succeeds '^gemma-2-2b$' inspect google/gemma-2-2b-it
run estimate Qwen/Qwen2.5-7B-Instruct --json
cp "$TMP/out" "$TMP/by-alias.json"
run estimate qwen2.5-7b --json
if cmp -s "$TMP/out" "$TMP/by-alias.json"; then ok; else bad "estimate by Hub id differs from estimate by name"; fi

# The Hub cache: models--ORG--NAME/refs/main names snapshots/HASH/, whose files link into
# blobs/ (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub).
hash=0123456789abcdef0123456789abcdef01234567
hub_model() { # hub_model CACHE FOLDER CONFIG: a cached model whose config.json is CONFIG
  mkdir -p "$1/$2/refs" "$1/$2/blobs" "$1/$2/snapshots/$hash"
  printf '%s' "$hash" >"$1/$2/refs/main"
  cp "$3" "$1/$2/blobs/c0ffee"
  ln -s ../../blobs/c0ffee "$1/$2/snapshots/$hash/config.json"
}
hub_model "$TMP/hf/hub" models--my-org--My-Llama "$SRC/data/models/llama-3.2-1b.json"
HF_HOME=$TMP/hf HF_HUB_CACHE= succeeds '^my-org/My-Llama$' inspect MY-ORG/my-llama
HF_HOME=$TMP/hf HF_HUB_CACHE= succeeds "from $TMP/hf/hub/models--my-org--My-Llama/snapshots/$hash\$" inspect my-org/my-llama
HF_HOME=$TMP/hf HF_HUB_CACHE= succeeds '^  parameters +1,235,814,400$' inspect my-org/my-llama
HF_HOME=$TMP/hf HF_HUB_CACHE= succeeds '"name": "my-org/My-Llama"' estimate my-org/my-llama --json
# HF_HUB_CACHE wins over HF_HOME.
hub_model "$TMP/cache" models--my-org--my-llama "$SRC/data/models/gpt2.json"
HF_HOME=$TMP/hf HF_HUB_CACHE=$TMP/cache succeeds '^  parameters +124,439,808$' inspect my-org/my-llama
# A checkpoint whose blob was never downloaded (a dangling link): the config alone.
ln -s ../../blobs/not-downloaded "$TMP/cache/models--my-org--my-llama/snapshots/$hash/model.safetensors"
HF_HUB_CACHE=$TMP/cache succeeds '^  parameters +124,439,808$' inspect my-org/my-llama
# The cache before the catalogue: a cached Hub id of a catalogue model is the cache's.
hub_model "$TMP/hub-cache" models--Qwen--Qwen2.5-7B-Instruct "$SRC/data/models/gpt2.json"
succeeds '^Qwen/Qwen2\.5-7B-Instruct$' inspect qwen/qwen2.5-7b-instruct
succeeds '^  parameters +124,439,808$' inspect qwen/qwen2.5-7b-instruct
rm -rf "$TMP/hub-cache"
# Broken cache folders are one-line errors that say what to run.
mkdir -p "$TMP/cache/models--my-org--no-refs/blobs"
HF_HUB_CACHE=$TMP/cache fails 2 "models--my-org--no-refs: .*refs/main.*'huggingface-cli download my-org/no-refs config.json'" inspect my-org/no-refs
hub_model "$TMP/cache" models--my-org--bad-ref "$SRC/data/models/gpt2.json"
echo '../../../../etc' >"$TMP/cache/models--my-org--bad-ref/refs/main"
HF_HUB_CACHE=$TMP/cache fails 2 "models--my-org--bad-ref/refs/main: not a commit hash" inspect my-org/bad-ref
hub_model "$TMP/cache" models--my-org--no-config "$SRC/data/models/gpt2.json"
rm "$TMP/cache/models--my-org--no-config/blobs/c0ffee"
HF_HUB_CACHE=$TMP/cache fails 2 "snapshots/$hash: this Hub cache snapshot has no config.json; get it with 'huggingface-cli download my-org/no-config config.json'" estimate my-org/no-config

# A miss: exit 2, one line, the closest names; a Hub id says how to get it.
fails 2 "^vramfit estimate: unknown model 'qwen2\.5-7b-instrct': no such file, and not in the catalogue; did you mean qwen2\.5-7b\? \('vramfit models' lists it\)$" estimate qwen2.5-7b-instrct
fails 2 "unknown model 'Qwen/Qwen2-7B': no such file, not in the Hub cache \($TMP/hub-cache\) and not in the catalogue; get it with 'huggingface-cli download Qwen/Qwen2-7B config.json', or name a catalogue model: did you mean qwen2\.5-7b\?$" plan Qwen/Qwen2-7B --gpu 24GiB
fails 2 "unknown model 'someone/unheard-of': .*'huggingface-cli download someone/unheard-of config.json', or name a catalogue model \('vramfit models' lists them\)$" inspect someone/unheard-of
fails 2 "^vramfit inspect: unknown model 'a{200}': no such file" inspect "$(printf 'a%.0s' $(seq 5000))/b"
fails 2 "^vramfit inspect: unknown model '\.\./etc/passwd'" inspect ../etc/passwd
# The catalogue refuses two entries claiming one alias.
cp -r "$SRC/data" "$TMP/data"
sed -i 's|"aliases": \[\]|"aliases": ["Qwen/Qwen2.5-7B-Instruct"]|' "$TMP/data/models/gpt2.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 "models/.*: 'Qwen/Qwen2\.5-7B-Instruct' is claimed by (gpt2|qwen2\.5-7b) and again by (gpt2|qwen2\.5-7b)" models

# ---- errors: exit code and one line on stderr -----------------------------------------------
fails 2 "^vramfit inspect: unknown model 'no-such-model'.*vramfit models" inspect no-such-model
fails 2 "^vramfit inspect: MODEL is missing" inspect
fails 2 "^vramfit inspect: MODEL is missing" inspect --json
fails 2 "^vramfit inspect: expects exactly one MODEL" inspect gpt2 llama-2-7b
fails 2 "^vramfit inspect: unknown option '--bogus'" inspect gpt2 --bogus
fails 2 "^vramfit inspect: unknown option '-x'" inspect -x gpt2
fails 2 "^vramfit models: unknown option '--bogus'" models --bogus
fails 2 "^vramfit models: unknown option '--json=yes'" models --json=yes
fails 2 "^vramfit models: expects at most one WORD, got 'bert' too" models gpt2 bert
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
succeeds '^usage: vramfit models \[--json\] \[WORD\]' models --help
succeeds '^usage: vramfit models' models -h
succeeds '^usage: vramfit inspect MODEL \[--json\] \[--tensors\]' inspect --help
succeeds '^usage: vramfit inspect' inspect gpt2 --help
succeeds '^vramfit [0-9]+\.[0-9]+\.[0-9]+$' --version
succeeds '^  inspect ' --help

finish
