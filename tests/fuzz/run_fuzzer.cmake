# ctest step: runs the libFuzzer target TARGET for SECONDS on a copy of the kept corpus (new inputs go
# to the copy, not to the source tree). Fails on any crash or sanitizer report.
if(NOT EXISTS ${BUILD}/${TARGET})
  message("polymoe-fuzz: skipped (no fuzz target was built)")
  return()
endif()
file(REMOVE_RECURSE ${BUILD}/corpus_work_${TARGET})
file(MAKE_DIRECTORY ${BUILD}/corpus_work_${TARGET})
execute_process(COMMAND ${BUILD}/${TARGET} ${BUILD}/corpus_work_${TARGET} ${CORPUS} -max_total_time=${SECONDS}
                        -max_len=4096 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                WORKING_DIRECTORY ${BUILD} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the fuzzer found a problem (exit ${rc}); the crashing input is in ${BUILD}")
endif()
