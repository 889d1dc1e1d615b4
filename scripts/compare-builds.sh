#!/usr/bin/env bash
# Same bits before and after a change: runs every transformers fixture through the `polymoe` tool
# of two builds with one kernel and each given scheme, and compares the outputs value for value.
#   scripts/compare-builds.sh OLD_BUILD NEW_BUILD KERNEL SCHEME[,SCHEME...] [FIXTURES_DIR]
set -uo pipefail
old=$1 new=$2 kernel=$3 schemes=$4
fixtures=${5:-${POLYMOE_FIXTURES_DIR:-$(dirname "$0")/../../shared/fixtures}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
same=0 differ=0 failed=0
for dir in "$fixtures"/hf/*/; do
  case=$(basename "$dir")
  [ -f "$dir/io.safetensors" ] || continue
  for q in ${schemes//,/ }; do
    outs=()
    for b in "$old" "$new"; do
      out="$work/$(basename "$b")_${case}_$q.safetensors"
      [ "$b" = "$new" ] && out="$work/new_${case}_$q.safetensors"
      "$b/tools/polymoe" run --checkpoint "$dir" --layer 0 --input "$dir/io.safetensors" --output "$out" \
        --kernel "$kernel" --quant "$q" --quiet > "$work/log" 2>&1 || out=""
      outs+=("$out")
    done
    if [ -z "${outs[0]}" ] || [ -z "${outs[1]}" ]; then
      failed=$((failed + 1)); echo "compare-builds: $case $q $kernel: a run failed: $(tail -1 "$work/log")"
    elif "$new/tools/polymoe" compare "${outs[0]}" "${outs[1]}" --exact > "$work/cmp" 2>&1; then
      same=$((same + 1))
    else
      differ=$((differ + 1)); echo "compare-builds: $case $q $kernel DIFFERS: $(tail -1 "$work/cmp")"
    fi
  done
done
echo "compare-builds: $kernel: $same identical, $differ different, $failed not run"
[ "$differ" -eq 0 ]
