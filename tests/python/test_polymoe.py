"""The Python module against references computed another way.

    test_polymoe.py --tool <polymoe> --work <dir> [--fixtures <dir>]

Every valid triple through Python equals the tool's forward (`polymoe run`, the C++ program) on a
checkpoint the tool writes, bitwise; a layer built from dicts of arrays matches the transformers
output of the Mixtral fixture; zero copies, strides, bf16, bad inputs, submit/wait and the GIL.
"""
import argparse
import ctypes
import gc
import json
import os
import struct
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import polymoe

ARGS = None
DTYPES = {"F32": np.float32, "I32": np.int32, "BF16": np.uint16, "F16": np.float16, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_round(x):
    """fp32 -> bf16 bit patterns, round to nearest even (NaN kept), in numpy."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class BF16Tensor:
    """A host tensor that says it is bfloat16 through DLPack (as torch's do), written here with
    ctypes from the DLPack header's layout; counts the deleter's calls."""

    def __init__(self, bits, row_stride=None):
        self.bits = bits  # uint16 [rows, >= cols]
        self.deleted = 0
        self.cols = bits.shape[1] if row_stride is None else row_stride[1]
        self.stride = bits.shape[1] if row_stride is None else row_stride[0]

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        self._shape = (ctypes.c_int64 * 2)(self.bits.shape[0], self.cols)
        self._strides = (ctypes.c_int64 * 2)(self.stride, 1)

        def deleter(_):
            self.deleted += 1

        self._deleter = DELETER(deleter)
        self._m = DLManagedTensor(DLTensor(self.bits.ctypes.data, DLDevice(1, 0), 2, DLDataType(4, 16, 1),
                                           self._shape, self._strides, 0), None, self._deleter)
        return _capsule_new(ctypes.addressof(self._m), b"dltensor", None)


class Checkpoint:
    """A tiny Mixtral-layout checkpoint written by the tool, and an input batch for it."""

    dir = None

    @classmethod
    def get(cls):
        if cls.dir is None:
            d = os.path.join(ARGS.work, "tiny")
            subprocess.run([ARGS.tool, "make-checkpoint", "--preset", "tiny-mixtral", "--out", d, "--tokens", "0"],
                           check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            rng = np.random.default_rng(7)
            cls.hidden = rng.standard_normal((13, cfg["hidden_size"]), dtype=np.float32)
            cls.logits = rng.standard_normal((13, cfg["num_local_experts"]), dtype=np.float32)
            cls.input = os.path.join(ARGS.work, "tiny_input.safetensors")
            write_safetensors(cls.input, {"hidden_states": cls.hidden, "router_logits": cls.logits})
            cls.dir = d
        return cls


def tool_forward(ck, quant, kernel):
    out = os.path.join(ARGS.work, f"tool_{quant}_{kernel}.safetensors")
    subprocess.run([ARGS.tool, "run", "--checkpoint", ck.dir, "--layer", "0", "--input", ck.input, "--output", out,
                    "--quant", quant, "--kernel", kernel], check=True, stdout=subprocess.DEVNULL)
    return read_safetensors(out)


class Module(unittest.TestCase):
    def test_valid_triples_and_describe(self):
        triples = polymoe.valid_triples()
        self.assertIn(("local", "fp32", "reference"), triples)
        self.assertEqual(len(set(triples)), len(triples))
        d = polymoe.describe()
        self.assertEqual(d["triples"], len(triples))
        self.assertIn("python", d["components"])
        self.assertEqual(set(d["kernels"]), {k for _, _, k in triples})
        self.assertRegex(d["version"], r"^\d+\.\d+\.\d+$")

    def test_invalid_triple_lists_the_valid_choices(self):
        ck = Checkpoint.get()
        with self.assertRaisesRegex(ValueError, r"^polymoe: unknown kernel= 'fast'; valid kernel names.*reference"):
            polymoe.Layer.from_checkpoint(ck.dir, 0, quant="fp32", kernel="fast")
        with self.assertRaisesRegex(ValueError, r"^polymoe: unknown quant= 'nope'.*fp32"):
            polymoe.Layer.from_checkpoint(ck.dir, 0, quant="nope", kernel="reference")
        fp32_kernels = sorted({k for _, q, k in polymoe.valid_triples() if q == "fp32"})
        invalid = [k for _, _, k in polymoe.valid_triples() if k not in fp32_kernels]
        if invalid:
            with self.assertRaises(polymoe.Error) as e:
                polymoe.Layer.from_checkpoint(ck.dir, 0, quant="fp32", kernel=invalid[0])
            self.assertIn("is not a valid triple", str(e.exception))
            for k in fp32_kernels:
                self.assertIn(k, str(e.exception))


class Readme(unittest.TestCase):
    def test_the_readme_example_runs(self):
        if not ARGS.readme:
            self.skipTest("no --readme")
        with open(ARGS.readme) as f:
            text = f.read()
        code = text.split("## Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
        scope = {}
        exec(compile(code, "README.md", "exec"), scope)
        self.assertEqual(scope["out"].shape, (16, 64))
        self.assertTrue(np.all(np.isfinite(scope["out"])) and np.any(scope["out"] != 0))


class AgainstTheTool(unittest.TestCase):
    def test_every_triple_equals_the_tool_bitwise(self):
        ck = Checkpoint.get()
        kernels = polymoe.describe()["kernels"]
        for a2a, quant, kernel in polymoe.valid_triples():
            with self.subTest(triple=(a2a, quant, kernel)):
                if not kernels[kernel]["available"]:  # kernel="cuda" without a GPU
                    print(f"\n  skipped {a2a}/{quant}/{kernel}: {kernels[kernel]['path']}", file=sys.stderr)
                    continue
                r = tool_forward(ck, quant, kernel)
                ref = r["output"]
                layer = polymoe.Layer.from_checkpoint(ck.dir, 0, quant=quant, kernel=kernel, a2a=a2a)
                out = np.full(ref.shape, np.nan, dtype=np.float32)
                got = layer.forward(ck.hidden, ck.logits, out=out)
                self.assertIs(got, out)
                self.assertTrue(same_bits(out, ref), f"max |diff| {np.max(np.abs(out - ref))}")
                # the routing the tool used, given back: forward_routed agrees bitwise too
                routed = layer.forward_routed(ck.hidden, r["topk_ids"], r["topk_weights"])
                self.assertTrue(same_bits(routed, ref))


class FromDicts(unittest.TestCase):
    def test_mixtral_fixture_from_dicts_matches_transformers(self):
        d = os.path.join(ARGS.fixtures or "", "hf", "mixtral")
        if not ARGS.fixtures or not os.path.isdir(d):
            self.skipTest("no transformers fixtures")
        with open(os.path.join(d, "config.json")) as f:
            hf = json.load(f)
        w = read_safetensors(os.path.join(d, "model.safetensors"))
        io = read_safetensors(os.path.join(d, "io.safetensors"))
        E, p = hf["num_local_experts"], "model.layers.0.block_sparse_moe."
        w13 = np.stack([np.concatenate([w[f"{p}experts.{e}.w1.weight"], w[f"{p}experts.{e}.w3.weight"]]) for e in range(E)])
        w2 = np.stack([w[f"{p}experts.{e}.w2.weight"] for e in range(E)])
        config = {"hidden": hf["hidden_size"], "intermediate": hf["intermediate_size"], "num_experts": E,
                  "top_k": hf["num_experts_per_tok"], "activation": "silu_gated", "routing": "softmax_topk",
                  "renormalize": True}
        layer = polymoe.Layer(config, {"w13": w13, "w2": w2, "router_weight": w[p + "gate.weight"]},
                              quant="fp32", kernel="reference")
        out = layer.forward(io["hidden_states"], io["router_logits"])
        np.testing.assert_allclose(out, io["output"], rtol=1e-4, atol=1e-5)
        # the same layer from the checkpoint, through the loader
        same = polymoe.Layer.from_checkpoint(d, 0, quant="fp32", kernel="reference")
        self.assertTrue(same_bits(same.forward(io["hidden_states"], io["router_logits"]), out))
        # the config from the checkpoint's config.json (the file, or its directory)
        weights = {"w13": w13, "w2": w2, "router_weight": w[p + "gate.weight"]}
        for c in (os.path.join(d, "config.json"), d):
            from_json = polymoe.Layer(c, weights, quant="fp32", kernel="reference")
            self.assertEqual(from_json.config, layer.config)
            self.assertTrue(same_bits(from_json.forward(io["hidden_states"], io["router_logits"]), out))
        # without logits: the router weight makes them (the fixture's logits were made by transformers)
        logits = io["hidden_states"] @ w[p + "gate.weight"].T
        np.testing.assert_allclose(logits, io["router_logits"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(layer.forward(io["hidden_states"]), io["output"], rtol=1e-4, atol=1e-5)
        no_router = polymoe.Layer(config, {"w13": w13, "w2": w2}, quant="fp32", kernel="reference")
        with self.assertRaisesRegex(ValueError, r"^polymoe: router_logits is None, but the layer has no router weight"):
            no_router.forward(io["hidden_states"])
        with self.assertRaisesRegex(ValueError, r"^polymoe: config '.*nowhere.json' does not exist"):
            polymoe.Layer(os.path.join(d, "nowhere.json"), weights)
        with self.assertRaisesRegex(TypeError, r"^polymoe: config is a list"):
            polymoe.Layer([1], weights)


class Tensors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ck = Checkpoint.get()
        cls.ck = ck
        cls.layer = polymoe.Layer.from_checkpoint(ck.dir, 0, quant="bf16", kernel="tbb_grouped")
        cls.ref = cls.layer.forward(ck.hidden, ck.logits)

    def test_zero_copy_out(self):
        out = np.zeros_like(self.ref)
        got = self.layer.forward(self.ck.hidden, self.ck.logits, out=out)
        self.assertIs(got, out)
        self.assertEqual(got.ctypes.data, out.ctypes.data)
        self.assertTrue(same_bits(out, self.ref))

    def test_row_strided_in_and_out(self):
        T, H = self.ck.hidden.shape
        big = np.zeros((T, H + 8), dtype=np.float32)
        big[:, :H] = self.ck.hidden
        bigz = np.zeros((T, self.ck.logits.shape[1] + 3), dtype=np.float32)
        bigz[:, : self.ck.logits.shape[1]] = self.ck.logits
        wide_out = np.full((T, H + 5), 7.0, dtype=np.float32)
        self.layer.forward(big[:, :H], bigz[:, : self.ck.logits.shape[1]], out=wide_out[:, :H])
        self.assertTrue(same_bits(np.ascontiguousarray(wide_out[:, :H]), self.ref))
        self.assertTrue(np.all(wide_out[:, H:] == 7.0))  # nothing written past the view

    def test_dlpack_input(self):
        class Tensor:  # a foreign host tensor that offers DLPack only
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, stream=None):
                return self.a.__dlpack__()

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        out = self.layer.forward(Tensor(self.ck.hidden), Tensor(self.ck.logits))
        self.assertTrue(same_bits(out, self.ref))

    def test_bf16_in_and_out(self):
        h16, z16 = bf16_round(self.ck.hidden), bf16_round(self.ck.logits)
        expect = bf16_round(self.layer.forward(bf16_widen(h16), bf16_widen(z16)))
        out = np.zeros(self.ref.shape, dtype=np.uint16)
        got = self.layer.forward(h16, z16, out=out, dtype="bfloat16")
        self.assertIs(got, out)
        self.assertTrue(np.array_equal(out, expect))

    def test_bf16_through_dlpack(self):
        h16, z16 = bf16_round(self.ck.hidden), bf16_round(self.ck.logits)
        expect = self.layer.forward(h16, z16, dtype="bfloat16")  # the uint16 route, checked above
        th = BF16Tensor(h16)
        out_bits = np.zeros(self.ref.shape, dtype=np.uint16)
        tout = BF16Tensor(out_bits)
        got = self.layer.forward(th, bf16_widen(z16), out=tout)
        self.assertIs(got, tout)
        self.assertTrue(np.array_equal(out_bits, expect))  # written in place
        self.assertEqual((th.deleted, tout.deleted), (1, 1))  # each capsule consumed and released once
        # a row stride through DLPack: every other row of a wider buffer
        T, H = h16.shape
        wide = np.zeros((T, H + 4), dtype=np.uint16)
        wide[:, :H] = h16
        strided = BF16Tensor(wide, row_stride=(H + 4, H))
        with self.assertRaisesRegex(ValueError, r"^polymoe: hidden is a bfloat16 tensor that is not a torch.Tensor"):
            self.layer.forward(strided, bf16_widen(z16))  # no bf16 type to make the output of
        got = self.layer.forward(strided, z16, out=np.zeros(self.ref.shape, np.uint16), dtype="bfloat16")
        self.assertTrue(np.array_equal(got, expect))

    def test_bad_inputs(self):
        h, z = self.ck.hidden, self.ck.logits
        with self.assertRaisesRegex(TypeError, r"^polymoe: hidden has dtype float64"):
            self.layer.forward(h.astype(np.float64), z)
        with self.assertRaisesRegex(ValueError, r"^polymoe: hidden has 7 columns"):
            self.layer.forward(h[:, :7], z)
        with self.assertRaisesRegex(ValueError, r"^polymoe: router_logits has 3 dimensions"):
            self.layer.forward(h, z[None])
        with self.assertRaisesRegex(ValueError, r"^polymoe: hidden has a column stride"):
            self.layer.forward(np.repeat(h, 2, axis=1)[:, ::2], z)
        ro = np.zeros_like(self.ref)
        ro.setflags(write=False)
        with self.assertRaisesRegex(ValueError, r"^polymoe: out is read-only"):
            self.layer.forward(h, z, out=ro)
        with self.assertRaisesRegex(ValueError, r"^polymoe: forward_into: out is \["):
            self.layer.forward(h, z, out=np.zeros((2, 2), dtype=np.float32))
        with self.assertRaisesRegex(TypeError, r"^polymoe: hidden is a list"):
            self.layer.forward([[1.0]], z)
        with self.assertRaisesRegex(TypeError, r"^polymoe: hidden has dtype float32; with dtype=\"bfloat16\""):
            self.layer.forward(h, z, dtype="bfloat16")
        with self.assertRaisesRegex(ValueError, r"topk_ids\[0, 0\] = 99 is outside"):
            self.layer.forward_routed(h, np.full((h.shape[0], 2), 99, np.int32), np.ones((h.shape[0], 2), np.float32))
        with self.assertRaisesRegex(ValueError, r"^polymoe: config: unknown key 'hiden'"):
            polymoe.Layer({"hiden": 4}, {})

    def test_closed_layer(self):
        layer = polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="fp32", kernel="reference")
        layer.close()
        self.assertTrue(layer.closed)
        with self.assertRaisesRegex(ValueError, r"^polymoe: the layer was closed"):
            layer.forward(self.ck.hidden, self.ck.logits)


class Async(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ck = Checkpoint.get()

    def test_submit_wait_equals_forward(self):
        layer = polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="fp8", kernel="tiled")
        ref = layer.forward(self.ck.hidden, self.ck.logits)
        out = np.zeros_like(ref)
        h = layer.submit(self.ck.hidden, self.ck.logits, out=out)
        with self.assertRaisesRegex(ValueError, r"one layer runs one forward at a time"):
            layer.submit(self.ck.hidden, self.ck.logits)
        with self.assertRaisesRegex(ValueError, r"one layer runs one forward at a time"):
            layer.forward(self.ck.hidden, self.ck.logits)
        self.assertIs(h.wait(), out)
        self.assertTrue(same_bits(out, ref))
        with self.assertRaisesRegex(ValueError, r"wait\(\) was called already"):
            h.wait()
        # its errors come back from wait()
        bad = layer.submit_routed(self.ck.hidden, np.full((self.ck.hidden.shape[0], 2), -1, np.int32),
                                  np.ones((self.ck.hidden.shape[0], 2), np.float32))
        with self.assertRaisesRegex(ValueError, r"is outside \[0, num_experts"):
            bad.wait()
        self.assertTrue(same_bits(layer.forward(self.ck.hidden, self.ck.logits), ref))  # usable again

    def test_many_submits_and_a_dropped_handle(self):
        layer = polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="bf16", kernel="tbb_grouped", threads=2)
        self.assertEqual(layer.threads, 2)
        ref = layer.forward(self.ck.hidden, self.ck.logits)
        for i in range(50):
            h = layer.submit(self.ck.hidden, self.ck.logits)
            if i % 2:
                time.sleep(0.001)
            self.assertTrue(same_bits(h.wait(), ref))
        h = layer.submit(self.ck.hidden, self.ck.logits)
        del h  # dropped unwaited: it waits for its forward, and the layer is free again
        gc.collect()
        self.assertTrue(same_bits(layer.forward(self.ck.hidden, self.ck.logits), ref))
        one = polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="bf16", kernel="tbb_grouped", threads=1)
        self.assertEqual(one.threads, 1)
        self.assertTrue(same_bits(one.submit(self.ck.hidden, self.ck.logits).wait(), ref))  # runs on a worker
        with self.assertRaisesRegex(ValueError, r"^polymoe: threads=-1"):
            polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="fp32", kernel="reference", threads=-1)

    def test_gil_released_during_forward(self):
        layer = polymoe.Layer.from_checkpoint(self.ck.dir, 0, quant="fp32", kernel="reference")
        rng = np.random.default_rng(1)
        T = 64
        hidden = rng.standard_normal((T, self.ck.hidden.shape[1]), dtype=np.float32)
        logits = rng.standard_normal((T, self.ck.logits.shape[1]), dtype=np.float32)
        t0 = time.perf_counter()
        layer.forward(hidden, logits)
        once = time.perf_counter() - t0
        reps = max(1, int(0.4 / max(once, 1e-4)))  # about 0.4 s of forward on the reference kernel
        big_h, big_z = np.tile(hidden, (reps, 1)), np.tile(logits, (reps, 1))
        stamps, stop = [], threading.Event()

        def tick():
            while not stop.is_set():
                stamps.append(time.perf_counter())
                for _ in range(200):
                    pass

        t = threading.Thread(target=tick)
        t.start()
        time.sleep(0.05)
        start = time.perf_counter()
        layer.forward(big_h, big_z)
        end = time.perf_counter()
        stop.set()
        t.join()
        self.assertGreater(end - start, 0.1, "the forward was too short to tell")
        margin = 0.02
        inside = [s for s in stamps if start + margin < s < end - margin]
        self.assertGreater(len(inside), 10, "no Python thread ran while the forward computed: the GIL was held")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--tool", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--fixtures")
    p.add_argument("--readme")
    ARGS, rest = p.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
