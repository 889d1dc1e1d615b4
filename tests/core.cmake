# Tests of the core, the policies and the kernels (mirroring include/, policies/, kernels/).
polymoe_add_test(test_routing ${CMAKE_CURRENT_SOURCE_DIR}/unit/core/test_routing.cpp)
polymoe_add_test(test_pairing ${CMAKE_CURRENT_SOURCE_DIR}/unit/core/test_pairing.cpp)
polymoe_add_test(test_bad_input ${CMAKE_CURRENT_SOURCE_DIR}/unit/core/test_bad_input.cpp)
polymoe_add_test(test_hf_fixtures ${CMAKE_CURRENT_SOURCE_DIR}/unit/layer/test_hf_fixtures.cpp)
polymoe_add_test(test_kernel_agreement ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_kernel_agreement.cpp)
polymoe_add_test(test_permute ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels/test_permute.cpp)
polymoe_add_test(test_steady_state ${CMAKE_CURRENT_SOURCE_DIR}/unit/layer/test_steady_state.cpp)
polymoe_add_test(test_degenerate ${CMAKE_CURRENT_SOURCE_DIR}/unit/layer/test_degenerate.cpp)
