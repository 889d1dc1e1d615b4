#!/usr/bin/env python3
"""Makes the transformers fixtures kept in tests/data/hf (third-party results, never polymoe's).

Run where Hugging Face transformers 5.x and PyTorch are installed (the GPU machine has both):

    python3 scripts/transformers_fixtures.py OUTDIR

Each case is a tiny random DeepSeek-V3 model of one layer, written as the Hub names it
(config.json + model.safetensors, per-expert tensors), plus io.safetensors with the MoE block's
input (hidden_states), the router's logits and the block's output as transformers computes it in
fp32. Tokens whose routing is decided by less than 2e-3 (the k-th and (k+1)-th choice scores of the
kept groups, or the topk_group-th and next group scores) are dropped, so rounding decides nothing.

Cases:
  deepseek_v3_negbias     e_score_correction_bias drives every choice score negative (4 experts a group)
  deepseek_v3_negbias_g2  the same with 2 experts a group and mixed-sign choice scores
  deepseek_v3_fp8_partial F8_E4M3 experts with 128x128 weight_scale_inv over partial blocks (H=192, I=80)
"""
import inspect
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

TIE_MARGIN = 2e-3


def base_config(**kw):
    c = dict(vocab_size=128, hidden_size=64, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=1,
             num_attention_heads=2, num_key_value_heads=1, n_shared_experts=1, n_routed_experts=16,
             num_experts_per_tok=4, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
             first_k_dense_replace=0, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
             v_head_dim=8, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False)
    c.update(kw)
    return DeepseekV3Config(**c)


def expert_tensors(mlp, prefix):
    """The routed experts' weights as the Hub names them (experts.N.{gate,up,down}_proj.weight)."""
    ex = mlp.experts
    out = {}
    if isinstance(ex, torch.nn.ModuleList):
        for n, e in enumerate(ex):
            for p in ("gate_proj", "up_proj", "down_proj"):
                out[f"{prefix}experts.{n}.{p}.weight"] = getattr(e, p).weight.detach().clone()
        return out
    gu, dn = ex.gate_up_proj.detach(), ex.down_proj.detach()  # [E, 2I, H] (gate rows first), [E, H, I]
    inter = dn.shape[2]
    assert gu.shape[1] == 2 * inter, f"unexpected fused layout {tuple(gu.shape)}"
    for n in range(gu.shape[0]):
        out[f"{prefix}experts.{n}.gate_proj.weight"] = gu[n, :inter].clone()
        out[f"{prefix}experts.{n}.up_proj.weight"] = gu[n, inter:].clone()
        out[f"{prefix}experts.{n}.down_proj.weight"] = dn[n].clone()
    return out


def set_expert(mlp, n, name, w):
    ex = mlp.experts
    if isinstance(ex, torch.nn.ModuleList):
        getattr(ex[n], name).weight.data.copy_(w)
        return
    inter = ex.down_proj.shape[2]
    if name == "gate_proj":
        ex.gate_up_proj.data[n, :inter].copy_(w)
    elif name == "up_proj":
        ex.gate_up_proj.data[n, inter:].copy_(w)
    else:
        ex.down_proj.data[n].copy_(w)


def model_tensors(model):
    """Every tensor of the model, with the routed experts in the Hub's per-expert naming."""
    mlp = model.model.layers[0].mlp
    prefix = "model.layers.0.mlp."
    sd = {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith(prefix + "experts.")}
    sd.update(expert_tensors(mlp, prefix))
    return {k: v.contiguous() for k, v in sd.items()}


def decisive_tokens(logits, bias, n_group, topk_group, k):
    """Mask of the tokens whose grouped top-k is not decided by rounding (upstream semantics: -inf mask)."""
    s = torch.sigmoid(logits.double())
    choice = s + bias.double()
    T, E = choice.shape
    per = E // n_group
    g = choice.view(T, n_group, per).topk(2, dim=-1)[0].sum(-1)
    gs = g.sort(dim=-1, descending=True)[0]
    ok = (gs[:, topk_group - 1] - gs[:, topk_group]) > TIE_MARGIN if topk_group < n_group else torch.ones(T, dtype=torch.bool)
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(1, g.topk(topk_group, dim=-1)[1], True)
    masked = choice.masked_fill(~keep.repeat_interleave(per, dim=1), float("-inf"))
    ms = masked.sort(dim=-1, descending=True)[0]
    nxt = ms[:, k] if k < topk_group * per else torch.full((T,), float("-inf"), dtype=ms.dtype)
    ok &= (ms[:, k - 1] - nxt) > TIE_MARGIN
    # how many tokens a zero mask (older transformers) would route differently: the cases exist for those
    zero = choice.masked_fill(~keep.repeat_interleave(per, dim=1), 0.0)
    differ = (zero.topk(k, dim=-1)[1].sort(-1)[0] != masked.topk(k, dim=-1)[1].sort(-1)[0]).any(-1)
    return ok, differ


def fp8_block_quantize(w):
    """E4M3 codes and 128x128 weight_scale_inv of w [N, K] (partial edge blocks scaled by their own amax)."""
    N, K = w.shape
    bn, bk = (N + 127) // 128, (K + 127) // 128
    scale = torch.empty(bn, bk, dtype=torch.float32)
    q = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    for i in range(bn):
        for j in range(bk):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s = blk.abs().max().clamp_min(1e-12) / 448.0
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    deq = q.float() * scale.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return q, scale, deq


def make_case(out_dir, name, cfg, seed, router_std, bias_fn, tokens=96, fp8=False):
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    mlp = model.model.layers[0].mlp
    E, H = cfg.n_routed_experts, cfg.hidden_size
    with torch.no_grad():
        mlp.gate.weight.normal_(0.0, router_std)
        mlp.gate.e_score_correction_bias.copy_(bias_fn(E))
        # weights large enough that the block's output is far from zero
        for n in range(E):
            for p, shape in (("gate_proj", (cfg.moe_intermediate_size, H)), ("up_proj", (cfg.moe_intermediate_size, H)),
                             ("down_proj", (H, cfg.moe_intermediate_size))):
                set_expert(mlp, n, p, torch.randn(shape) * 0.1)
        for p in ("gate_proj", "up_proj", "down_proj"):
            getattr(mlp.shared_experts, p).weight.normal_(0.0, 0.1)
    tensors = model_tensors(model)
    prefix = "model.layers.0.mlp."
    if fp8:
        # store experts and shared expert as F8_E4M3 + weight_scale_inv; compute with the dequantized weights
        with torch.no_grad():
            for key in [k for k in tensors if k.startswith(prefix) and k.endswith("_proj.weight")]:
                q, s, deq = fp8_block_quantize(tensors[key].float())
                tensors[key] = q
                tensors[key + "_scale_inv"] = s
                parts = key[len(prefix):].split(".")
                if parts[0] == "experts":
                    set_expert(mlp, int(parts[1]), parts[2], deq)
                else:
                    getattr(mlp.shared_experts, parts[1]).weight.data.copy_(deq)
    hidden = torch.randn(4 * tokens, H)
    with torch.no_grad():
        logits = torch.nn.functional.linear(hidden, mlp.gate.weight.float())
        ok, differ = decisive_tokens(logits, mlp.gate.e_score_correction_bias, cfg.n_group, cfg.topk_group,
                                     cfg.num_experts_per_tok)
        hidden = hidden[ok][:tokens].contiguous()
        differ = differ[ok][:tokens]
        gate_out = mlp.gate(hidden)
        gate_logits = gate_out[0] if isinstance(gate_out, tuple) else gate_out
        logits = torch.nn.functional.linear(hidden, mlp.gate.weight.float())
        assert torch.equal(gate_logits.float().reshape(logits.shape), logits), "router logits differ from gate()"
        output = mlp(hidden.unsqueeze(0)).squeeze(0)
        if isinstance(output, tuple):
            output = output[0]
    choice = torch.sigmoid(logits) + mlp.gate.e_score_correction_bias
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    conf = cfg.to_dict()
    if fp8:
        conf["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                       "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    save_file({"hidden_states": hidden.float().contiguous(), "router_logits": logits.float().contiguous(),
               "output": output.float().contiguous()}, os.path.join(d, "io.safetensors"))
    print(f"{name}: {hidden.shape[0]} tokens, E={E}, groups of {E // cfg.n_group}, "
          f"negative choice scores {float((choice < 0).float().mean()):.2f}, "
          f"tokens a zero mask routes differently {int(differ.sum())}, max |output| {float(output.abs().max()):.3g}")


def main():
    out = sys.argv[1]
    print("transformers", transformers.__version__, "torch", torch.__version__)
    make_case(out, "deepseek_v3_negbias", base_config(), 1, 0.5,
              lambda E: torch.linspace(-1.3, -0.7, E)[torch.randperm(E)])
    make_case(out, "deepseek_v3_negbias_g2", base_config(n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3),
              2, 0.5, lambda E: torch.linspace(-1.0, 0.1, E)[torch.randperm(E)])
    make_case(out, "deepseek_v3_fp8_partial",
              base_config(hidden_size=192, intermediate_size=192, moe_intermediate_size=80, n_routed_experts=8, n_group=2,
                          topk_group=1, num_experts_per_tok=2),
              3, 0.3, lambda E: torch.linspace(-0.9, -0.6, E)[torch.randperm(E)], tokens=48, fp8=True)
    # the upstream routing code these fixtures follow, for the audit in docs/reliability.md
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
    with open(os.path.join(out, "upstream_routing.txt"), "w") as f:
        f.write(inspect.getsource(ds.DeepseekV3MoE))
        f.write(inspect.getsource(ds.DeepseekV3TopkRouter))
        for mod, names in (("mixtral", ["MixtralSparseMoeBlock", "MixtralTopKRouter"]),
                           ("qwen3_moe", ["Qwen3MoeSparseMoeBlock", "Qwen3MoeTopKRouter"]),
                           ("gpt_oss", ["GptOssTopKRouter", "GptOssMLP"])):
            m = __import__(f"transformers.models.{mod}.modeling_{mod}", fromlist=["x"])
            for n in names:
                if hasattr(m, n):
                    f.write(f"\n# ---- {mod}.{n}\n" + inspect.getsource(getattr(m, n)))


if __name__ == "__main__":
    main()
