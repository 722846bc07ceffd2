#!/usr/bin/env python3
"""PyTorch peer of `attn train --task text`: nanoGPT's `shakespeare_char` model trained on the CPU.

    /root/peers/bin/python benches/peers/torch_text.py --data input.txt --threads 2 > torch_text.jsonl
    /root/peers/bin/python benches/peers/torch_text.py --data input.txt --steps 30 --eval-every 10

PyTorch is not a dependency of this project; install it (the CPU build is enough) to run this.
The defaults are nanoGPT's CPU recipe for `shakespeare_char` (`--device=cpu --block_size=64
--batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --dropout=0.0`).

Data: the files of `--data`, read as UTF-8 and joined in the order given, cut by character
position into the first 90% for training and the last 10% for validation (nanoGPT's
`data/shakespeare_char/prepare.py`). One token per character: id 0 is the unknown character,
then the characters of the training split sorted by code point; a validation character that the
training split lacks reads as id 0.
A batch is `batch` windows of `seq_len + 1` characters at offsets drawn by `torch.randint` from a
seeded `torch.Generator`: the inputs are the first `seq_len`, the targets the last `seq_len`
(nanoGPT's `get_batch`).

The model is nanoGPT's `model.py` GPT: token embedding plus learned position embedding;
`n_layers` pre-norm blocks `x + attn(ln(x))`, `x + mlp(ln(x))`, where `attn` is causal
self-attention through `F.scaled_dot_product_attention(is_causal=True)` and `mlp` is
`Linear(d_model, d_ff)`, GELU, `Linear(d_ff, d_model)`; a final LayerNorm; a head tied to the
token embedding. Biases everywhere but the head, LayerNorm epsilon 1e-5, no dropout.
Weights and embeddings start as normal(0, 0.02), biases as zeros, LayerNorm scales as ones.
Two choices differ from nanoGPT: GELU is the tanh approximation
(`approximate="tanh"`, as GPT-2), and the residual projections are not scaled down by
`1 / sqrt(2 * n_layers)` at initialisation.

Training: `AdamW(betas=(0.9, 0.99), eps=1e-8, fused=False)` with weight decay 0.1 on every
parameter of two or more dimensions and 0 on the others (nanoGPT's `configure_optimizers`);
global-norm gradient clipping at 1.0; for the 0-based update `t` of `T = --steps`, with
`w = --warmup-steps` and `floor = --min-lr-fraction * lr`, attn-train's schedule:

    lr(t) = lr * (t + 1) / w                                              t < w
    lr(t) = floor + (lr - floor) * (1 + cos(pi * (t - w) / (T - w))) / 2  t >= w

which reaches the floor at `t = T`, as nanoGPT's `get_lr` does with `lr_decay_iters = max_iters`.
The validation loss is the mean cross-entropy in nats per token over `--eval-batches` batches of
the training shape, in `eval` mode under `no_grad`, before the first update, after every
`--eval-every` updates and after the last. Every evaluation reads the same windows (a generator
of its own, seeded afresh), so that evaluation leaves the training batches unchanged and the
losses along a run differ by the model alone.

Only the training steps are timed (`time.perf_counter()` around forward, loss, backward,
clipping, `optimizer.step()`, `zero_grad` and the `loss.item()` read-back); drawing the batch and
evaluating are not. `tokens_per_second` is `steps * batch * seq_len` over the summed step times,
`median_step_ms` and `min_step_ms` the median and the shortest over the steps after the first 10
(on a busy machine the sum grows with every step another process delays; the median and the
shortest much less).
Progress goes to stderr; the end is one JSON line on stdout, with the `cpu`, `cpu_features` and
`threads` fields of `torch_sdpa.py`.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sdpa import machine  # noqa: E402

TRAIN_FRACTION = 0.9
UNKNOWN_ID = 0
INIT_STD = 0.02
LAYER_NORM_EPS = 1e-5
BETAS, EPS, WEIGHT_DECAY, CLIP = (0.9, 0.99), 1e-8, 0.1, 1.0
# Steps left out of the median: the first ones pay for allocation and thread start-up.
UNTIMED_MEDIAN_STEPS = 10


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is outside [0, 1]")
    return value


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", required=True, metavar="FILE",
                        help="UTF-8 text files, joined in this order")
    parser.add_argument("--threads", type=positive, default=os.cpu_count(),
                        help="torch.set_num_threads (default: one per core, as the Rust backends)")
    parser.add_argument("--seq-len", type=positive, default=64, help="nanoGPT's block_size")
    parser.add_argument("--batch-size", type=positive, default=12)
    parser.add_argument("--n-layers", type=positive, default=4)
    parser.add_argument("--n-heads", type=positive, default=4)
    parser.add_argument("--d-model", type=positive, default=128, help="nanoGPT's n_embd")
    parser.add_argument("--d-ff", type=positive, default=512)
    parser.add_argument("--steps", type=positive, default=2000, help="optimizer updates")
    parser.add_argument("--lr", type=float, default=1e-3, help="the peak learning rate")
    parser.add_argument("--warmup-steps", type=non_negative, default=100)
    parser.add_argument("--min-lr-fraction", type=fraction, default=0.1,
                        help="the floor of the cosine decay as a fraction of --lr")
    parser.add_argument("--eval-every", type=positive, default=250,
                        help="updates between validation losses")
    parser.add_argument("--eval-batches", type=positive, default=20,
                        help="batches averaged in one validation loss")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.d_model % args.n_heads:
        parser.error(f"--d-model {args.d_model} is not a multiple of --n-heads {args.n_heads}")
    if args.lr <= 0 or not math.isfinite(args.lr):
        parser.error(f"--lr {args.lr} is not a positive number")
    return args


def read_text(paths):
    parts = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
        except (OSError, UnicodeDecodeError) as error:
            sys.exit(f"{path}: {error}")
    return "".join(parts)


def character_ids(torch, text, seq_len):
    """(train ids, validation ids, vocab): the two splits as `long` tensors of character ids."""
    cut = int(len(text) * TRAIN_FRACTION)
    train_text, val_text = text[:cut], text[cut:]
    # A window is seq_len + 1 characters, and randint needs at least one offset to draw.
    for name, split in (("training", train_text), ("validation", val_text)):
        if len(split) < seq_len + 1:
            sys.exit(f"the {name} split has {len(split)} characters, fewer than "
                     f"seq_len + 1 = {seq_len + 1}: give more text or a shorter --seq-len")
    ids = {c: i for i, c in enumerate(sorted(set(train_text)), start=UNKNOWN_ID + 1)}

    def encode(split):
        return torch.tensor([ids.get(c, UNKNOWN_ID) for c in split], dtype=torch.long)

    return encode(train_text), encode(val_text), len(ids) + 1


def draw_batch(torch, data, batch, seq_len, generator):
    """(inputs, targets), each `[batch, seq_len]`: random windows and the same shifted by one."""
    starts = torch.randint(len(data) - seq_len, (batch,), generator=generator)  # [batch]
    offsets = torch.arange(seq_len + 1)  # [seq_len + 1]
    windows = data[starts[:, None] + offsets]  # [batch, seq_len + 1]
    return windows[:, :-1], windows[:, 1:]


def build_model(torch, vocab, args):
    nn = torch.nn
    F = torch.nn.functional
    d_model, n_heads = args.d_model, args.n_heads
    d_head = d_model // n_heads

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def forward(self, x):
            batch, seq_len, _ = x.shape
            q, k, v = self.qkv(x).split(d_model, dim=2)  # 3 x [batch, seq_len, d_model]
            q, k, v = (t.view(batch, seq_len, n_heads, d_head).transpose(1, 2)
                       for t in (q, k, v))  # 3 x [batch, n_heads, seq_len, d_head]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [batch, n_heads, seq_len, d_head]
            y = y.transpose(1, 2).contiguous().view(batch, seq_len, d_model)  # [batch, seq_len, d_model]
            return self.out(y)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(d_model, args.d_ff)
            self.down = nn.Linear(args.d_ff, d_model)

        def forward(self, x):
            return self.down(F.gelu(self.up(x), approximate="tanh"))  # [batch, seq_len, d_model]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_attn = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
            self.attn = CausalSelfAttention()
            self.norm_ff = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
            self.ff = FeedForward()

        def forward(self, x):
            x = x + self.attn(self.norm_attn(x))
            return x + self.ff(self.norm_ff(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, d_model)
            self.positions = nn.Embedding(args.seq_len, d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(args.n_layers))
            self.norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
            self.head = nn.Linear(d_model, vocab, bias=False)
            self.head.weight = self.tokens.weight
            self.register_buffer("index", torch.arange(args.seq_len), persistent=False)
            self.apply(self.init_weights)

        @staticmethod
        def init_weights(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def forward(self, tokens):  # [batch, seq_len] -> [batch, seq_len, vocab]
            seq_len = tokens.shape[1]
            x = self.tokens(tokens) + self.positions(self.index[:seq_len])  # [batch, seq_len, d_model]
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))  # [batch, seq_len, vocab]

    return Gpt()


def optimizer_for(torch, model, lr):
    """AdamW with weight decay on the matrices and embeddings only, as nanoGPT."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS, fused=False)


def learning_rate(t, args):
    """The learning rate of the 0-based update `t`."""
    w, total = args.warmup_steps, args.steps
    if t < w:
        return args.lr * (t + 1) / w
    floor = args.lr * args.min_lr_fraction
    progress = min((t - w) / max(total - w, 1), 1.0)
    return floor + (args.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed: `pip install torch` (the CPU build is enough)")
    F = torch.nn.functional
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)

    train_ids, val_ids, vocab = character_ids(torch, read_text(args.data), args.seq_len)
    torch.manual_seed(args.seed)
    model = build_model(torch, vocab, args)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    optimizer = optimizer_for(torch, model, args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    print(f"{len(train_ids)} training and {len(val_ids)} validation characters, vocab {vocab}, "
          f"{n_params} parameters", file=sys.stderr, flush=True)

    def step(inputs, targets, lr):
        for group in optimizer.param_groups:
            group["lr"] = lr
        logits = model(inputs)  # [batch, seq_len, vocab]
        loss = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    def validation_loss():
        windows = torch.Generator().manual_seed(args.seed + 1)
        model.eval()
        total = 0.0
        with torch.no_grad():
            for _ in range(args.eval_batches):
                inputs, targets = draw_batch(torch, val_ids, args.batch_size, args.seq_len, windows)
                logits = model(inputs)  # [batch, seq_len, vocab]
                total += F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1)).item()
        model.train()
        return total / args.eval_batches

    val_curve = [[0, validation_loss()]]
    print(f"step 0: val loss {val_curve[-1][1]:.4f}", file=sys.stderr, flush=True)
    times, loss = [], None
    for t in range(args.steps):
        inputs, targets = draw_batch(torch, train_ids, args.batch_size, args.seq_len, generator)
        lr = learning_rate(t, args)
        clock = time.perf_counter()
        loss = step(inputs, targets, lr)
        times.append(time.perf_counter() - clock)
        if not math.isfinite(loss):
            sys.exit(f"step {t + 1}: the training loss is {loss}")
        done = t + 1
        if done % args.eval_every == 0 or done == args.steps:
            val_curve.append([done, validation_loss()])
            print(f"step {done}: loss {loss:.4f}, val loss {val_curve[-1][1]:.4f}, lr {lr:.2e}, "
                  f"{statistics.median(times) * 1e3:.2f} ms/step", file=sys.stderr, flush=True)

    train_seconds = sum(times)
    steady = times[UNTIMED_MEDIAN_STEPS:] or times
    cpu, cpu_features = machine()
    tokens = args.steps * args.batch_size * args.seq_len
    print(json.dumps({
        "impl": "torch", "case": "text_train", "device": "cpu",
        "cpu": cpu, "cpu_features": cpu_features, "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "steps": args.steps, "batch_size": args.batch_size, "seq_len": args.seq_len,
        "n_layers": args.n_layers, "n_heads": args.n_heads, "d_model": args.d_model,
        "d_ff": args.d_ff, "vocab": vocab, "params": n_params,
        "lr": args.lr, "warmup_steps": args.warmup_steps, "min_lr_fraction": args.min_lr_fraction,
        "seed": args.seed, "eval_batches": args.eval_batches,
        "train_chars": len(train_ids), "val_chars": len(val_ids),
        "final_train_loss": loss, "final_val_loss": val_curve[-1][1], "val_curve": val_curve,
        "train_seconds": train_seconds, "tokens_per_second": tokens / train_seconds,
        "median_step_ms": statistics.median(steady) * 1e3, "min_step_ms": min(steady) * 1e3,
    }), flush=True)


if __name__ == "__main__":
    main()
