# Tests of the CUDA component (polymoe::cuda), registered only when it is built. They need a GPU:
# without one each test is reported as skipped, with the reason (GTEST_SKIP), never as passed.
if(TARGET polymoe::cuda)
  add_executable(test_cuda_experts ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda/test_cuda_experts.cpp)
  target_link_libraries(test_cuda_experts PRIVATE polymoe::cuda polymoe_project_options GTest::gtest GTest::gtest_main)
  gtest_discover_tests(test_cuda_experts DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda)
endif()
