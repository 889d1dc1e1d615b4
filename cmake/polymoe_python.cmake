# The optional Python component (python/: the extension module polymoe._polymoe and the package
# `polymoe`). POLYMOE_PYTHON:
#   AUTO  build it when Python 3's development files and pybind11 are found, else say why not
#   ON    require it (configure fails with the reason)
#   OFF   skip it
# Nothing in the core depends on it. Python3_EXECUTABLE picks the interpreter (Debian's
# /usr/bin/python3 is the one whose numpy the tests use).
set(POLYMOE_PYTHON AUTO CACHE STRING "Build the Python module: AUTO, ON or OFF")
set_property(CACHE POLYMOE_PYTHON PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${POLYMOE_PYTHON}" polymoe_python_mode)
if(NOT polymoe_python_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "polymoe: POLYMOE_PYTHON must be AUTO, ON or OFF, got '${POLYMOE_PYTHON}'")
endif()

set(POLYMOE_HAS_PYTHON OFF)
set(polymoe_python_reason "")
if(polymoe_python_mode STREQUAL "OFF")
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

if(POLYMOE_HAS_PYTHON)
  message(STATUS "polymoe: Python component: Python ${Python3_VERSION} (${Python3_EXECUTABLE}), pybind11 ${pybind11_VERSION}")
  add_subdirectory(${PROJECT_SOURCE_DIR}/python ${PROJECT_BINARY_DIR}/python)
elseif(polymoe_python_mode STREQUAL "ON")
  message(FATAL_ERROR "polymoe: POLYMOE_PYTHON=ON but the Python component cannot be built: ${polymoe_python_reason}")
else()
  message(STATUS "polymoe: Python component skipped: ${polymoe_python_reason}")
endif()
