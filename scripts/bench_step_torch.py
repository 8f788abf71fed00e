"""PyTorch twin of bench_step's MHA cells: whole training steps of a 2-layer decoder-only LM.

The PyTorch side of the training-step grid in docs/performance.md ("Training-step grid"): the
model headroom's DecoderLM builds with MHA (pre-LN blocks: LayerNorm, q/k/v projection with bias,
causal softmax attention, output projection, LayerNorm, MLP of 4d with exact GELU; a final
LayerNorm; interleaved sinusoidal positions added to the token embeddings; an untied head without
bias), the same parameter count, and the same step: zero_grad, forward of tokens[:, :-1],
cross_entropy against tokens[:, 1:], backward, AdamW (lr 1e-4, weight decay 0.01).  The same
cells, B = max(1, tokens / T), one untimed step then `rounds` timed ones per cell, medians.  torch
1.13 has no scaled_dot_product_attention, so the attention is written out.  Runs with Debian's
torch 1.13 CPU build:

    /usr/bin/python3 scripts/bench_step_torch.py --threads 1 [--dims 128,256 --heads 8 --seqs 128]

Prints which BLAS torch loaded (to stderr) and refuses to time, exiting with 1, unless it is
OpenBLAS: the reference BLAS (libblas.so.3 -> /usr/lib/x86_64-linux-gnu/blas/) is several times
slower.  Then one JSON line per cell on stdout (and in --json FILE).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, LAYERS = 256, 2


def sinusoids(length, dim):
    # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...): headroom's sinusoidal_positions.  [length, dim]
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    rate = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.empty(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table.float()


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x, mask):  # x: [B, T, d], mask: [T, T] with -inf above the diagonal
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # [B, h, T, d_h]
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // self.heads)) + mask  # [B, h, T, T]
        heads = torch.softmax(scores, dim=-1) @ v  # [B, h, T, d_h]
        return self.out(heads.transpose(1, 2).reshape(B, T, d))

    def forward(self, x, mask):
        x = x + self.attention(self.attn_norm(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))


class DecoderLM(nn.Module):
    def __init__(self, dim, heads, length):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim)
        self.register_buffer("positions", sinusoids(length, dim))
        self.register_buffer("mask", torch.triu(torch.full((length, length), float("-inf")), diagonal=1))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids):  # ids: [B, T] -> logits [B, T, V]
        x = self.tokens(ids) + self.positions[: ids.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.norm(x))


def loaded_blas():
    """The BLAS and LAPACK libraries mapped into this process after a matmul, with their real paths."""
    torch.randn(64, 64) @ torch.randn(64, 64)
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return sorted({(path, os.path.realpath(path)) for path in paths})


def check_blas(threads):
    """Prints the BLAS torch uses and gives it `threads` threads; exits unless it is OpenBLAS.

    torch.set_num_threads sizes torch's OpenMP pool only: Debian's libblas.so.3 is by default
    OpenBLAS's pthread build, which keeps its own pool of one thread per core.
    """
    libraries = loaded_blas()
    config = [line.strip() for line in torch.__config__.show().splitlines() if "BLAS" in line or "LAPACK" in line]
    for path, real in libraries:
        print(f"# BLAS loaded: {path}" + (f" -> {real}" if real != path else ""), file=sys.stderr)
    for line in config:
        print(f"# torch config: {line}", file=sys.stderr)
    if not any("openblas" in real for _, real in libraries):
        seen = ", ".join(real for _, real in libraries) or "no BLAS library"
        sys.exit(f"bench_step_torch: torch loaded {seen}, not OpenBLAS (the reference BLAS would be timed, not "
                 "PyTorch); see update-alternatives --display libblas.so.3-x86_64-linux-gnu and docs/performance.md, "
                 "Training-step grid")
    openblas = [real for _, real in libraries if "openblas" in real]
    blas = next((real for real in openblas if os.path.basename(real).startswith("libopenblas")), openblas[0])
    library = ctypes.CDLL(blas)
    library.openblas_set_num_threads(threads)
    print(f"# OpenBLAS threads: {library.openblas_get_num_threads()}", file=sys.stderr)
    return blas


def time_cell(dim, heads, length, batch, rounds, seed):
    torch.manual_seed(seed)
    model = DecoderLM(dim, heads, length)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, VOCAB, (batch, length + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        opt.step()

    step()  # untimed, as bench_step's
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return times, sum(p.numel() for p in model.parameters())


def int_list(text):
    return [int(part) for part in text.split(",") if part]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--rounds", type=int, default=3, help="timed steps per cell, as bench_step's --rounds")
    parser.add_argument("--dims", type=int_list, default=[128, 256, 512])
    parser.add_argument("--heads", type=int_list, default=[4, 8])
    parser.add_argument("--seqs", type=int_list, default=[128, 256, 1024])
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per step: B = max(1, tokens / T)")
    parser.add_argument("--json", help="also write the JSON lines to this file")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    blas = check_blas(args.threads)
    out = open(args.json, "w") if args.json else None
    for dim in args.dims:
        for heads in args.heads:
            for length in args.seqs:
                batch = max(1, args.tokens // length)
                times, parameters = time_cell(dim, heads, length, batch, args.rounds, args.seed)
                ms = statistics.median(times)
                row = json.dumps({
                    "bench": "step_torch", "torch": torch.__version__, "blas": blas,
                    "threads": torch.get_num_threads(), "d": dim, "h": heads, "T": length, "B": batch,
                    "method": "mha", "rounds": args.rounds, "ms": round(ms, 3),
                    "tokens_per_s": round(batch * length / ms * 1e3, 1), "parameters": parameters,
                    "times_ms": [round(t, 3) for t in times],
                })
                print(row, flush=True)
                if out:
                    print(row, file=out, flush=True)


if __name__ == "__main__":
    main()
