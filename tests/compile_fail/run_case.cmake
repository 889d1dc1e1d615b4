# Builds one compile-fail case and checks the outcome.
#   -DBUILD_DIR=... -DTARGET=...            the object library to build
#   -DEXPECT=<regex>                         ko: the build must fail, print this, and print one error
#   -DEXPECT=                                ok: the build must succeed
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the ok twin ${TARGET} does not compile:\n${out}")
  endif()
  message(STATUS "${TARGET} compiles, as it must")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must be rejected with a message matching: ${EXPECT}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${TARGET} failed to compile, but without the expected message '${EXPECT}':\n${out}")
endif()
string(REGEX MATCHALL "[^a-z_]error:" errors "${out}")
list(LENGTH errors n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${TARGET}: expected exactly one compiler error, got ${n}:\n${out}")
endif()
message(STATUS "${TARGET} is rejected with one error matching '${EXPECT}'")
