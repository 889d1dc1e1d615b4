# Installs the polymoe build tree into a scratch prefix (headers, package files, programs), then
# configures, builds and runs the consumer project against it, checks that its invalid triple is
# rejected with one error, and runs the installed programs from the prefix.
#   -DPOLYMOE_BUILD= -DCONSUMER_SRC= -DWORK= -DPROGRAMS= [-DDEPS_PREFIX_PATH=dir:dir]
file(REMOVE_RECURSE ${WORK})
if(DEPS_PREFIX_PATH)  # where the build found polymoe's dependencies, for the consumer's find_dependency
  set(ENV{CMAKE_PREFIX_PATH} "${DEPS_PREFIX_PATH}")
endif()
foreach(step
    "${CMAKE_COMMAND};--install;${POLYMOE_BUILD};--prefix;${WORK}/prefix"
    "${CMAKE_COMMAND};-S;${CONSUMER_SRC};-B;${WORK}/build;-DCMAKE_PREFIX_PATH=${WORK}/prefix;-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${WORK}/build"
    "${WORK}/build/consumer"
    "${WORK}/build/extension")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer step failed: ${step}")
  endif()
endforeach()

# the programs installed with the headers (-DPROGRAMS=polymoe;polymoe_bench), each answering --help
# from the prefix
foreach(program ${PROGRAMS})
  set(exe ${WORK}/prefix/bin/${program})
  if(NOT EXISTS ${exe})
    message(FATAL_ERROR "the install holds no ${exe}")
  endif()
  execute_process(COMMAND ${exe} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage")
    message(FATAL_ERROR "${exe} --help failed (${rc}):\n${out}")
  endif()
  message(STATUS "installed: ${exe}")
endforeach()

# the compile-fail harness's own check: rejected, with this message, and one error only
set(BUILD_DIR ${WORK}/build)
set(TARGET invalid_triple)
set(EXPECT "kernel_does_not_implement_quant_scheme<toy::loop_kernel, polymoe::quant::fp32, polymoe::diagnostic::schemes_this_kernel_implements<polymoe::quant::bf16, toy::grid16>.*polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme")
include(${CMAKE_CURRENT_LIST_DIR}/../compile_fail/run_case.cmake)
