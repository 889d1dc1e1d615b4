# ctest step: configure and build tests/fuzz with clang in BUILD. Prints "polymoe-fuzz: skipped"
# (the test is then reported as skipped) when clang cannot build libFuzzer targets here.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BUILD} -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOLYMOE_ROOT=${PROJECT_ROOT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message("${out}\n${err}")
  message("polymoe-fuzz: skipped (the clang fuzz build does not configure)")
  return()
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
