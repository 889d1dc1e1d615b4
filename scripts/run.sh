#!/usr/bin/env bash
# The README's main job: set up, build the `polymoe` tool, generate a synthetic checkpoint in
# Hugging Face layout (preset tiny: Qwen3-MoE layout, 2 layers, 16 experts, BF16) and run one MoE
# layer of it end to end with the tool, printing a summary with timings.
# Extra arguments go to `polymoe run` (e.g. --quant mxfp4 --kernel reference --threads 2).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)" --target polymoe_cli
polymoe=./build/tools/polymoe
work=build/main_job
start=$(date +%s%N)
"$polymoe" make-checkpoint --preset tiny --out "$work/tiny" --seed 0 --tokens 64
"$polymoe" inspect "$work/tiny" --layer 1
"$polymoe" run --checkpoint "$work/tiny" --layer 1 --input "$work/tiny/input.safetensors" \
  --output "$work/tiny_out.safetensors" --repeat 10 "$@"
# the same layer on the reference kernel (the oracle), compared with the run above
"$polymoe" run --checkpoint "$work/tiny" --layer 1 --input "$work/tiny/input.safetensors" \
  --output "$work/tiny_reference.safetensors" "$@" --kernel reference --quiet
"$polymoe" compare "$work/tiny_out.safetensors" "$work/tiny_reference.safetensors" --tol 1e-4
end=$(date +%s%N)
ms=$(((end - start) / 1000000))
printf 'main job: make-checkpoint + inspect + run + check in %d.%03d s (output in %s)\n' $((ms / 1000)) $((ms % 1000)) \
  "$work/tiny_out.safetensors"
