#!/usr/bin/env python3
"""PyTorch side of bench_cuda: times the same shapes on the same GPU.

Writes one "name milliseconds" line per measurement to the output file, which
`bench_cuda --torch FILE` reads and prints beside our own timings:
  attn/<shape>/<forward|fwd+bwd>   torch.nn.functional.scaled_dot_product_attention
  train/mha                        one training step of the 2-layer decoder LM

    python3 scripts/bench_cuda_torch.py OUT_FILE [--tf32] [--iters N]

f32 by default (TF32 off for matmuls and cuDNN), as bench_cuda measures.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Must match examples/bench_cuda.cpp's AttentionShape list.
ATTENTION_SHAPES = [
    ("b4h8t1024d64", 4, 8, 1024, 64, True),
    ("b4h8t1024d64nc", 4, 8, 1024, 64, False),
    ("b4h8t4096d64", 4, 8, 4096, 64, True),
    ("b2h16t2048d128", 2, 16, 2048, 128, True),
]


def gpu_ms(fn, iters):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000 / iters


def bench_attention(iters, out):
    for name, b, h, t, d, causal in ATTENTION_SHAPES:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", requires_grad=True) for _ in range(3))
        dout = torch.randn(b, h, t, d, device="cuda")

        def forward():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def forward_backward():
            q.grad = k.grad = v.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(dout)

        out[f"attn/{name}/forward"] = gpu_ms(forward, iters)
        out[f"attn/{name}/fwd+bwd"] = gpu_ms(forward_backward, iters)


class Block(nn.Module):
    """Pre-LN block as headroom's TransformerStack builds it: x + MHA(LN(x)), x + FFN(LN(x))."""

    def __init__(self, d, h, ffn):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x):
        b, t, d = x.shape
        y = self.ln1(x)
        heads = [p(y).view(b, t, self.h, d // self.h).transpose(1, 2) for p in (self.q, self.k, self.v)]
        a = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        return x + self.fc2(F.relu(self.fc1(self.ln2(x))))


class DecoderLM(nn.Module):
    def __init__(self, vocab=256, d=512, h=8, ffn=2048, layers=2, max_len=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        position = torch.arange(max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        table = torch.zeros(max_len, d)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * freq), torch.cos(position * freq)
        self.register_buffer("positions", table)
        self.blocks = nn.ModuleList(Block(d, h, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def bench_training_step(iters, out):
    batch, t = 8, 1024  # as bench_cuda's training-step table
    model = DecoderLM(max_len=t).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 256, (batch, t), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        F.cross_entropy(logits.view(-1, 256), tokens.view(-1)).backward()
        opt.step()

    out["train/mha"] = gpu_ms(step, max(iters // 2, 1))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    tf32 = "--tf32" in sys.argv
    iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 20
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    out = {}
    bench_attention(iters, out)
    bench_training_step(iters, out)
    with open(path, "w") as f:
        for name, ms in out.items():
            f.write(f"{name} {ms:.4f}\n")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: {len(out)} timings -> {path}")


if __name__ == "__main__":
    main()
