#!/usr/bin/env bash
# vramfit inspect on checkpoints: a .safetensors file, a model folder, a sharded index and a
# GGUF give the right params/dtype/bytes; corrupt ones exit 2 with one line naming the file.
#
# Run by CTest with VRAMFIT (the binary) and VF_TEST_TMP set; the checks come from
# lib/harness.sh. The files are generated here with python3's standard library.
NAME=readers
source "$(dirname "$0")/lib/harness.sh"

python3 - "$TMP" <<'EOF' || { echo "0 passed, 1 failed"; exit 1; }
import json, os, struct, sys

tmp = sys.argv[1]
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1}

def safetensors(path, tensors, header_len=None):
    """tensors: [(name, dtype, shape)], laid out back to back; data left as zeros."""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if header_len is None else header_len))
        f.write(text)
        f.truncate(8 + len(text) + at)

def gguf_string(s):
    return struct.pack("<Q", len(s)) + s.encode()

def gguf(path, version=3):
    """A tiny llama: hidden 64, 1 layer, 4 heads (2 KV), ffn 128, vocab 100, in F16."""
    kv = [("general.architecture", 8, gguf_string("llama"))]
    for key, v in [("embedding_length", 64), ("block_count", 1), ("feed_forward_length", 128),
                   ("attention.head_count", 4), ("attention.head_count_kv", 2),
                   ("context_length", 256)]:
        kv.append(("llama." + key, 4, struct.pack("<I", v)))
    tensors = [("token_embd.weight", [64, 100], 1), ("blk.0.attn_norm.weight", [64], 0),
               ("blk.0.attn_q.weight", [64, 64], 1), ("blk.0.attn_k.weight", [64, 32], 1),
               ("blk.0.attn_v.weight", [64, 32], 1), ("blk.0.attn_output.weight", [64, 64], 1),
               ("blk.0.ffn_norm.weight", [64], 0), ("blk.0.ffn_gate.weight", [64, 128], 1),
               ("blk.0.ffn_up.weight", [64, 128], 1), ("blk.0.ffn_down.weight", [128, 64], 1),
               ("output_norm.weight", [64], 0), ("output.weight", [64, 100], 1)]
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for key, t, v in kv:
        out += gguf_string(key) + struct.pack("<I", t) + v
    at = 0
    for name, ne, t in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, at)
        n = 4 if t == 0 else 2
        for d in ne:
            n *= d
        at += (n + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out)
        f.truncate(len(out) + at)

small = [("model.embed_tokens.weight", "BF16", [32, 8]),
         ("model.layers.0.self_attn.q_proj.weight", "BF16", [8, 8]),
         ("model.norm.weight", "F32", [8])]
safetensors(f"{tmp}/small.safetensors", small)

# A folder whose config.json matches its checkpoint exactly.
os.makedirs(f"{tmp}/folder")
config = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
          "vocab_size": 32, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
json.dump(config, open(f"{tmp}/folder/config.json", "w"))
folder = [("model.embed_tokens.weight", [32, 8])]
for p, shape in [("input_layernorm", [8]), ("self_attn.q_proj", [8, 8]),
                 ("self_attn.k_proj", [4, 8]), ("self_attn.v_proj", [4, 8]),
                 ("self_attn.o_proj", [8, 8]), ("post_attention_layernorm", [8]),
                 ("mlp.gate_proj", [16, 8]), ("mlp.up_proj", [16, 8]),
                 ("mlp.down_proj", [8, 16])]:
    folder.append((f"model.layers.0.{p}.weight", shape))
folder.append(("model.norm.weight", [8]))
safetensors(f"{tmp}/folder/model.safetensors", [(n, "BF16", s) for n, s in folder])

# A two-shard index.
os.makedirs(f"{tmp}/sharded")
wm = {}
for i, part in enumerate([small[:2], small[2:]]):
    name = f"model-{i + 1:05d}-of-00002.safetensors"
    safetensors(f"{tmp}/sharded/{name}", part)
    wm.update({t[0]: name for t in part})
json.dump({"metadata": {}, "weight_map": wm},
          open(f"{tmp}/sharded/model.safetensors.index.json", "w"))

gguf(f"{tmp}/tiny.gguf")
gguf(f"{tmp}/old.gguf", version=1)
safetensors(f"{tmp}/corrupt.safetensors", small, header_len=1 << 40)
with open(f"{tmp}/overlap.safetensors", "wb") as f:
    h = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' \
        b'"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    f.write(struct.pack("<Q", len(h)) + h + b"\0" * 12)
os.makedirs(f"{tmp}/lost")
json.dump({"weight_map": {"w": "model-00001-of-00001.safetensors"}},
          open(f"{tmp}/lost/model.safetensors.index.json", "w"))
EOF

# inspect_json MODEL KEY=VALUE...: exit 0, nothing on stderr, and each top-level field of
# the JSON equal to VALUE (compared as JSON text).
inspect_json() {
  local model=$1
  shift
  "$VRAMFIT" inspect "$model" --json >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$TMP/err" ]; then
    bad "inspect $model --json: exit $rc: $(head -c 300 "$TMP/err")"
    return
  fi
  local why
  why=$(python3 - "$TMP/out" "$@" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for pair in sys.argv[2:]:
    key, want = pair.split("=", 1)
    got = json.dumps(doc.get(key))
    if got != want:
        print(f"{key} is {got}, want {want}")
EOF
  )
  if [ -n "$why" ]; then bad "inspect $model --json: $why"; else ok; fi
}

# fails MODEL PATTERN: exit 2, nothing on stdout, one line on stderr matching PATTERN.
# corrupt FILE PATTERN: inspect exits 2 with one stderr line matching PATTERN.
corrupt() { fails 2 "$2" inspect "$1" --json; }

# 32*8 + 8*8 BF16 and 8 F32: 328 params, 320*2 + 8*4 bytes.
inspect_json "$TMP/small.safetensors" params=328 dtype='"BF16"' bytes=672 family=null \
  "source=\"$TMP/small.safetensors\""
# The folder's config and checkpoint agree: no notes, the config's family.
inspect_json "$TMP/folder" params=856 dtype='"BF16"' bytes=1712 family='"llama"' notes='[]' \
  "source=\"$TMP/folder\""
inspect_json "$TMP/sharded" params=328 dtype='"BF16"' bytes=672
inspect_json "$TMP/sharded/model.safetensors.index.json" params=328 bytes=672
# The GGUF carries its architecture: 2*100*64 + 3*64 + 2*64*64 + 2*64*32 + 3*64*128.
inspect_json "$TMP/tiny.gguf" params=49856 dtype='"F16"' bytes=100096 family='"llama"' \
  model_type='"llama"'

corrupt "$TMP/corrupt.safetensors" \
  "^vramfit inspect: $TMP/corrupt.safetensors: byte 0: header length 1099511627776 exceeds"
corrupt "$TMP/overlap.safetensors" \
  "^vramfit inspect: $TMP/overlap.safetensors: byte [0-9]+: tensor 'b': data_offsets \[4, 12\] overlap"
corrupt "$TMP/old.gguf" "^vramfit inspect: $TMP/old.gguf: byte 4: GGUF v1 is not supported"
corrupt "$TMP/lost" "^vramfit inspect: $TMP/lost/model-00001-of-00001.safetensors: cannot open"

finish
