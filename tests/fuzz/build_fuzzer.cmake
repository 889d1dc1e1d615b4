# ctest step: configure and build tests/fuzz with clang in BUILD. Prints "polymoe-fuzz: skipped"
# (the test is then reported as skipped) only for the reason the fuzz project states when clang
# cannot link libFuzzer targets here; any other failure to configure or build fails the test.
file(REMOVE ${BUILD}/unsupported)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BUILD} -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOLYMOE_ROOT=${PROJECT_ROOT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message("${out}\n${err}")
  message(FATAL_ERROR "the clang fuzz build does not configure")
endif()
if(EXISTS ${BUILD}/unsupported)
  file(READ ${BUILD}/unsupported why)
  message("polymoe-fuzz: skipped (${why})")
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz target failed")
endif()
