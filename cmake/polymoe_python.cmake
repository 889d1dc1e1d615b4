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
    find_package(pybind11 2.6 CONFIG QUIET)
    if(NOT pybind11_FOUND)
      set(polymoe_python_reason "pybind11 not found (Debian pybind11-dev)")
    else()
      set(POLYMOE_HAS_PYTHON ON)
    endif()
  endif()
endif()

polymoe_component_finish(PYTHON Python POLYMOE_HAS_PYTHON "${polymoe_python_reason}"
                         "Python ${Python3_VERSION} (${Python3_EXECUTABLE}), pybind11 ${pybind11_VERSION}" python)
