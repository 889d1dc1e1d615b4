# Installs the polymoe build tree into a scratch prefix, then configures, builds and runs the
# consumer project against it.  -DPOLYMOE_BUILD= -DCONSUMER_SRC= -DWORK=
file(REMOVE_RECURSE ${WORK})
foreach(step
    "${CMAKE_COMMAND};--install;${POLYMOE_BUILD};--prefix;${WORK}/prefix"
    "${CMAKE_COMMAND};-S;${CONSUMER_SRC};-B;${WORK}/build;-DCMAKE_PREFIX_PATH=${WORK}/prefix;-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${WORK}/build"
    "${WORK}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer step failed: ${step}")
  endif()
endforeach()
