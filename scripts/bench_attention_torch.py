"""PyTorch reference timing for one causal attention core, forward and forward+backward.

The PyTorch side of the attention comparison in docs/performance.md: headroom's
attention benchmark runs the same shapes and thread count, and the two programs are run
alternately in one job.  Runs with Debian's torch 1.13 CPU build:

    /usr/bin/python3 scripts/bench_attention_torch.py --threads 2

torch 1.13 has no scaled_dot_product_attention, so this is the math path
written out: softmax(Q·Kᵀ·s + mask)·V with autograd.  "forward" is timed
under torch.no_grad() (inference, as headroom's forward row); "forward_backward"
records the graph and runs backward() from a fixed upstream gradient.  Prints
one JSON line.
"""
import argparse
import json
import math
import statistics
import time

import torch


def causal_attention(q, k, v, mask, scale):
    # q, k, v: [B, h, T, d_h]   mask: [T, T], -inf above the diagonal
    scores = q @ k.transpose(-2, -1) * scale + mask  # [B, h, T, T]
    return torch.softmax(scores, dim=-1) @ v  # [B, h, T, d_h]


def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    quartiles = statistics.quantiles(times, n=4)
    return statistics.median(times), quartiles[2] - quartiles[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations after warm-up (at least 10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    if args.iters < 10:
        parser.error("--iters must be at least 10")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(shape)
    mask = torch.triu(torch.full((args.seq, args.seq), float("-inf")), diagonal=1)
    scale = 1.0 / math.sqrt(args.head_dim)

    def forward():
        return causal_attention(q, k, v, mask, scale)

    def forward_no_grad():
        with torch.no_grad():
            forward()

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        forward().backward(grad_out)

    forward_ms, forward_iqr = median_ms(forward_no_grad, args.warmup, args.iters)
    forward_backward_ms, forward_backward_iqr = median_ms(forward_backward, args.warmup, args.iters)
    print(json.dumps({
        "bench": "attention_torch",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "B": args.batch, "h": args.heads, "T": args.seq, "d_h": args.head_dim,
        "causal": True, "dtype": "f32", "path": "math (softmax(QK^T*s + mask) V)",
        "warmup": args.warmup, "iters": args.iters,
        "forward_ms": round(forward_ms, 3), "forward_iqr_ms": round(forward_iqr, 3),
        "forward_backward_ms": round(forward_backward_ms, 3),
        "forward_backward_iqr_ms": round(forward_backward_iqr, 3),
    }))


if __name__ == "__main__":
    main()
