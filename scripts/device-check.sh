#!/usr/bin/env bash
# The whole check on the GPU/AMX device machine, in one call: unpack the Debian packages carried in
# .dev/deps (made here by ../shared/scripts/device-deps.sh .dev/deps), configure, build, run the
# test suite, then the AMX kernels once more with every block on the tiles (the test programs'
# --tuning amx-min-rows=1).
#   scripts/device-check.sh [BUILD_DIR] [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
shift || true
deps=/opt/deps
[ -d $deps/usr/include/eigen3 ] || bash .dev/deps/unpack.sh $deps > /dev/null
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fixtures=$(scripts/fixtures-dir.sh device-check)
export POLYMOE_FIXTURES_DIR=$fixtures POLYMOE_TEST_DATA_DIR=$PWD/tests/data
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$deps/usr \
  -DPOLYMOE_FIXTURES_DIR="$fixtures" -DPOLYMOE_WARNINGS_AS_ERRORS=OFF > "$build.configure.log" 2>&1 ||
  { tail -40 "$build.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$build" -j"$(nproc)" > "$build.build.log" 2>&1 || { grep -E "error|Error" -A3 "$build.build.log" | head -80; exit 1; }
echo "device-check: built in $(( $(date +%s) - start )) s on $(nproc) cores"
status=0
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure "$@" > "$build.ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Not Run" "$build.ctest.log" | head -40
# every block on the AMX tiles (where the machine has them): the kernels' other path at every size
for t in test_tiled_amx test_kernel_agreement test_hf_fixtures; do
  if [ -x "$build/tests/$t" ]; then
    "$build/tests/$t" --gtest_brief=1 --tuning amx-min-rows=1 > "$build.$t.amx.log" 2>&1 || status=1
    echo "$t --tuning amx-min-rows=1: $(tail -1 "$build.$t.amx.log")"
  fi
done
exit $status
