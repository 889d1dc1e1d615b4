"""Imports polymoe from the directory given (an install or a wheel's contents, not the build tree)
and runs a layer whose output is worked out by hand.

    python3 check_installed.py <site dir>
"""
import math
import os
import sys

import numpy as np

site = os.path.realpath(sys.argv[1])
sys.path.insert(0, site)
import polymoe  # noqa: E402

assert os.path.realpath(polymoe.__file__).startswith(site), polymoe.__file__
cfg = {"hidden": 16, "intermediate": 8, "num_experts": 4, "top_k": 2, "renormalize": True}
w = {"w13": np.ones((4, 16, 16), np.float32) * 0.01, "w2": np.ones((4, 16, 8), np.float32) * 0.01}
layer = polymoe.Layer(cfg, w, quant="fp32", kernel="reference")
out = layer.forward(np.ones((3, 16), np.float32), np.zeros((3, 4), np.float32))
# every expert gives 8 · silu(0.16) · 0.16 · 0.01 (gate and up alike); the renormalized top-2 weights sum to 1
g = 0.16
want = 8 * (g / (1 + math.exp(-g))) * g * 0.01
assert abs(float(out[0, 0]) - want) < 1e-6 * max(1.0, abs(want)), (float(out[0, 0]), want)
print("installed polymoe", polymoe.__version__, "at", os.path.dirname(polymoe.__file__))
