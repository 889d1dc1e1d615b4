#!/usr/bin/env python3
"""Independent PyTorch oracle for the DeepSeek-V3 fp8 W8A8 MoE layer (not polymoe).

Usage: python3 scripts/torch_fp8_w8a8_reference.py <fixture_dir> <out.safetensors>

<fixture_dir> is a checkpoint such as fixtures/hf/deepseek_v3_fp8 (config.json, model.safetensors,
io.safetensors). The layer is computed twice on the CPU in fp32:
  * weight-only: dequantized fp8_block weights, fp32 activations (must match io.safetensors `output`);
  * W8A8: additionally every GEMM input row (hidden row for gate/up, activated intermediate for
    down) is quantized per token in groups of 128: s = amax/448 (1 if amax == 0),
    x' = float(e4m3(clamp(x / s, -448, 448))) * s. Routed and shared experts are both W8A8.
Writes output_w8a8 [T,H] F32, output_weight_only [T,H] F32 and topk_ids [T,k] I32.
"""
import json
import struct
import sys

import torch

DT = {"F32": torch.float32, "I32": torch.int32, "F8_E4M3": torch.uint8}
FP8_MAX = 448.0
GROUP = 128


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(data[a:b], dtype=DT[info["dtype"]]) if b > a else torch.empty(0, dtype=DT[info["dtype"]])
        if info["dtype"] == "F8_E4M3":
            t = t.view(torch.float8_e4m3fn)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def save_safetensors(path, tensors, metadata):
    names = {torch.float32: "F32", torch.int32: "I32"}
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        b = bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())  # little-endian host
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def dequant_block(q, scale_inv, block=128):
    """W = float(q) * weight_scale_inv of its 128x128 block (edge blocks may be partial)."""
    n, k = q.shape
    s = scale_inv.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :k]
    return q.to(torch.float32) * s


def quant_act(x):
    """Per-token, per-128-group dynamic e4m3 quantize-dequantize (last group may be partial)."""
    out = torch.empty_like(x)
    for g in range(0, x.shape[-1], GROUP):
        xg = x[..., g:g + GROUP]
        amax = xg.abs().amax(dim=-1, keepdim=True)
        s = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        q = torch.clamp(xg / s, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        out[..., g:g + GROUP] = q.to(torch.float32) * s
    return out


def mlp(x, w, act_quant):
    qa = quant_act if act_quant else (lambda v: v)
    xq = qa(x)
    h = torch.nn.functional.silu(xq @ w["gate"].T) * (xq @ w["up"].T)
    return qa(h) @ w["down"].T


def route(logits, bias, cfg):
    E, G = logits.shape[-1], cfg["n_group"]
    s = logits.sigmoid()
    choice = s + bias
    group_scores = choice.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
    group_idx = group_scores.topk(cfg["topk_group"], dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, group_idx, True)
    expert_mask = group_mask.repeat_interleave(E // G, dim=1)
    ids = choice.masked_fill(~expert_mask, float("-inf")).topk(cfg["num_experts_per_tok"], dim=-1).indices
    w = s.gather(1, ids)
    if cfg["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    return ids, w * cfg["routed_scaling_factor"]


def moe(x, ids, weights, experts, shared, act_quant):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            out[t] += weights[t, k] * mlp(x[t:t + 1], experts[int(ids[t, k])], act_quant)[0]
    return out + mlp(x, shared, act_quant)


def rel_err(a, ref):
    return ((a - ref).abs().max() / ref.abs().max()).item()


def main(fixture_dir, out_path):
    torch.set_num_threads(1)
    cfg = json.load(open(f"{fixture_dir}/config.json"))
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128]
    assert cfg["n_shared_experts"] == 1
    m = load_safetensors(f"{fixture_dir}/model.safetensors")
    io = load_safetensors(f"{fixture_dir}/io.safetensors")
    p = "model.layers.0.mlp."

    def proj(prefix):
        return {k: dequant_block(m[f"{prefix}{k}_proj.weight"], m[f"{prefix}{k}_proj.weight_scale_inv"])
                for k in ("gate", "up", "down")}

    experts = [proj(f"{p}experts.{e}.") for e in range(cfg["n_routed_experts"])]
    shared = proj(f"{p}shared_experts.")
    x, ref = io["hidden_states"], io["output"]
    ids, w = route(io["router_logits"], m[p + "gate.e_score_correction_bias"], cfg)

    out_wo = moe(x, ids, w, experts, shared, act_quant=False)
    out_w8a8 = moe(x, ids, w, experts, shared, act_quant=True)
    rms = ((out_w8a8 - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()

    print(f"T={x.shape[0]} H={x.shape[1]} k={ids.shape[1]} torch={torch.__version__}")
    print(f"weight-only vs fixture output: max_abs_err/max_abs_out = {rel_err(out_wo, ref):.3e}")
    print(f"W8A8 vs fixture output:        max_abs_err/max_abs_out = {rel_err(out_w8a8, ref):.3e}")
    print(f"W8A8 vs fixture output:        relative RMS            = {rms:.3e}")
    print("topk_ids:", ids.tolist())

    meta = {
        "producer": f"scripts/torch_fp8_w8a8_reference.py, torch {torch.__version__}, CPU fp32, 1 thread",
        "fixture": "hf/deepseek_v3_fp8",
        "scheme": "fp8_block W8A8: 128x128 weight blocks; activations per token, groups of 128, "
                  "s=amax/448, clamp +-448, RNE cast to float8_e4m3fn; routed and shared experts",
        "weight_only_rel_err": f"{rel_err(out_wo, ref):.3e}",
        "w8a8_rel_err": f"{rel_err(out_w8a8, ref):.3e}",
        "w8a8_rel_rms": f"{rms:.3e}",
    }
    save_safetensors(out_path, {"output_w8a8": out_w8a8, "output_weight_only": out_wo,
                                "topk_ids": ids.to(torch.int32)}, meta)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
