"""PyTorch reference timing for one cached decoding step of an MHA layer.

The PyTorch side of the decoding comparison in docs/performance.md
("Decoding"): the layer bench_decode times as "MHA" (d = 512, h = 8, d_h = 64,
q/k/v/o projections with bias, causal self-attention, f32, no autograd), one
new token per row attending to a cache of L tokens.  As in headroom, the cache
is preallocated and written in place (the new key and value are copied into
the next row), and the attention reads its valid prefix.  torch 1.13 has no
scaled_dot_product_attention, so the core is the math path,
softmax(q·Kᵀ·s)·V.  Runs with Debian's torch 1.13 CPU build:

    /usr/bin/python3 scripts/bench_decode_torch.py --threads 1 --batch 1,16 --context 512,4096

Prints one JSON line per (B, L).
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn

DIM, HEADS = 512, 8


class CachedMHA(nn.Module):
    def __init__(self, batch, capacity):
        super().__init__()
        self.d_h = DIM // HEADS
        self.q_proj, self.k_proj = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.v_proj, self.o_proj = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.k_cache = torch.zeros(batch, HEADS, capacity, self.d_h)  # [B, h, capacity, d_h]
        self.v_cache = torch.zeros(batch, HEADS, capacity, self.d_h)
        self.length = 0

    def heads(self, x):  # [B, 1, d] -> [B, h, 1, d_h]
        return x.view(x.shape[0], 1, HEADS, self.d_h).transpose(1, 2)

    def forward(self, x):  # x: [B, 1, d], one new token per row
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        self.k_cache[:, :, self.length : self.length + 1].copy_(k)
        self.v_cache[:, :, self.length : self.length + 1].copy_(v)
        self.length += 1
        keys, values = self.k_cache[:, :, : self.length], self.v_cache[:, :, : self.length]
        scores = q @ keys.transpose(-2, -1) * (1.0 / math.sqrt(self.d_h))  # [B, h, 1, L + 1]
        out = torch.softmax(scores, dim=-1) @ values  # [B, h, 1, d_h]
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], 1, DIM))


def step_ms(batch, context, iters, warmup):
    layer = CachedMHA(batch, context + warmup + iters + 1).eval()
    layer.k_cache[:, :, :context].normal_()
    layer.v_cache[:, :, :context].normal_()
    layer.length = context
    x = torch.randn(batch, 1, DIM)
    times = []
    with torch.no_grad():
        for i in range(warmup + iters):
            start = time.perf_counter()
            layer(x)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
    quartiles = statistics.quantiles(times, n=4)
    return statistics.median(times), quartiles[2] - quartiles[0]


def int_list(text):
    return [int(part) for part in text.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads")
    parser.add_argument("--iters", type=int, default=20, help="timed steps after warm-up (at least 10)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int_list, default=[1, 16], help="rows per step, comma separated")
    parser.add_argument("--context", type=int_list, default=[512, 4096], help="cached tokens L, comma separated")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    if args.iters < 10:
        parser.error("--iters must be at least 10")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    for batch in args.batch:
        for context in args.context:
            ms, iqr = step_ms(batch, context, args.iters, args.warmup)
            print(json.dumps({
                "bench": "decode_torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                "B": batch, "L": context, "method": "MHA", "ms": round(ms, 4), "iqr_ms": round(iqr, 4),
            }))


if __name__ == "__main__":
    main()
