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
  if(step STREQUAL "${WORK}/build/consumer")
    set(consumer_out "${out}")
  endif()
endforeach()

# The consumer is compiled without -march: its fast kernels must run the best instruction-set level
# that the CPU's flags (Linux's /proc/cpuinfo, read here, not by the library) allow.
if(EXISTS /proc/cpuinfo)
  file(READ /proc/cpuinfo cpuinfo)
  string(REGEX MATCH "\nflags[^\n]*" flags "${cpuinfo}")
  set(avx512 TRUE)
  foreach(flag avx512f avx512cd avx512bw avx512dq avx512vl fma bmi2)
    if(NOT flags MATCHES " ${flag}( |$)")
      set(avx512 FALSE)
    endif()
  endforeach()
  set(level "portable loops, no AVX-512")
  if(avx512)
    set(level "AVX-512 without VNNI, BF16 or VBMI")
    if(flags MATCHES " avx512_vnni( |$)" AND flags MATCHES " avx512_bf16( |$)" AND flags MATCHES " avx512vbmi( |$)")
      set(level "AVX-512 with VNNI, BF16 and VBMI")
      if(cpuinfo MATCHES "vendor_id[ \t]*: AuthenticAMD")
        set(level "AVX-512 with VNNI, BF16 and VBMI, for AMD Zen")
      endif()
    endif()
  endif()
  if(NOT consumer_out MATCHES "isa=best: local / bf16 / tiled \\(${level}, chosen at run time\\): [^\n]*: ok")
    message(FATAL_ERROR "the consumer built without -march does not run ${level} with isa=best:\n${consumer_out}")
  endif()
  message(STATUS "the consumer built without -march runs ${level}")
  # and kernel::tiled_amx the AMX tiles where the CPU has them (Linux grants their state since 5.16)
  if(level MATCHES "VNNI, BF16" AND flags MATCHES " amx_tile( |$)" AND flags MATCHES " amx_bf16( |$)" AND
     flags MATCHES " amx_int8( |$)")
    if(NOT consumer_out MATCHES "isa=best: local / bf16 / tiled_amx \\(${level}, chosen at run time, AMX tiles\\): [^\n]*: ok")
      message(FATAL_ERROR "the consumer built without -march does not run the AMX tiles:\n${consumer_out}")
    endif()
    message(STATUS "the consumer built without -march runs the AMX tiles")
  endif()
endif()

# the programs installed with the headers (-DPROGRAMS=polymoe;polymoe_bench), each answering --help
# from the prefix
foreach(program ${PROGRAMS})
  set(exe ${WORK}/prefix/bin/${program})
  if(NOT EXISTS ${exe})
    message(FATAL_ERROR "the install holds no ${exe}")
  endif()
  execute_process(COMMAND ${exe} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "[Uu]sage")
    message(FATAL_ERROR "${exe} --help failed (${rc}):\n${out}")
  endif()
  message(STATUS "installed: ${exe}")
endforeach()

# the compile-fail harness's own check: rejected, with this message, and one error only
set(BUILD_DIR ${WORK}/build)
set(TARGET invalid_triple)
set(EXPECT "kernel_does_not_implement_quant_scheme<toy::loop_kernel, polymoe::quant::fp32, polymoe::diagnostic::schemes_this_kernel_implements<polymoe::quant::bf16, toy::grid16>.*polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme")
include(${CMAKE_CURRENT_LIST_DIR}/../compile_fail/run_case.cmake)
