#!/usr/bin/python3
"""The peer for the GEMMs alone: PyTorch's CPU matmul (oneDNN, which runs AMX where the CPU has it)
on the expert GEMMs of the Qwen3-30B-A3B layer (H=2048, I=768, E=128), so that bench_amx's row-block
kernels and polymoe_bench's GEMM phases can be read against what a mature AMX library gets from the
same machine. No routing, no activation: per expert, rows x [H] times the expert's gate-and-up weights
[2I, H] (GEMM 1), then rows x [I] times its down weights [H, I] (GEMM 2), every expert in turn (the
weights, 1.2 GB in bf16, stream from DRAM as in the forward). Also one large square GEMM (operands in
cache), the library's best case. int8 runs torch._int_mm where this PyTorch has it on CPU.

    python3 bench/peer_gemm.py (the device machine's python3 has PyTorch) [--threads 16] [--rows 32,128] [--reps 5]

Prints, per case, the best of --reps passes in ms and in T op/s.
"""
import argparse
import time

import torch
import torch.nn.functional as F

H, I, E = 2048, 768, 128


def best_of(reps, fn):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--rows", default="32,128", help="rows per expert (T*k/E: 32 at T=512, 128 at T=2048)")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cap = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability {cap}")

    n = 4096
    x = torch.randn(n, n).to(torch.bfloat16)
    y = torch.randn(n, n).to(torch.bfloat16)
    s = best_of(a.reps, lambda: torch.matmul(x, y))
    print(f"square bf16 {n}^3: {s * 1e3:.2f} ms, {2 * n**3 / s / 1e12:.2f} TFLOP/s")
    xi = torch.randint(-127, 128, (n, n), dtype=torch.int8)
    yi = torch.randint(-127, 128, (n, n), dtype=torch.int8)
    has_int_mm = True
    try:
        s = best_of(a.reps, lambda: torch._int_mm(xi, yi))
        print(f"square int8 {n}^3 (_int_mm): {s * 1e3:.2f} ms, {2 * n**3 / s / 1e12:.2f} TOP/s")
    except Exception as e:  # noqa: BLE001
        has_int_mm = False
        print(f"square int8: torch._int_mm unavailable on CPU here ({type(e).__name__}: {e})")

    w13 = [torch.randn(2 * I, H).to(torch.bfloat16) for _ in range(E)]
    w2 = [torch.randn(H, I).to(torch.bfloat16) for _ in range(E)]
    for rows in [int(r) for r in a.rows.split(",")]:
        xs = torch.randn(rows, H).to(torch.bfloat16)
        hs = torch.randn(rows, I).to(torch.bfloat16)
        flops1 = 2.0 * rows * 2 * I * H * E
        flops2 = 2.0 * rows * H * I * E
        s1 = best_of(a.reps, lambda: [F.linear(xs, w) for w in w13])
        s2 = best_of(a.reps, lambda: [F.linear(hs, w) for w in w2])
        wbytes1, wbytes2 = 2.0 * 2 * I * H * E, 2.0 * H * I * E
        print(f"experts bf16 rows={rows}: GEMM 1 {s1 * 1e3:.2f} ms ({flops1 / s1 / 1e12:.2f} TFLOP/s, "
              f"{wbytes1 / s1 / 1e9:.1f} GB/s of weights), GEMM 2 {s2 * 1e3:.2f} ms ({flops2 / s2 / 1e12:.2f} TFLOP/s, "
              f"{wbytes2 / s2 / 1e9:.1f} GB/s)")
    if has_int_mm:
        # _int_mm takes [M, K] x [K, N]; M must be > 16 on some builds
        w13i = [torch.randint(-127, 128, (H, 2 * I), dtype=torch.int8) for _ in range(E)]
        w2i = [torch.randint(-127, 128, (I, H), dtype=torch.int8) for _ in range(E)]
        for rows in [int(r) for r in a.rows.split(",")]:
            xs = torch.randint(-127, 128, (rows, H), dtype=torch.int8)
            hs = torch.randint(-127, 128, (rows, I), dtype=torch.int8)
            try:
                s1 = best_of(a.reps, lambda: [torch._int_mm(xs, w) for w in w13i])
                s2 = best_of(a.reps, lambda: [torch._int_mm(hs, w) for w in w2i])
            except Exception as e:  # noqa: BLE001
                print(f"experts int8 rows={rows}: _int_mm failed ({type(e).__name__}: {e})")
                continue
            flops1 = 2.0 * rows * 2 * I * H * E
            flops2 = 2.0 * rows * H * I * E
            print(f"experts int8 rows={rows}: GEMM 1 {s1 * 1e3:.2f} ms ({flops1 / s1 / 1e12:.2f} TOP/s, "
                  f"{2 * I * H * E / s1 / 1e9:.1f} GB/s of weights), GEMM 2 {s2 * 1e3:.2f} ms "
                  f"({flops2 / s2 / 1e12:.2f} TOP/s, {H * I * E / s2 / 1e9:.1f} GB/s)")


if __name__ == "__main__":
    main()
