#!/usr/bin/env bash
# The README's main job: set up, build, run the example on its built-in configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target moe_example
./build/examples/moe_example "$@"
