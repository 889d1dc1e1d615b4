# python.install: the package installed into a staging root (DESTDIR=WORK) by the install rules of
# the python component, then imported from there (not from the build tree) and run.
#   cmake -DBUILD=<build> -DPYTHON=<python3> -DSITE=<install dir> -DWORK=<dir> -P python_install.cmake
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
set(check "import os, sys, numpy as np, polymoe
assert os.path.realpath(polymoe.__file__).startswith(os.path.realpath(sys.argv[1])), polymoe.__file__
cfg = {'hidden': 16, 'intermediate': 8, 'num_experts': 4, 'top_k': 2, 'renormalize': True}
w = {'w13': np.ones((4, 16, 16), np.float32) * 0.01, 'w2': np.ones((4, 16, 8), np.float32) * 0.01}
layer = polymoe.Layer(cfg, w, quant='fp32', kernel='reference')
out = layer.forward(np.ones((3, 16), np.float32), np.zeros((3, 4), np.float32))
# every expert gives 8 · silu(0.16) · 0.16 · 0.01 (gate and up alike); the renormalized top-2 weights sum to 1
import math
g = 0.16
want = 8 * (g / (1 + math.exp(-g))) * g * 0.01
assert abs(float(out[0, 0]) - want) < 1e-6 * max(1.0, abs(want)), (float(out[0, 0]), want)
print('installed polymoe', polymoe.__version__, 'at', os.path.dirname(polymoe.__file__))")
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${site} PYTHONDONTWRITEBYTECODE=1 ${PYTHON} -c "${check}" ${site}
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed package did not run")
endif()
