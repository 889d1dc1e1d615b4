"""The Python module with PyTorch: torch tensors through DLPack (CPU and CUDA), the custom op, and
transformers' own MoE blocks as live oracles.

    test_torch.py --tool <polymoe> --work <dir>

Oracles: the module's numpy path (checked bitwise against the C++ tool by test_polymoe.py), and
transformers modules instantiated small with random weights at shapes chosen here, whose outputs
polymoe layers built from their saved checkpoints must match.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import polymoe

ARGS = None


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def tiny_checkpoint():
    d = os.path.join(ARGS.work, "tiny")
    if not os.path.isdir(d):
        subprocess.run([ARGS.tool, "make-checkpoint", "--preset", "tiny-mixtral", "--out", d, "--tokens", "0"],
                       check=True, stdout=subprocess.DEVNULL)
    return d


def cuda_here():
    k = polymoe.describe()["kernels"].get("cuda")
    return torch.cuda.is_available() and k is not None and k["available"]


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def set_up(cls, kernel, seed, tokens):
    """The tiny checkpoint's layer on `kernel`, a batch, and the layer's output for it through numpy."""
    cls.layer = polymoe.Layer.from_checkpoint(tiny_checkpoint(), 0, quant="bf16", kernel=kernel)
    g = torch.Generator().manual_seed(seed)
    cls.h = torch.randn(tokens, cls.layer.config["hidden"], generator=g)
    cls.z = torch.randn(tokens, cls.layer.config["num_experts"], generator=g)
    cls.ref = cls.layer.forward(cls.h.numpy(), cls.z.numpy())  # a CUDA layer: the host path, same kernels


class TorchCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        set_up(cls, "auto", 3, 37)

    def test_float32_tensors_in_and_out(self):
        got = self.layer.forward(self.h, self.z)
        self.assertIsInstance(got, torch.Tensor)
        self.assertEqual(got.dtype, torch.float32)
        self.assertTrue(same_bits(got.numpy(), self.ref))
        out = torch.full_like(self.h, float("nan"))
        self.assertIs(self.layer.forward(self.h, self.z, out=out), out)  # written in place
        self.assertTrue(same_bits(out.numpy(), self.ref))

    def test_bfloat16_tensors(self):
        h16, z16 = self.h.to(torch.bfloat16), self.z.to(torch.bfloat16)
        got = self.layer.forward(h16, z16)
        self.assertEqual(got.dtype, torch.bfloat16)

        def bits(t):
            return t.view(torch.int16).numpy().view(np.uint16)

        # the oracle: the same bf16 values as uint16 bit patterns through numpy
        self.assertTrue(same_bits(bits(got), self.layer.forward(bits(h16), bits(z16), dtype="bfloat16")))

    def test_row_slices_and_int64_ids(self):
        wide = torch.zeros(37, self.h.shape[1] + 8)
        wide[:, : self.h.shape[1]] = self.h
        got = self.layer.forward(wide[:, : self.h.shape[1]], self.z)
        self.assertTrue(same_bits(got.numpy(), self.ref))
        w, ids = torch.topk(torch.softmax(self.z, -1), 2)  # int64 ids, as torch gives them
        routed = self.layer.forward_routed(self.h, ids, w)
        self.assertTrue(same_bits(routed.numpy(), self.layer.forward_routed(self.h.numpy(), ids.int().numpy(), w.numpy())))

    def test_custom_op(self):
        op = torch.ops.polymoe.moe_forward
        got = op(self.h, self.z, polymoe.op_id(self.layer))
        self.assertTrue(same_bits(got.numpy(), self.ref))
        self.assertEqual(polymoe.op_id(self.layer), polymoe.op_id(self.layer))
        torch.library.opcheck(op, (self.h, self.z, polymoe.op_id(self.layer)))
        compiled = torch.compile(lambda h, z: op(h, z, polymoe.op_id(self.layer)) * 2.0, fullgraph=True)
        self.assertTrue(same_bits(compiled(self.h, self.z).numpy(), self.ref * 2.0))
        with self.assertRaisesRegex(ValueError, r"no live layer has id 999999"):
            op(self.h, self.z, 999999)

    def test_submit_with_tensors(self):
        h = self.layer.submit(self.h, self.z)
        self.assertTrue(same_bits(h.wait().numpy(), self.ref))


@unittest.skipUnless(cuda_here(), "no CUDA device, or the module was built without the CUDA component")
class TorchCuda(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        set_up(cls, "cuda", 5, 41)

    def test_on_device(self):
        self.assertTrue(self.layer.on_device)
        hd, zd = self.h.cuda(), self.z.cuda()
        got = self.layer.forward(hd, zd, stream=torch.cuda.current_stream().cuda_stream)
        self.assertTrue(got.is_cuda)
        self.assertTrue(same_bits(got.cpu().numpy(), self.ref))
        out = torch.empty_like(hd)
        self.assertIs(self.layer.forward(hd, zd, out=out, stream=torch.cuda.current_stream().cuda_stream), out)
        self.assertTrue(same_bits(out.cpu().numpy(), self.ref))
        # bf16 hidden: a bf16 output, the host path's fp32 result (given the same bf16 values) rounded once
        h16 = hd.to(torch.bfloat16)
        s = torch.cuda.current_stream().cuda_stream
        got16 = self.layer.forward(h16, zd, stream=s)
        self.assertEqual(got16.dtype, torch.bfloat16)
        want32 = torch.from_numpy(self.layer.forward(h16.float().cpu().numpy(), self.z.numpy()))
        self.assertTrue(torch.equal(got16.cpu().view(torch.int16), want32.to(torch.bfloat16).view(torch.int16)))
        # a float32 out= for bf16 hidden keeps the fp32 sums
        out32 = torch.empty(hd.shape, dtype=torch.float32, device="cuda")
        self.layer.forward(h16, zd, out=out32, stream=s)
        self.assertTrue(same_bits(out32.cpu().numpy(), want32.numpy()))
        # the custom op too, its fake implementation agreeing (opcheck compares them)
        op, i = torch.ops.polymoe.moe_forward, polymoe.op_id(self.layer)
        self.assertTrue(torch.equal(op(h16, zd, i).cpu().view(torch.int16), got16.cpu().view(torch.int16)))
        torch.library.opcheck(op, (h16, zd, i))

    def test_routed_on_device(self):
        w, ids = torch.topk(torch.softmax(self.z, -1), 2)
        expect = self.layer.forward_routed(self.h.numpy(), ids.int().numpy(), w.numpy())
        got = self.layer.forward_routed(self.h.cuda(), ids.int().cuda(), w.cuda(),
                                        stream=torch.cuda.current_stream().cuda_stream)
        self.assertTrue(same_bits(got.cpu().numpy(), expect))

    def test_custom_op_and_graph(self):
        op, i = torch.ops.polymoe.moe_forward, polymoe.op_id(self.layer)
        hd, zd = self.h.cuda(), self.z.cuda()
        self.assertTrue(same_bits(op(hd, zd, i).cpu().numpy(), self.ref))
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):  # the op runs on the current stream
            got = op(hd, zd, i)
        s.synchronize()
        self.assertTrue(same_bits(got.cpu().numpy(), self.ref))
        # captured in a CUDA graph, replayed on new inputs
        static_h, static_z = hd.clone(), zd.clone()
        op(static_h, static_z, i)  # the first call at this batch size allocates
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = op(static_h, static_z, i)
        g = torch.Generator().manual_seed(9)
        h2, z2 = torch.randn(self.h.shape, generator=g), torch.randn(self.z.shape, generator=g)
        static_h.copy_(h2.cuda())
        static_z.copy_(z2.cuda())
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(same_bits(static_out.cpu().numpy(), self.layer.forward(h2.numpy(), z2.numpy())))

    def test_mixed_memory_is_an_error(self):
        with self.assertRaisesRegex(ValueError, r"host and CUDA memory both"):
            self.layer.forward(self.h.cuda(), self.z)
        host = polymoe.Layer.from_checkpoint(tiny_checkpoint(), 0, quant="fp32", kernel="reference")
        with self.assertRaisesRegex(ValueError, r"computes in host memory; pass host tensors"):
            host.forward(self.h.cuda(), self.z.cuda())


# ---- transformers' MoE blocks as live oracles ------------------------------------------------------

SMALL = dict(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=64, hidden_size=64)
FAMILIES = {
    "qwen3_moe": dict(intermediate_size=96, moe_intermediate_size=32, num_experts=16, num_experts_per_tok=4,
                      norm_topk_prob=True, head_dim=16, decoder_sparse_step=1, mlp_only_layers=[]),
    "mixtral": dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, head_dim=16),
    "deepseek_v3": dict(intermediate_size=96, moe_intermediate_size=32, n_routed_experts=16, num_experts_per_tok=4,
                        n_group=4, topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5,
                        first_k_dense_replace=0, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
    "gpt_oss": dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, head_dim=16,
                    layer_types=["full_attention"]),
}


def moe_block(model):
    layer = model.model.layers[0]
    for name in ("block_sparse_moe", "mlp"):
        if hasattr(layer, name):
            return getattr(layer, name)
    raise AssertionError("no MoE block in layer 0")


def have_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@unittest.skipUnless(have_transformers(), "transformers is not installed")
class Transformers(unittest.TestCase):
    def check_family(self, family):
        import transformers

        torch.manual_seed(11)
        cfg = transformers.AutoConfig.for_model(family, **{**SMALL, **FAMILIES[family]})
        model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
        with torch.no_grad():  # random values where the init leaves zeros (biases, correction bias)
            for name, p in model.named_parameters():
                if name.endswith("bias") or "e_score_correction_bias" in name:
                    p.copy_(torch.randn_like(p) * 0.1)
            for name, b in model.named_buffers():
                if "e_score_correction_bias" in name:
                    b.copy_(torch.randn_like(b) * 0.1)
        d = tempfile.mkdtemp(dir=ARGS.work, prefix=family + "_")
        model.save_pretrained(d)
        T, H = 29, cfg.hidden_size
        hidden = torch.randn(1, T, H) * 2.0
        with torch.no_grad():
            want = moe_block(model)(hidden)
        want = (want[0] if isinstance(want, tuple) else want).reshape(T, H).numpy()
        x = hidden.reshape(T, H).numpy()
        cases = [("fp32", "reference", 1e-4), ("bf16", "auto", 3e-2)]
        if cuda_here():
            cases.append(("bf16", "cuda", 3e-2))
        for quant, kernel, tol in cases:
            with self.subTest(family=family, quant=quant, kernel=kernel):
                layer = polymoe.Layer.from_checkpoint(d, 0, quant=quant, kernel=kernel)
                err = rel_err(layer.forward(x), want)
                print(f"\n  {family} {quant}/{kernel}: max|diff|/max|out| = {err:.2e}", file=sys.stderr)
                self.assertLess(err, tol)

    def test_qwen3_moe(self):
        self.check_family("qwen3_moe")

    def test_mixtral(self):
        self.check_family("mixtral")

    def test_deepseek_v3(self):
        self.check_family("deepseek_v3")

    def test_gpt_oss(self):
        self.check_family("gpt_oss")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--tool", required=True)
    p.add_argument("--work", required=True)
    ARGS, rest = p.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
