#!/usr/bin/env bash
# Framework releases and PyTorch releases: --framework NAME@VERSION (a release or a month)
# and --torch pick the profile, estimate names what it used, bad versions and broken
# profiles (a user's VRAMFIT_DATA_DIR) are one-line errors with exit 2.
NAME=releases
source "$(dirname "$0")/lib/harness.sh"

# ---- choosing a release ---------------------------------------------------------------------
succeeds '^hf 5\.23 \(torch 2\.13\): sdpa attention' estimate gpt2
succeeds '^hf 5\.23 \(torch 2\.13\)' estimate gpt2 --framework hf@5.23.0
succeeds '^hf 4\.46 \(torch 2\.5\): sdpa attention' estimate gpt2 --framework hf@4.46
succeeds '^hf 4\.49 \(torch 2\.6\)' estimate gpt2 --framework hf@4.52.1
succeeds '^hf 5\.0 \(torch 2\.8\)' estimate gpt2 --framework hf@5.22
succeeds '^hf 4\.54 \(torch 2\.8\)' estimate gpt2 --framework hf@4.57
succeeds '^hf 4\.16 \(torch 1\.10\): eager attention' estimate gpt2 --framework hf@4.16
succeeds '^litgpt 0\.4 \(torch 2\.2\)' estimate gpt2 --framework litgpt@2024-05
succeeds '^litgpt 0\.4 \(torch 2\.2\)' estimate gpt2 --framework litgpt@0.4.5
succeeds '^litgpt 0\.4\.6 \(torch 2\.2\)' estimate gpt2 --framework litgpt@0.4.13
succeeds '^litgpt 0\.4\.6 \(torch 2\.2\)' estimate gpt2 --framework litgpt@2024-09
succeeds '^litgpt 0\.5 \(torch 2\.13\)' estimate gpt2 --framework litgpt
succeeds '^litgpt 0\.5 \(torch 2\.13\)' estimate gpt2 --framework litgpt@0.5.13
succeeds '^hf 4\.36 \(torch 2\.1\)' estimate gpt2 --framework hf@2024-01
succeeds '^hf 5\.23 \(torch 1\.13\)' estimate gpt2 --torch 1.13
succeeds '^torchtune 0\.3 \(torch 2\.4\)' estimate gpt2 --framework torchtune@2024-10
succeeds '^torchtune 0\.4 \(torch 2\.5\)' estimate gpt2 --framework torchtune@0.4.0
succeeds '^torchtune 0\.5 \(torch 2\.5\)' estimate gpt2 --framework torchtune@2025-02
succeeds '^torchtune 0\.1 \(torch 2\.2\)' estimate gpt2 --framework torchtune@0.2.1
succeeds '^torchtitan 0\.1\.0 \(torch 2\.8\)' estimate llama-3.2-1b --framework torchtitan
succeeds '^torchtitan 0\.0\.2 \(torch 2\.6\)' estimate llama-3.2-1b --framework torchtitan@2025-05

# Weights nobody asked a dtype for: torchtune's configs and transformers 5 load them in the
# checkpoint's (llama-3.2-1b's bf16), transformers 4 in float32.
succeeds '^assumed .*weights bf16 \(the checkpoint.s dtype\)' estimate llama-3.2-1b --framework torchtune
succeeds '^assumed .*weights bf16 \(the checkpoint.s dtype\)' estimate llama-3.2-1b --framework hf
succeeds '^assumed .*weights fp32,' estimate llama-3.2-1b --framework hf@4.57

# Older than every release described: the oldest stands in, and the output says so.
succeeds '^note: litgpt@2023-05 predates the releases the litgpt profile describes: its oldest, 0\.0 \(2023-10\), stands in$' \
  estimate gpt2 --framework litgpt@2023-05
succeeds '"litgpt@2023-05 predates' estimate gpt2 --framework litgpt@2023-05 --json
succeeds '^note: torch 1\.9 predates' estimate gpt2 --torch 1.9
succeeds '"notes": \[\]' estimate gpt2 --json

# --json names the release and the PyTorch release it used; the PyTorch release, which no
# option gave, is among the values assumed, the framework and its release are not.
run estimate llama-3.2-1b --weights bf16 --method lora --framework hf@4.16 --json
used=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); s, a = j["setup"], j["assumed"]
print(s["framework"], s["framework_release"], s["torch"], a["torch"], "framework" in a, "framework_release" in a)' "$TMP/out" 2>&1)
[ "$rc" -eq 0 ] && [ "$used" = "hf 4.16 1.10 1.10 False False" ] && ok || bad "setup of hf@4.16: '$used' (exit $rc)"

# The Trainer's model.zero_grad() frees gradients under torch 2, zeroes them in place before:
# LoRA gradients are at the peak only under --torch 1.13.
grads() {
  run estimate llama-3.2-1b --weights bf16 --method lora "$@" --json
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["breakdown"]["gradients"])' "$TMP/out"
}
freed=$(grads) kept=$(grads --torch 1.13)
[ "$freed" = 0 ] && [ "$kept" -gt 0 ] && ok || bad "gradients at the peak: torch 2.13 $freed, torch 1.13 $kept"

# ---- bad versions: exit 2, one line, for every command that takes a setup --------------------
fails 2 "^vramfit estimate: --framework: 'hf@x': the version after '@' is a release \(4\.46\) or a month \(2023-10\)$" \
  estimate gpt2 --framework hf@x
fails 2 "^vramfit estimate: --framework: 'hf@2023-13'" estimate gpt2 --framework hf@2023-13
fails 2 "^vramfit estimate: --torch: 'latest' is not a PyTorch release like 2\.1$" estimate gpt2 --torch latest
fails 2 "^vramfit estimate: --torch: '2024-01'" estimate gpt2 --torch 2024-01
fails 2 "^vramfit estimate: unknown framework 'jax'" estimate gpt2 --framework jax@1.0
fails 2 "^vramfit plan: --framework: 'hf@4\.x'" plan gpt2 --gpu 24GiB --framework hf@4.x
fails 2 "^vramfit plan: --torch: '2x'" plan gpt2 --gpu 24GiB --torch 2x
fails 2 "^vramfit probe: --framework: 'litgpt@'" probe --model gpt2 --framework litgpt@ -- true
fails 2 "^vramfit trace: --framework: 'hf@4\.46\.'" trace gpt2 --framework hf@4.46.
fails 2 "^vramfit trace: --torch: the tracer runs the PyTorch release its environment pins" trace gpt2 --torch 2.1

# ---- a user's copy of the data: its mistakes are named, one line, exit 2 ---------------------
cp -r "$SRC/data" "$TMP/data"
python3 - "$TMP/data/frameworks/hf.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
del d["releases"][0]["sources"]["gqa_expand"]
json.dump(d, open(sys.argv[1], "w"))
PY
VRAMFIT_DATA_DIR=$TMP/data fails 2 "^vramfit estimate: frameworks/hf\.json: release 5\.23: 'gqa_expand' has no source$" estimate gpt2
VRAMFIT_DATA_DIR=$TMP/data succeeds '^litgpt 0\.5' estimate gpt2 --framework litgpt
printf '{"name": "torch", "releases": []}' >"$TMP/data/torch.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 "^vramfit estimate: torch\.json: 'releases' must be a list" estimate gpt2 --framework litgpt
rm "$TMP/data/torch.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 "^vramfit estimate: torch\.json: cannot read the PyTorch releases" estimate gpt2 --framework litgpt

succeeds '--framework F@VERSION|F@VERSION for an older release' estimate --help
succeeds '--torch V' estimate --help
finish
