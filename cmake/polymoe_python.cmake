# The optional Python component (python/: the extension module polymoe._polymoe and the package
# `polymoe`). POLYMOE_PYTHON:
#   AUTO  build it when Python 3's development files and pybind11 are found, else say why not
#   ON    require it (configure fails with the reason)
#   OFF   skip it
# Nothing in the core depends on it. Python3_EXECUTABLE picks the interpreter (Debian's
# /usr/bin/python3 is the one whose numpy the tests use).
include(${CMAKE_CURRENT_LIST_DIR}/polymoe_component.cmake)
polymoe_component_mode(PYTHON "Build the Python module")

set(POLYMOE_HAS_PYTHON OFF)
set(polymoe_python_reason "")
if(polymoe_component_mode STREQUAL "OFF")
  set(polymoe_python_reason "POLYMOE_PYTHON=OFF")
else()
  find_package(Python3 3.9 COMPONENTS Interpreter Development.Module QUIET)
  if(NOT Python3_Interpreter_FOUND OR NOT Python3_Development.Module_FOUND)
    set(polymoe_python_reason "Python 3 development files not found (Debian python3-dev; Python3_EXECUTABLE picks the interpreter)")
  else()
    # The interpreter's own pybind11 (pip's, beside a PyTorch) first: it matches that Python's
    # version; else the system's (Debian pybind11-dev).
    execute_process(COMMAND ${Python3_EXECUTABLE} -m pybind11 --cmakedir RESULT_VARIABLE polymoe_pip_pybind11_rc
                    OUTPUT_VARIABLE polymoe_pip_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(polymoe_pip_pybind11_rc EQUAL 0 AND NOT pybind11_DIR)
      find_package(pybind11 2.6 CONFIG QUIET PATHS ${polymoe_pip_pybind11_dir} NO_DEFAULT_PATH)
    endif()
    if(NOT pybind11_FOUND)
      find_package(pybind11 2.6 CONFIG QUIET)
    endif()
    find_package(dlpack CONFIG QUIET)  # tensors of PyTorch, CuPy, JAX cross through DLPack
    if(NOT pybind11_FOUND)
      set(polymoe_python_reason "pybind11 not found (Debian pybind11-dev)")
    elseif(Python3_VERSION VERSION_GREATER_EQUAL 3.12 AND pybind11_VERSION VERSION_LESS 2.11)
      # pybind11 before 2.11 predates Python 3.12's object layout: its modules crash there
      set(polymoe_python_reason "pybind11 ${pybind11_VERSION} does not support Python ${Python3_VERSION} (2.11 or newer does: `pip install pybind11` into that interpreter, or -Dpybind11_DIR)")
    elseif(NOT dlpack_FOUND)
      set(polymoe_python_reason "DLPack's header not found (Debian libdlpack-dev)")
    else()
      set(POLYMOE_HAS_PYTHON ON)
    endif()
  endif()
endif()

polymoe_component_finish(PYTHON Python POLYMOE_HAS_PYTHON "${polymoe_python_reason}"
                         "Python ${Python3_VERSION} (${Python3_EXECUTABLE}), pybind11 ${pybind11_VERSION}" python)
