#!/usr/bin/env bash
# The CUDA component's whole check on a machine with an NVIDIA GPU and CUDA >= 12.4, in one call:
# configure with POLYMOE_CUDA=ON, build the CUDA targets and the tool (polymoe_cuda, test_cuda_experts,
# test_cuda_layer, polymoe_cuda_bench), run the CUDA tests (ctest -L cuda), compute-sanitizer memcheck on a
# short test, then time the Qwen3-30B-A3B layer (H=2048, I=768, E=128, k=8) at T=1, 64, 4096.
#   scripts/gpu-check.sh [BUILD_DIR]
# Dependencies: installed, or Debian packages in $POLYMOE_DEBS (default .dev/deps, made by
# ../shared/scripts/device-deps.sh .dev/deps) unpacked into /opt/deps on a machine without them.
# CUDA architectures: $POLYMOE_CUDA_ARCHITECTURES (default 90a, Hopper). The bench: batch sizes
# $POLYMOE_BENCH_TOKENS (default 1,64,4096), more options in $POLYMOE_BENCH_ARGS (e.g. --iters 10).
# Where the Python component is configured (pybind11, DLPack), the module and the tool are built too
# and the Python tests run (ctest -L python: with PyTorch, CUDA tensors, the custom op and
# transformers' MoE blocks as oracles); POLYMOE_GPU_CHECK_PYTHON=0 skips them. Where the NCCL
# component is configured (MPI and NCCL found), its tests run under mpirun (on 2 and 4 GPUs, where
# the machine has them) and, on a machine of 2 or more GPUs, polymoe_nccl_bench on all of them
# (options in $POLYMOE_NCCL_BENCH_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
debs=${POLYMOE_DEBS:-.dev/deps}
deps=/opt/deps
cmake_args=()
if [ -f "$debs/unpack.sh" ]; then
  [ -d $deps/usr/include/eigen3 ] || bash "$debs/unpack.sh" $deps > /dev/null
  cmake_args+=(-DCMAKE_PREFIX_PATH=$deps/usr)
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "gpu-check: no nvcc (put it on PATH)"; exit 1; }
export PATH=$(dirname "$nvcc"):$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
"$nvcc" --version | tail -1
fixtures=$(scripts/fixtures-dir.sh gpu-check)
cmake_args+=(-DPOLYMOE_FIXTURES_DIR="$fixtures")
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
start=$(date +%s)
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" -DPOLYMOE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${POLYMOE_CUDA_ARCHITECTURES:-90a}" \
  -DPOLYMOE_WARNINGS_AS_ERRORS=OFF > "$build.configure.log" 2>&1 || { tail -40 "$build.configure.log"; exit 1; }
grep "polymoe: CUDA" "$build.configure.log" || true
targets=(polymoe_cuda test_cuda_experts test_cuda_layer polymoe_cuda_bench polymoe_cli)
# the NCCL component where it is configured (MPI and NCCL found): its tests run at 2 and 4 ranks
# where there are that many GPUs (skipped otherwise), its bench on every GPU of the machine
nccl=0
grep -q "polymoe: NCCL component:" "$build.configure.log" && nccl=1 && targets+=(test_nccl_dispatchers polymoe_nccl_bench)
grep -E "polymoe: NCCL" "$build.configure.log" || true
cmake --build "$build" --target "${targets[@]}" -j"$(nproc)" > "$build.build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$build.build.log" | head -80; exit 1; }
echo "gpu-check: configured and built in $(( $(date +%s) - start )) s"
status=0
ctest --test-dir "$build" -L cuda -V > "$build.ctest.log" 2>&1 || status=1
grep -E "^[0-9]+: +(E=|  E=)|rel\. error" "$build.ctest.log" | sed 's/^[0-9]*: *//' | head -60 || true
grep -E "^[0-9]+: (nccl |\[FAILED\]|rank [0-9]+: FAILED|SKIPPED|[0-9]+ passed)" "$build.ctest.log" | sed 's/^[0-9]*: *//' | head -20 || true
grep -E -A6 ": Failure$" "$build.ctest.log" | head -60 || true
grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Not Run|Skipped|Failure|FAILED" "$build.ctest.log" | head -40 || true
if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_experts" \
    --gtest_filter='CudaExperts.DeterministicAndGraphReplay:CudaExperts.MatchesReferenceRoutingPatterns:CudaRouting.*:CudaQuantizeE4m3.*' \
    > "$build.memcheck.log" 2>&1 || status=1
  echo "memcheck: $(grep -E "ERROR SUMMARY" "$build.memcheck.log" | tail -1) $(grep -E "PASSED|FAILED" "$build.memcheck.log" | tail -2 | tr '\n' ' ')"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_layer" \
    --gtest_filter='CudaLayer.DeviceViewsStridedBf16AndSharedExperts:CudaLayer.BadInputIsRefusedBeforeAnyLaunch' \
    > "$build.memcheck-layer.log" 2>&1 || status=1
  echo "memcheck (layer): $(grep -E "ERROR SUMMARY" "$build.memcheck-layer.log" | tail -1) $(grep -E "PASSED|FAILED" "$build.memcheck-layer.log" | tail -2 | tr '\n' ' ')"
  timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$build/tests/test_cuda_experts" \
    --gtest_filter='CudaExperts.MatchesReferenceRoutingPatterns:CudaRouting.*' > "$build.racecheck.log" 2>&1 || status=1
  echo "racecheck: $(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$build.racecheck.log" | tail -1) $(grep -E "PASSED|FAILED" "$build.racecheck.log" | tail -2 | tr '\n' ' ')"
  # every scheme of the row (the 4-bit and E4M3 paths' shared-memory stages and scales) too
  timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$build/tests/test_cuda_experts" \
    --gtest_filter='CudaExperts.DeterministicAndGraphReplay' > "$build.racecheck-4bit.log" 2>&1 || status=1
  echo "racecheck (every scheme): $(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$build.racecheck-4bit.log" | tail -1) $(grep -E "PASSED|FAILED" "$build.racecheck-4bit.log" | tail -2 | tr '\n' ' ')"
fi
if [ "${POLYMOE_GPU_CHECK_PYTHON:-1}" = 1 ] && grep -q "polymoe: Python component: Python" "$build.configure.log"; then
  if cmake --build "$build" --target polymoe_python polymoe_cli -j"$(nproc)" > "$build.build-python.log" 2>&1; then
    ctest --test-dir "$build" -L python -V > "$build.ctest-python.log" 2>&1 || status=1
    grep -E "\.\.\. (ok|FAIL|ERROR|skipped)|max\|diff\||^[0-9]+: (Ran|OK|FAILED)|Error:|Traceback|^[0-9]+: +File|Segmentation|tests passed|tests failed" \
      "$build.ctest-python.log" | sed 's/^[0-9]*: *//' | head -80 || true
  else
    grep -E "error" -A3 "$build.build-python.log" | head -40
    status=1
  fi
else
  grep "polymoe: Python" "$build.configure.log" || true
fi
"$build/bench/polymoe_cuda_bench" --hidden 2048 --inter 768 --experts 128 --top-k 8 --tokens ${POLYMOE_BENCH_TOKENS:-1,64,4096} ${POLYMOE_BENCH_ARGS:-} || status=1
gpus=$(nvidia-smi -L 2> /dev/null | grep -c "^GPU" || true)
if [ "$nccl" = 1 ] && [ "${gpus:-0}" -ge 2 ]; then
  mpirun --allow-run-as-root --oversubscribe -np "$gpus" "$build/bench/polymoe_nccl_bench" ${POLYMOE_NCCL_BENCH_ARGS:-} || status=1
fi
exit $status
