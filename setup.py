"""`pip install .` of the Python package polymoe: CMake builds the module polymoe._polymoe (the
target polymoe_python of this tree, nothing else), setuptools packages it with python/polymoe.

    pip install --no-build-isolation .                                   # from a clone
    CMAKE_ARGS="-DPOLYMOE_CUDA=ON" pip install --no-build-isolation .     # with kernel="cuda"
    CMAKE_ARGS="-DPOLYMOE_NATIVE=OFF" pip wheel --no-build-isolation .   # a wheel for other CPUs

Environment:
  CMAKE_ARGS                   more arguments for CMake's configure, split as a shell splits them
                               (-DCMAKE_PREFIX_PATH=..., -DPOLYMOE_CUDA=ON, -DPOLYMOE_NATIVE=OFF)
  CMAKE_BUILD_PARALLEL_LEVEL   build jobs (default: the CPU count)
  POLYMOE_PREBUILT             a CMake build tree of this source whose module is built already:
                               its module is packaged as it is and nothing is compiled

The module is compiled for this machine's CPU unless CMAKE_ARGS says -DPOLYMOE_NATIVE=OFF.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
SCRATCH = os.path.join(ROOT, ".pip-build")  # setuptools' own build/ would land in CMake's build tree


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(polymoe VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("polymoe: setup.py: no `project(polymoe VERSION ...)` in CMakeLists.txt")
    return m.group(1)


def run(cmd):
    print("polymoe: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        prebuilt = os.environ.get("POLYMOE_PREBUILT")
        if prebuilt:
            tree = os.path.abspath(prebuilt)
        else:
            if shutil.which("cmake") is None:
                raise RuntimeError("polymoe: setup.py needs cmake on PATH (Debian cmake)")
            tree = os.path.abspath(os.path.join(SCRATCH, "cmake"))
            run(["cmake", "-S", ROOT, "-B", tree, "-DCMAKE_BUILD_TYPE=Release", "-DPOLYMOE_PYTHON=ON",
                 "-DPython3_EXECUTABLE=" + sys.executable, "-DPOLYMOE_BUILD_TESTS=OFF",
                 "-DPOLYMOE_BUILD_EXAMPLES=OFF", "-DPOLYMOE_BUILD_BENCH=OFF", "-DPOLYMOE_BUILD_TOOLS=OFF",
                 "-DPOLYMOE_WARNINGS_AS_ERRORS=OFF", "-DPOLYMOE_INSTALL=OFF"]
                + shlex.split(os.environ.get("CMAKE_ARGS", "")))
            jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
            run(["cmake", "--build", tree, "--target", "polymoe_python", "-j", jobs])
        built = os.path.join(tree, "python", "polymoe", "_polymoe" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.isfile(built):
            raise RuntimeError("polymoe: setup.py: no module " + built + (
                " (POLYMOE_PREBUILT names a build tree whose target polymoe_python is built for this interpreter)"
                if prebuilt else ""))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


os.makedirs(SCRATCH, exist_ok=True)
setup(
    version=version(),
    packages=["polymoe"],
    package_dir={"polymoe": "python/polymoe"},
    ext_modules=[Extension("polymoe._polymoe", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(SCRATCH, "setuptools")}, "egg_info": {"egg_base": SCRATCH}},
    zip_safe=False,
)
