# Runs CMD (an mpirun command line, arguments separated by '|') and passes when every rank failed
# together and cleanly: an exit status in 1..127 (no crash), no rank aborted (MPI_Abort), and
# stderr holding exactly one line that starts with "polymoe: " and matches REGEX (rank 0 reports an
# error every rank holds; mpirun adds its own lines around it).
string(REPLACE "|" ";" cmd "${CMD}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
message(STATUS "exit: ${rc}\nstderr: ${err}")
string(REPLACE ";" "," err "${err}")  # a ';' in a message would split it into two list items (REGEX: use ',')
string(REGEX MATCHALL "(^|\n)polymoe: [^\n]*" reports "${err}")
list(LENGTH reports count)
if(NOT rc MATCHES "^[1-9][0-9]?[0-9]?$" OR rc GREATER 127)
  message(FATAL_ERROR "expected every rank to fail with a status in 1..127, got '${rc}'")
elseif(err MATCHES "MPI_ABORT")
  message(FATAL_ERROR "a rank called MPI_Abort: the ranks did not fail together")
elseif(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one line starting with 'polymoe: ', found ${count}")
elseif(NOT reports MATCHES "${REGEX}")
  message(FATAL_ERROR "the 'polymoe: ' line does not match '${REGEX}'")
endif()
