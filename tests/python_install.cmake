# python.install: the package installed into a staging root (DESTDIR=WORK) by the install rules of
# the python component, then imported from there (not from the build tree) and run.
#   cmake -DBUILD=<build> -DPYTHON=<python3> -DSITE=<install dir> -DWORK=<dir> -DCHECK=<check_installed.py>
#         -P python_install.cmake
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -E env DESTDIR=${WORK} ${CMAKE_COMMAND} --install ${BUILD} --component python
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install --component python failed:\n${out}")
endif()
set(site ${WORK}${SITE})
if(NOT EXISTS ${site}/polymoe/__init__.py)
  message(FATAL_ERROR "the install put no package at ${site}/polymoe:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1 ${PYTHON} ${CHECK} ${site}
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed package did not run")
endif()
