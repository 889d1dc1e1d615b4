# A transformers fixture through `polymoe run --kernel cuda`, then `polymoe compare` against the
# transformers output. Where no GPU runs the kernel (or the host has fewer GPUs than the ranks of a
# dispatcher between GPUs), prints the tool's message (the test is then reported as skipped,
# SKIP_REGULAR_EXPRESSION); any other failure fails the test.
#   cmake -DTOOL=... -DCASE_DIR=... -DOUT=... -DTOL=... [-DQUANT=bf16] [-DA2A=local]
#         [-DLAUNCH=mpirun|-np|2] -P cuda_fixture.cmake
if(NOT QUANT)
  set(QUANT bf16)
endif()
if(NOT A2A)
  set(A2A local)
endif()
string(REPLACE "|" ";" launch "${LAUNCH}")
execute_process(COMMAND ${launch} ${TOOL} run --checkpoint ${CASE_DIR} --layer 0 --input ${CASE_DIR}/io.safetensors
                        --output ${OUT} --quant ${QUANT} --kernel cuda --a2a ${A2A}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  if(err MATCHES "no usable GPU|need a GPU each")
    message("${err}")
    return()
  endif()
  message(FATAL_ERROR "run failed (${rc}): ${out}${err}")
endif()
if(NOT out MATCHES "${A2A} / ${QUANT} / cuda \\(")
  message(FATAL_ERROR "run did not say it ran kernel::cuda:\n${out}")
endif()
execute_process(COMMAND ${TOOL} compare ${OUT} ${CASE_DIR}/io.safetensors --tensor output --tol ${TOL}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compare failed (${rc}): ${out}${err}")
endif()
message("${out}")
