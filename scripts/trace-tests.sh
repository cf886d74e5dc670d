#!/bin/sh
# Runs the Python tests, each in the environment it needs: test_<framework>.py and
# test_<framework>_<what>.py in .venv-trace/<framework> (test_<framework>@<release>.py in
# .venv-trace/<framework>@<release>), the framework-free tests (tracker, rules, the binding) in
# the hf one. A missing environment is a
# failure: `make trace-env` builds them.
set -eu
cd "$(dirname "$0")/.."
root=${VRAMFIT_TRACE_ENV:-.venv-trace}
status=0
for test in python/tests/test_*.py; do
  name=$(basename "$test" .py)
  fw=${name#test_}
  [ -d "$root/$fw" ] || fw=${fw%%_*}
  [ -d "$root/$fw" ] || fw=hf
  env=$root/$fw
  if [ ! -x "$env/bin/python" ]; then
    echo "trace-tests: $env is missing; run 'make trace-env'" >&2
    exit 1
  fi
  # test_NAME@RELEASE is no module name Python can import: pytest imports it by its path.
  case $name in *@*) mode=--import-mode=importlib ;; *) mode= ;; esac
  echo "trace-tests: $test in $env"
  VRAMFIT_FAKECUDA_SHIM=$env/lib/vramfit_fakecuda.so \
    "$env/bin/python" -m pytest -q -p no:cacheprovider -p no:warnings $mode "$test" || status=1
done
exit $status
