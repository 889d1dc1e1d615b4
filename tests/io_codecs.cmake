# Tests of the io layer (JSON, safetensors) and the scalar number-format codecs.
polymoe_add_test(test_codecs ${CMAKE_CURRENT_SOURCE_DIR}/unit/codecs/test_codecs.cpp)
polymoe_add_test(test_safetensors ${CMAKE_CURRENT_SOURCE_DIR}/unit/io/test_safetensors.cpp)
polymoe_add_test(test_json ${CMAKE_CURRENT_SOURCE_DIR}/unit/io/test_json.cpp)
# Reading and replacing files (io/file_io.hpp): regular files only, bounded, atomic, by inode.
polymoe_add_test(test_file_io NO_INSTANCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/io/test_file_io.cpp)
