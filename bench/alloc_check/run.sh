#!/bin/sh
# Compares vramfit's caching-allocator model with PyTorch's own allocator on trace event
# files (README.md). Usage:
#
#   bench/alloc_check/run.sh WORKDIR EVENTS...
#
# WORKDIR (outside the repository) receives the torch 2.13.0 CUDA wheel and NVIDIA's CUDA
# runtime wheel from PyPI (pip download, once), the allocator library taken out of the
# first and the CUDA headers out of the second, the stand-ins built from this folder's
# sources, and the comparison program. PYTORCH_ALLOC_CONF and VF_FAKE_CUDA_CAPACITY pass
# to both allocators. Needs build/libvramfit.so (make build), g++ and gcc.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 WORKDIR EVENTS..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$1
shift
mkdir -p "$work"
cd "$work"
case $(pwd)/ in "$root"/*) echo "$0: WORKDIR must lie outside the repository" >&2; exit 2 ;; esac

# The torch release the tracer pins, as its CUDA build (the default wheel on PyPI), and the
# CUDA runtime that build was linked against (its headers give the stand-in the types).
if [ ! -f lib/libc10_cuda.so ]; then
  [ -f wheels/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl ] || pip download --isolated --no-deps --only-binary :all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d wheels torch==2.13.0 >&2
  [ -f wheels/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl ] ||
    pip download --isolated --no-deps -d wheels nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt >&2
  rm -rf x && mkdir -p x lib
  unzip -q -o wheels/torch-2.13.0-*.whl 'torch/lib/libc10.so' 'torch/lib/libc10_cuda.so' \
    'torch/include/c10/*' 'torch/include/torch/headeronly/*' -d x
  for w in wheels/nvidia_cuda_runtime-*.whl wheels/nvidia_cuda_crt-*.whl; do unzip -q -o "$w" -d x; done
  mv x/torch/lib/libc10.so x/torch/lib/libc10_cuda.so lib/
fi
inc="-Ix/torch/include -Ix/nvidia/cu13/include -I$root/include"

# libc10_cuda.so asks for versioned libcudart.so.13 symbols, and opens libnvidia-ml.so.1.
echo 'libcudart.so.13 { global: cuda*; local: *; };' > cudart.map
gcc -std=c17 -O2 -Wall -Wextra -Werror -fPIC -shared -Ix/nvidia/cu13/include \
  -Wl,--version-script=cudart.map -Wl,-soname,libcudart.so.13 "$here/fakecudart.c" -o lib/libcudart.so.13
ln -sf libcudart.so.13 lib/libcudart.so
gcc -std=c17 -O2 -Wall -Wextra -Werror -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 \
  "$here/fakenvml.c" -o lib/libnvidia-ml.so.1
# shellcheck disable=SC2086
g++ -std=c++17 -O1 -Wall $inc "$here/compare.cpp" -o compare -Llib -L"$root/build" \
  -lc10_cuda -lc10 -lcudart -lvramfit -Wl,-rpath,"$(pwd)/lib:$root/build"
# PyTorch warns on stderr at every out-of-memory allocation; the table is on stdout.
LD_LIBRARY_PATH=$(pwd)/lib ./compare "$@" 2> compare.log
