#!/usr/bin/env python3
"""The GPU peers: PyTorch on CUDA, bf16 weights, on the shapes polymoe_bench gives (--hidden
--intermediate --experts --topk), each T of --tokens timed --reps times with CUDA events:

  torch-grouped-mm  the pairs sorted by expert on the device, torch.nn.functional.grouped_mm for
                    gate/up and down (offsets on the device, no host synchronisation), SiLU-gated,
                    the routing weight, index_add_ into the output
  torch-hf-loop     Hugging Face's eager expert loop (Qwen3-MoE / Mixtral): per expert hit,
                    index_select its rows, act(gate) * up, down, scale, index_add_

--records FILE gets one line per (peer, T): "peer tokens median_s min_s max_s distinct_experts".
Decode routings rotate over all experts so that weights come from HBM, as polymoe_bench's do.

    python3 bench/peer_torch_gpu.py [--tokens 1,64,4096] [--reps 20] [--records FILE]
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--tokens", default="1,64,4096")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--records", default="")
    a = p.parse_args()
    H, I, E, K = a.hidden, a.intermediate, a.experts, a.topk
    dev = torch.device("cuda")
    dt = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device=dev) / H ** 0.5).to(dt)  # gate rows, then up rows
    w2 = (torch.randn(E, H, I, generator=g, device=dev) / I ** 0.5).to(dt)
    w13_t, w2_t = w13.transpose(1, 2), w2.transpose(1, 2)  # [E, K, N] views: column-major operands
    records = open(a.records, "w") if a.records else None
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, bf16, H={H} I={I} E={E} k={K}")

    def grouped(x, ids, w):
        T = x.shape[0]
        flat = ids.flatten()
        order = torch.argsort(flat, stable=True)
        tok = order // K
        counts = torch.bincount(flat, minlength=E)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        xs = x.index_select(0, tok)
        h = F.grouped_mm(xs, w13_t, offs=offs)
        h = F.silu(h[:, :I]) * h[:, I:]
        y = F.grouped_mm(h, w2_t, offs=offs) * w.flatten()[order, None]
        return torch.zeros(T, H, dtype=dt, device=dev).index_add_(0, tok, y)

    def hf_loop(x, ids, w):
        T = x.shape[0]
        out = torch.zeros(T, H, dtype=dt, device=dev)
        mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)  # [E, k, T]
        for e in torch.nonzero(mask.sum(dim=(-1, -2))).flatten().tolist():
            slot, t = torch.where(mask[e])
            xs = x.index_select(0, t)
            h = F.silu(F.linear(xs, w13[e, :I])) * F.linear(xs, w13[e, I:])
            out.index_add_(0, t, F.linear(h, w2[e]) * w[t, slot, None])
        return out

    print(f"{'peer':>18} {'tokens':>8} {'us/forward':>12} {'TFLOP/s':>9}")
    for T in [int(t) for t in a.tokens.split(",")]:
        x = torch.randn(T, H, generator=g, device=dev).to(dt)
        logits = torch.randn(T, E, generator=g, device=dev)
        w, ids = torch.topk(torch.softmax(logits, dim=-1), K, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(dt)
        if T * K < E:
            routings = [torch.arange(s * T * K, (s + 1) * T * K, device=dev).remainder(E).view(T, K)
                        for s in range((E + T * K - 1) // (T * K))]
        else:
            routings = [ids]
        distinct = sum(len(torch.unique(r)) for r in routings) / len(routings)
        for name, fn in (("torch-grouped-mm", grouped), ("torch-hf-loop", hf_loop)):
            try:
                with torch.inference_mode():
                    for r in routings[:2]:
                        fn(x, r, w)
                    torch.cuda.synchronize()
                    times = []
                    for i in range(a.reps):
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        fn(x, routings[i % len(routings)], w)
                        e.record()
                        e.synchronize()
                        times.append(s.elapsed_time(e) * 1e-3)
            except Exception as err:  # an operator this PyTorch lacks: say so, go on
                print(f"{name:>18} {T:>8} failed: {err}")
                continue
            times.sort()
            n = len(times)
            med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
            if records:
                records.write(f"{name} {T} {med} {times[0]} {times[-1]} {distinct}\n")
                records.flush()
            print(f"{name:>18} {T:>8} {med * 1e6:>12.1f} {2.0 * T * K * 3 * H * I / med / 1e12:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
