#!/bin/sh
# Builds the tracer's Python environments (`make trace-env`): one virtual environment per
# framework under .venv-trace/<name>, from the pinned python/requirements/<name>.txt
# (frameworks pin conflicting hub and datasets releases, so they cannot share one), each
# with the fake-CUDA shim compiled against its torch. An environment whose requirements
# have not changed since it was built is left as it is.
#
# usage: scripts/trace-env.sh [FRAMEWORK...]   (default: hf litgpt torchtune lightning litgpt@0.3.0)
set -eu
cd "$(dirname "$0")/.."
root=${VRAMFIT_TRACE_ENV:-.venv-trace}
frameworks=${*:-hf litgpt torchtune lightning litgpt@0.3.0}
python=${PYTHON:-python3}

# The CPU build of torch is a cp311 wheel; any other Python would fetch a CUDA build.
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "trace-env: needs Python 3.11 as '$python' (set PYTHON=...)" >&2
  exit 3
}
command -v g++ >/dev/null || { echo "trace-env: needs g++ (apt-get install g++)" >&2; exit 3; }

build_shim() {
  env=$1
  torch_dir=$("$env/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$("$env/bin/python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  g++ -std=c++20 -O1 -shared -fPIC -w -I"$torch_dir/include" -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    python/vramfit/trace/shim/fakecuda.cpp -L"$torch_dir/lib" -lc10 -ltorch_cpu \
    -Wl,-rpath,"$torch_dir/lib" -o "$env/lib/vramfit_fakecuda.so"
}

for fw in $frameworks; do
  req=python/requirements/$fw.txt
  [ -f "$req" ] || { echo "trace-env: no requirements for '$fw' ($req)" >&2; exit 2; }
  env=$root/$fw
  stamp=$(cat "$req" python/vramfit/trace/shim/fakecuda.cpp | cksum)
  if [ -f "$env/.stamp" ] && [ "$(cat "$env/.stamp")" = "$stamp" ]; then
    echo "trace-env: $env is up to date"
    continue
  fi
  echo "trace-env: building $env from $req"
  rm -rf "$env"
  "$python" -m venv "$env"
  # A lock marked '# trace-env: --no-deps' lists every package of an old release whose own
  # pins are not on PyPI (litgpt 0.3.0 pins a lightning nightly): installed as listed.
  nodeps=$(grep -qx '# trace-env: --no-deps' "$req" && echo --no-deps || true)
  if ! "$env/bin/python" -m pip install -q --disable-pip-version-check $nodeps -r "$req" >"$env/pip.log" 2>&1; then
    grep -v "^WARNING: Location" "$env/pip.log" | tail -n 20 >&2
    echo "trace-env: $fw: pip could not install $req (log: $env/pip.log)" >&2
    exit 3
  fi
  build_shim "$env"
  echo "$stamp" > "$env/.stamp"
done
