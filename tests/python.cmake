# The Python module (label python): tests/python/test_polymoe.py with the module from the build tree
# on PYTHONPATH, against the tool's forward (`polymoe run`) and the transformers fixtures. Needs numpy
# in the interpreter the module was built for (Debian python3-numpy).
if(NOT TARGET polymoe_python)
  return()
endif()
if(NOT TARGET polymoe_cli)
  message(STATUS "polymoe: Python tests skipped: they compare with the tool (POLYMOE_BUILD_TOOLS=OFF)")
  return()
endif()
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy" RESULT_VARIABLE polymoe_numpy_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT polymoe_numpy_rc EQUAL 0)
  message(STATUS "polymoe: Python tests skipped: ${Python3_EXECUTABLE} has no numpy (Debian python3-numpy)")
  return()
endif()
add_test(NAME python.module
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_polymoe.py
                 --tool $<TARGET_FILE:polymoe_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/python_work
                 --fixtures ${POLYMOE_FIXTURES_DIR} --readme ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(python.module PROPERTIES LABELS python TIMEOUT 600
                     ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
