#!/usr/bin/env bash
# Installs what polymoe needs on Debian 12 (bookworm) that is not there yet. Idempotent.
set -euo pipefail
packages=(
  build-essential cmake ccache pkg-config
  libboost1.81-dev libeigen3-dev libtbb-dev        # the library: Boost.Mp11/Hana, Eigen 3.4, oneTBB
  libcli11-dev                                      # the programs' command lines (tool, benchmarks)
  libgtest-dev libgmock-dev libbenchmark-dev        # tests and benchmarks
  libdlpack-dev                                     # DLPack tensors at the API edge (polymoe/dlpack.hpp)
  valgrind                                          # the zero-cost (instruction count) tests
  libopenmpi-dev openmpi-bin                        # the MPI dispatchers and their tests
  clang libclang-rt-14-dev                          # the libFuzzer run of the safetensors reader
  gnuplot-nox                                       # polymoe_bench --plot
  pybind11-dev python3-dev python3-numpy            # the Python module (POLYMOE_PYTHON) and its tests
  python3-pip                                       # pip install . (pyproject.toml) and its test
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
