# Tests of the quant schemes: bit-exact quantizers, checkpoint factories and re-layout,
# the pre-quantized Hugging Face fixtures, accuracy on random data, bad input.
polymoe_add_test(test_quant
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_fp8.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_fp8_block.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_int8_w8a8.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_int4_w4a8.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_mxfp4.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_nvfp4.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_accuracy.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_wire.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/quant/test_common.cpp)
