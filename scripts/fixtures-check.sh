#!/usr/bin/env bash
# The Hugging Face fixtures (../shared/fixtures/hf: transformers' outputs) through one kernel on
# this machine: test_hf_fixtures (every valid triple against transformers), then every fixture case
# through `polymoe run` for each scheme asked for, with --kernel reference and with the kernel under
# test, each output compared with transformers' (the tolerances of tests/tools.cmake) and the two
# kernels' outputs with each other. Both passes run twice: as built, and with --tuning amx-min-rows=1
# (test_hf_fixtures, and `polymoe run` of a kernel that has a tuning), which puts every row block of
# kernel::tiled_amx on the AMX tiles (these layers are small).
# Written for an AMX machine (docs/benchmarks.md, "Correctness on the AMX machine"), where the tiles
# themselves run. On a build folder:
#   scripts/fixtures-check.sh --bin build
# or with the binaries behind a launcher that takes the program's name (a bundle copied to the
# machine):
#   scripts/fixtures-check.sh --bin BUNDLE/run --fixtures FIXTURES/hf
# Options: --kernel K (default tiled_amx), --quant LIST (default bf16,int8_w8a8; also fp32,
# fp8_block, fp8_block_weight_only, mxfp4, nvfp4, int4_w4a8), --threads N (default: all cores). Exit status 1 when any test, run or comparison fails.
set -uo pipefail
bin="" fixtures="" kernel=tiled_amx quants=bf16,int8_w8a8 threads=$(nproc)
while (($#)); do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --fixtures) fixtures=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --quant) quants=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "fixtures-check: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || { echo "fixtures-check: --bin BUILD_FOLDER or --bin BUNDLE/run is required" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
fixtures=${fixtures:-$here/../shared/fixtures/hf}
[ -d "$fixtures" ] || { echo "fixtures-check: no fixtures folder '$fixtures'" >&2; exit 2; }
fixtures=$(cd "$fixtures" && pwd)
# A build folder holds tests/ and tools/; anything else is a launcher taking the program's name.
[ -d "$bin" ] || [ -x "$bin" ] || { echo "fixtures-check: --bin '$bin' is neither a folder nor a program" >&2; exit 2; }
if [ -d "$bin" ]; then
  test_hf=("$bin/tests/test_hf_fixtures") polymoe=("$bin/tools/polymoe")
else
  test_hf=("$bin" test_hf_fixtures) polymoe=("$bin" polymoe)
fi
export POLYMOE_FIXTURES_DIR=${fixtures%/hf}
kernels=(reference)
[ "$kernel" = reference ] || kernels+=("$kernel")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAILED: $*"; failed=1; }

for tiles in as-built everywhere; do
  tune=()
  [ $tiles = everywhere ] && tune=(--tuning amx-min-rows=1)
  echo "== tiles: $tiles"
  if "${test_hf[@]}" --gtest_brief=1 "${tune[@]}" > "$work/gtest.log" 2>&1; then
    echo "test_hf_fixtures: $(grep -o '[0-9]* tests\? from .* ran' "$work/gtest.log" | head -1), passed"
  else
    tail -20 "$work/gtest.log"; fail "test_hf_fixtures ($tiles)"
  fi
  for quant in ${quants//,/ }; do
    case "$quant" in  # the tolerances of tests/tools.cmake's fixture and quantize cases
      fp32) tol=1e-5 ;; bf16) tol=1e-2 ;; int8_w8a8 | fp8_block) tol=5e-2 ;; fp8_block_weight_only) tol=8e-2 ;;
      mxfp4 | nvfp4 | int4_w4a8) tol=0.25 ;;
      *) fail "no tolerance here for --quant $quant (fp32, bf16, int8_w8a8, fp8_block, fp8_block_weight_only, mxfp4, nvfp4, int4_w4a8)"; continue ;;
    esac
    for dir in "$fixtures"/*/; do
      case=$(basename "$dir")
      [ -f "$dir/io.safetensors" ] || continue
      for k in "${kernels[@]}"; do
        k_tune=()  # the tuning only for the kernels that have one (polymoe run refuses it for others)
        case "$k" in tiled | tiled_amx) k_tune=("${tune[@]}") ;; esac
        if ! "${polymoe[@]}" run --checkpoint "$dir" --layer 0 --input "$dir/io.safetensors" \
          --output "$work/$k.safetensors" --quant "$quant" --kernel "$k" --threads "$threads" --quiet \
          "${k_tune[@]}" > "$work/run.log" 2>&1; then
          fail "$quant $case $k: $(tail -1 "$work/run.log")"; continue 2
        fi
        r=$("${polymoe[@]}" compare "$work/$k.safetensors" "$dir/io.safetensors" --tensor output --tol $tol 2>&1) ||
          fail "$quant $case $k against transformers"
        echo "$quant $case $k vs transformers: ${r##*: }"
      done
      [ "$kernel" = reference ] && continue
      r=$("${polymoe[@]}" compare "$work/$kernel.safetensors" "$work/reference.safetensors" --tensor output --tol 1e-5 2>&1) ||
        fail "$quant $case $kernel against reference"
      echo "$quant $case $kernel vs reference: ${r##*: }"
    done
  done
done
((failed)) && { echo "fixtures-check: FAILED"; exit 1; }
echo "fixtures-check: all passed"
