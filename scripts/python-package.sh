#!/bin/sh
# The Python package's own checks and builds, in .venv-dev (python/requirements/dev.txt):
#   env      build .venv-dev (left as it is while dev.txt is unchanged)
#   lint     mypy --strict and ruff over the binding and the in-process helpers
#   wheel    build/wheel/vramfit-*.whl with build/libvramfit.so inside, repaired by auditwheel
#            (the manylinux policy the library meets, the libraries it links grafted in), then
#            checked: its tag, the library inside, and installed alone into a fresh environment
#            (python/tests/install_check.py --base)
#   install  `pip install ./python` into a fresh virtual environment, checked there alone
#            (install_check.py --base: the standard library only), then torch 2.13.0 (CPU) and
#            transformers from a wheelhouse kept in build/ (pip's cache fills it once) added and
#            install_check.py run again, outside the source tree
set -eu
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dev=.venv-dev
build=${BUILD:-build}
pip_flags="-q --disable-pip-version-check"

# install_check.py [--base] in the environment $1 (under $build), from outside the source tree
install_check() {
  (cd "$build" && VRAMFIT= VRAMFIT_LIBRARY= VRAMFIT_BINARY=$(pwd)/vramfit \
    "$1/bin/python" ../python/tests/install_check.py ${2:-})
}

env() {
  stamp=$(cksum <python/requirements/dev.txt)
  [ -f "$dev/.stamp" ] && [ "$(cat "$dev/.stamp")" = "$stamp" ] && return
  rm -rf "$dev"
  "$python" -m venv "$dev"
  "$dev/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements/dev.txt
  echo "$stamp" >"$dev/.stamp"
}

case ${1:?usage: scripts/python-package.sh env|lint|wheel|install} in
env) env ;;
lint)
  env
  (cd python && "../$dev/bin/mypy" && "../$dev/bin/ruff" check .)
  ;;
wheel)
  env
  rm -rf "$build/wheel-raw" "$build/wheel"
  VRAMFIT_LIBRARY=$(pwd)/$build/libvramfit.so "$dev/bin/python" -m build -q --wheel --no-isolation \
    --outdir "$build/wheel-raw" python
  "$dev/bin/auditwheel" show "$build"/wheel-raw/*.whl
  PATH=$(pwd)/$dev/bin:$PATH "$dev/bin/auditwheel" repair -w "$build/wheel" "$build"/wheel-raw/*.whl
  wheel=$(ls "$build"/wheel/vramfit-*-py3-none-manylinux_*.whl)
  "$dev/bin/python" -m zipfile -l "$wheel" | grep -q "vramfit/lib/libvramfit.so" || {
    echo "python-package: $wheel holds no vramfit/lib/libvramfit.so" >&2
    exit 1
  }
  rm -rf "$build/venv-wheel"
  "$python" -m venv "$build/venv-wheel"
  "$build/venv-wheel/bin/python" -m pip install $pip_flags --no-index "$wheel"
  install_check venv-wheel --base
  echo "$wheel"
  ;;
install)
  house=$build/wheelhouse
  venv=$build/venv-install
  pins="torch==2.13.0 transformers==5.23.0 hatchling==1.32.4"
  [ -f "$house/.pins" ] && [ "$(cat "$house/.pins")" = "$pins" ] || {
    rm -rf "$house"
    "$python" -m pip download -q --disable-pip-version-check -d "$house" $pins
    echo "$pins" >"$house/.pins"
  }
  rm -rf "$venv"
  "$python" -m venv "$venv"
  VRAMFIT_LIBRARY=$(pwd)/$build/libvramfit.so "$venv/bin/python" -m pip install $pip_flags \
    --no-index --find-links "$house" ./python
  install_check venv-install --base
  "$venv/bin/python" -m pip install $pip_flags --no-index --find-links "$house" torch==2.13.0 transformers==5.23.0
  install_check venv-install
  ;;
*) echo "scripts/python-package.sh: unknown step '$1'" >&2; exit 2 ;;
esac
