#!/bin/sh
# The main job on built-in data: no GPU needed.
set -e
bin="$1"
echo "\$ vramfit inspect llama-3.1-8b"
"$bin" inspect llama-3.1-8b
