#!/usr/bin/python3
"""The peer: Hugging Face's eager MoE expert loop (Qwen3-MoE / Mixtral style) with PyTorch on CPU,
by default on the layer shape of bench_tiled (Qwen3-30B-A3B: H=2048, I=768, E=128, k=8), bf16 weights;
polymoe_bench --peer torch runs it on its own shapes (--hidden/--intermediate/--experts/--topk) with
--reps N (N timed forwards: median, min, max) and --records FILE (one line per T:
"tokens median_s min_s max_s distinct_experts_per_forward").

Per expert: index_select the rows routed to it, act(gate) * up, down, scale by the routing weight,
index_add into the output. Prints ms per forward and GFLOP/s (2*T*k*3*H*I flops) for each T.

    /usr/bin/python3 bench/peer_torch.py   (Debian python3-torch) [--threads 2] [--tokens 1,16,64,512,2048] [--dtype bf16|fp32] [--seconds 2]
        [--hidden H --intermediate I --experts E --topk K] [--reps N] [--records FILE]
"""
import argparse
import time

import torch
import torch.nn.functional as F

H, I, E, K = 2048, 768, 128, 8


def main():  # noqa: C901
    global H, I, E, K
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", default="1,16,64,512,2048")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--reps", type=int, default=0, help="exactly N timed forwards (0: for --seconds)")
    p.add_argument("--records", default="")
    a = p.parse_args()
    H, I, E, K = a.hidden, a.intermediate, a.experts, a.topk
    records = open(a.records, "w") if a.records else None
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)
    # nn.Linear weights as in Qwen3MoeMLP: gate_proj / up_proj [I, H], down_proj [H, I], per expert.
    gate = [(torch.randn(I, H, generator=g) / H ** 0.5).to(dt) for _ in range(E)]
    up = [(torch.randn(I, H, generator=g) / H ** 0.5).to(dt) for _ in range(E)]
    down = [(torch.randn(H, I, generator=g) / I ** 0.5).to(dt) for _ in range(E)]
    print(f"torch {torch.__version__}, {a.threads} threads, {a.dtype}, H={H} I={I} E={E} k={K}")
    print(f"{'tokens':>8} {'ms/forward':>12} {'GFLOP/s':>10}")
    for T in [int(t) for t in a.tokens.split(",")]:
        x = torch.randn(T, H, generator=g).to(dt)
        logits = torch.randn(T, E, generator=g)
        w, ids = torch.topk(torch.softmax(logits, dim=-1), K, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(dt)
        if T * K < E:  # decode: cycle over all experts so weights come from DRAM, as bench_tiled does
            routings = [torch.arange(s * T * K, (s + 1) * T * K).remainder(E).view(T, K)
                        for s in range((E + T * K - 1) // (T * K))]
        else:
            routings = [ids]

        def forward(ids):
            out = torch.zeros(T, H, dtype=dt)
            mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)  # [E, k, T]
            for e in torch.nonzero(mask.sum(dim=(-1, -2))).flatten().tolist():
                slot, tok = torch.where(mask[e])
                xs = x.index_select(0, tok)
                h = F.silu(F.linear(xs, gate[e])) * F.linear(xs, up[e])
                y = F.linear(h, down[e]) * w[tok, slot, None]
                out.index_add_(0, tok, y)
            return out

        with torch.inference_mode():
            for r in routings[: (1 if a.reps else 4)]:
                forward(r)
            runs, t0, i, times = 0, time.perf_counter(), 0, []
            while (runs < a.reps) if a.reps else (runs < 3 or time.perf_counter() - t0 < a.seconds):
                t1 = time.perf_counter()
                forward(routings[i % len(routings)])
                times.append(time.perf_counter() - t1)
                i += 1
                runs += 1
            t = (time.perf_counter() - t0) / runs
        if a.reps:
            times.sort()
            n = len(times)
            t = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        if records:
            distinct = sum(len(torch.unique(r)) for r in routings) / len(routings)
            records.write(f"{T} {t} {min(times)} {max(times)} {distinct}\n")
            records.flush()
        print(f"{T:>8} {t * 1e3:>12.3f} {2.0 * T * K * 3 * H * I / t / 1e9:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
