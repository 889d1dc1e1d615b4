# Tests of kernel::tiled (issue 4): the AVX-512 build (when the compiler targets it) and the
# portable build of the same kernel.
polymoe_add_test(test_tiled ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled.cpp)
polymoe_add_test(test_tiled_portable NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_tiled.cpp)
target_compile_definitions(test_tiled_portable PRIVATE POLYMOE_TILED_PORTABLE)
