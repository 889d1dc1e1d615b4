# python.wheel: `pip wheel` of this source tree (pyproject.toml, setup.py) packaging the module
# already built in BUILD (POLYMOE_PREBUILT: nothing compiled again), the wheel installed by pip into
# a staging directory, then imported from there (not from the build tree) and run.
#   cmake -DSRC=<source> -DBUILD=<build> -DPYTHON=<python3> -DWORK=<dir> -DCHECK=<check_installed.py>
#         -P python_wheel.cmake
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -E env POLYMOE_PREBUILT=${BUILD} PIP_NO_CACHE_DIR=1
                        PIP_DISABLE_PIP_VERSION_CHECK=1 ${PYTHON} -m pip wheel --no-build-isolation --no-deps
                        --no-index -w ${WORK}/dist ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip wheel failed:\n${out}")
endif()
file(GLOB wheels ${WORK}/dist/polymoe-*.whl)
list(LENGTH wheels n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "pip wheel made ${n} polymoe wheels in ${WORK}/dist, expected 1:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
                        ${PYTHON} -m pip install --no-deps --no-index --target ${WORK}/site ${wheels}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip install of ${wheels} failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1 ${PYTHON} ${CHECK} ${WORK}/site
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${wheels}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the package installed from the wheel did not run")
endif()
