#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over a reduced but representative set of tests:
# input validation and errors (test_bad_input), every valid triple (every quant scheme and kernel)
# against the reference on random and degenerate shapes and thread counts (test_kernel_agreement),
# the tiled kernel's boundaries (test_tiled), the format adapters (test_permute) and the
# safetensors/JSON readers and codecs on malformed input (test_safetensors, test_json, test_codecs).
# Left out to keep CI short: test_quant and test_degenerate (their code paths run in
# test_kernel_agreement; T = 65536 under ASan alone takes minutes).
# Then ThreadSanitizer over the threaded kernels (test_threads: every kernels::parallel_for site with
# 4 threads, against a 1-thread run), built with the kernels' parallel loops on std::threads
# (POLYMOE_STD_THREADS): Debian's oneTBB is not instrumented, so under TSan its scheduler's own
# synchronisation would be reported as races (see docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
targets=(test_bad_input test_kernel_agreement test_tiled test_permute test_safetensors test_json test_codecs)
# -O1 -g1: the usual sanitizer build (line tables for the reports), and much cheaper to compile
# than -O2 -g over the explicit layer instances.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DPOLYMOE_WARNINGS_AS_ERRORS=OFF \
  -DPOLYMOE_BUILD_EXAMPLES=OFF -DPOLYMOE_BUILD_BENCH=OFF -DPOLYMOE_BUILD_TOOLS=OFF -DPOLYMOE_WITH_MPI=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake --build build-asan -j"$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
passed=0 failed=0
for t in "${targets[@]}"; do
  [ -x "build-asan/tests/$t" ] || { echo "sanitize: $t was not built"; failed=$((failed + 1)); continue; }
  if "build-asan/tests/$t" --gtest_brief=1 > "build-asan/$t.log" 2>&1; then
    passed=$((passed + 1)); echo "sanitize: $t clean"
  else
    failed=$((failed + 1)); echo "sanitize: $t FAILED"; tail -50 "build-asan/$t.log"
  fi
done

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DPOLYMOE_WARNINGS_AS_ERRORS=OFF -DPOLYMOE_STD_THREADS=ON \
  -DPOLYMOE_BUILD_EXAMPLES=OFF -DPOLYMOE_BUILD_BENCH=OFF -DPOLYMOE_BUILD_TOOLS=OFF -DPOLYMOE_WITH_MPI=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread"
cmake --build build-tsan -j"$(nproc)" --target test_threads
if TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/test_threads --gtest_brief=1 \
    > build-tsan/test_threads.log 2>&1; then
  passed=$((passed + 1)); echo "sanitize: test_threads (ThreadSanitizer) clean"
else
  failed=$((failed + 1)); echo "sanitize: test_threads (ThreadSanitizer) FAILED"; tail -80 build-tsan/test_threads.log
fi
echo "sanitizers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
