# Tests of the CUDA component (polymoe::cuda), registered only when it is built. They need a GPU:
# without one each test is reported as skipped, with the reason (GTEST_SKIP), never as passed.
if(TARGET polymoe::cuda)
  add_executable(test_cuda_experts ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda/test_cuda_experts.cpp)
  target_link_libraries(test_cuda_experts PRIVATE polymoe::cuda polymoe_project_options GTest::gtest GTest::gtest_main)
  gtest_discover_tests(test_cuda_experts DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda)
  # kernel::cuda as a layer of the table, against the reference kernel and the fixtures
  add_executable(test_cuda_layer ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda/test_cuda_layer.cpp)
  target_link_libraries(test_cuda_layer PRIVATE polymoe::cuda polymoe::io polymoe_project_options GTest::gtest
                                                polymoe_test_main polymoe_test_instances)
  target_include_directories(test_cuda_layer PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)
  gtest_discover_tests(test_cuda_layer DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda ENVIRONMENT
                       "POLYMOE_FIXTURES_DIR=${POLYMOE_FIXTURES_DIR};POLYMOE_TEST_DATA_DIR=${PROJECT_SOURCE_DIR}/tests/data")
endif()
