# Tests of kernel::tiled: the AVX-512 build (when the compiler targets it) and the
# portable build of the same kernel.
polymoe_add_test(test_tiled ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled.cpp)
polymoe_add_test(test_tiled_portable NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled.cpp)
target_compile_definitions(test_tiled_portable PRIVATE POLYMOE_TILED_PORTABLE)
# bf16 on fp32 FMAs with tall tiles, the Intel configuration, which microkernel.hpp and forward.hpp
# choose by the target (on AMD Zen bf16 runs vdpbf16ps instead): tested whatever the machine.
polymoe_add_test(test_tiled_tall NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled.cpp)
target_compile_definitions(test_tiled_tall PRIVATE POLYMOE_TILED_TALL=1 POLYMOE_TILED_DPBF16=0)
# kernel::tiled_amx: as the project builds it (here -march=native: AMX-targeted on an AMX
# machine, no run-time test) and a build without AMX in the target, which detects it at run time.
polymoe_add_test(test_tiled_amx ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled_amx.cpp)
polymoe_add_test(test_tiled_amx_dispatch NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled_amx.cpp)
target_compile_options(test_tiled_amx_dispatch PRIVATE -mno-amx-tile -mno-amx-bf16 -mno-amx-int8)
# The vectorized activation quantizers of both tiled kernels against the scalar ones (no layers).
polymoe_add_test(test_act_quant NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_act_quant.cpp)
# The ThreadSanitizer set: every parallel loop of the kernels with 4 threads, built only in the
# std::threads configuration of scripts/sanitize.sh (-DPOLYMOE_STD_THREADS=ON -fsanitize=thread).
if(POLYMOE_STD_THREADS)
  polymoe_add_test(test_threads NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_threads.cpp)
endif()
# kernel::tiled and kernel::tiled_amx once more with GEMM 2's rows of y streamed past the caches at
# every size (--tuning y-stream=on; by default detail::stream_y streams y only when y and the weights
# of the experts with rows outgrow the last-level cache, which no layer of these tests does). The
# test programs build their kernels with the tuning they are given (support/test_tuning.hpp).
gtest_discover_tests(test_tiled TEST_SUFFIX .y_stream TEST_LIST test_tiled_y_stream DISCOVERY_TIMEOUT 60
                     EXTRA_ARGS --tuning y-stream=on PROPERTIES LABELS unit)
gtest_discover_tests(test_tiled_amx TEST_SUFFIX .y_stream TEST_LIST test_tiled_amx_y_stream DISCOVERY_TIMEOUT 60
                     EXTRA_ARGS --tuning y-stream=on PROPERTIES LABELS unit)
# kernel::tiled_amx once more with GEMM 1 by block at every size (--tuning gemm1-by-block=on;
# by default detail::gemm1_by_block takes it from 16 rows per block on average).
gtest_discover_tests(test_tiled_amx TEST_SUFFIX .by_block TEST_LIST test_tiled_amx_by_block DISCOVERY_TIMEOUT 60
                     EXTRA_ARGS --tuning gemm1-by-block=on PROPERTIES LABELS unit)
