# The Python module (label python): tests/python/test_polymoe.py with the module from the build tree
# on PYTHONPATH, against the tool's forward (`polymoe run`) and the transformers fixtures. Needs numpy
# in the interpreter the module was built for (Debian python3-numpy).
if(NOT TARGET polymoe_python)
  return()
endif()
# Whether the interpreter the module was built for imports `module`; says why the tests are skipped if not.
function(polymoe_python_imports module var why)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import ${module}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(${var} ON PARENT_SCOPE)
  else()
    set(${var} OFF PARENT_SCOPE)
    message(STATUS "polymoe: ${why} skipped: ${Python3_EXECUTABLE} has no ${module}")
  endif()
endfunction()
if(NOT TARGET polymoe_cli)
  message(STATUS "polymoe: Python tests skipped: they compare with the tool (POLYMOE_BUILD_TOOLS=OFF)")
  return()
endif()
polymoe_python_imports(numpy polymoe_has_numpy "Python tests (Debian python3-numpy)")
if(NOT polymoe_has_numpy)
  return()
endif()
add_test(NAME python.module
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_polymoe.py
                 --tool $<TARGET_FILE:polymoe_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/python_work
                 --fixtures ${POLYMOE_FIXTURES_DIR} --readme ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(python.module PROPERTIES LABELS python TIMEOUT 600
                     ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1")

# The install: `cmake --install --component python` into a staging root (DESTDIR), then the package
# imported from there and run (tests/python_install.cmake).
if(POLYMOE_INSTALL)
  add_test(NAME python.install
           COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DPYTHON=${Python3_EXECUTABLE}
                   -DSITE=${polymoe_python_site} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/python_install
                   -DCHECK=${CMAKE_CURRENT_SOURCE_DIR}/python/check_installed.py
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/python_install.cmake)
  set_tests_properties(python.install PROPERTIES LABELS "python;install")
endif()

# `pip wheel` of the source tree (pyproject.toml, setup.py) around the module built here, installed
# by pip and run (tests/python_wheel.cmake); needs pip, setuptools and wheel (Debian python3-pip).
# setuptools is imported before pip: after pip, its distutils hook refuses to load.
polymoe_python_imports("setuptools, wheel, pip" polymoe_has_pip "the wheel test (Debian python3-pip)")
if(polymoe_has_pip)
  add_test(NAME python.wheel
           COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
                   -DPYTHON=${Python3_EXECUTABLE} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/python_wheel
                   -DCHECK=${CMAKE_CURRENT_SOURCE_DIR}/python/check_installed.py
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/python_wheel.cmake)
  set_tests_properties(python.wheel PROPERTIES LABELS "python;install" TIMEOUT 300)
endif()

# With PyTorch in the same interpreter: torch tensors (CPU, and CUDA where the CUDA component and a
# GPU are), the custom op, and transformers' MoE blocks as oracles (tests/python/test_torch.py).
polymoe_python_imports(torch polymoe_has_torch "Python torch tests")
if(NOT polymoe_has_torch)
  return()
endif()
add_test(NAME python.torch
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_torch.py
                 --tool $<TARGET_FILE:polymoe_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/python_torch_work)
set_tests_properties(python.torch PROPERTIES LABELS "python;torch" TIMEOUT 900
                     ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
