#!/usr/bin/env python3
"""PyTorch peer of `attn-bench`'s training cases: timed training steps of an encoder-only token model.

    /root/peers/bin/python benches/peers/torch_train.py --threads 2 > torch_train.jsonl

PyTorch is not a dependency of this project; install it (the CPU build is enough) to run this.
Cases, one per shape `(d_model, n_heads, n_layers, d_ff, seq_len, batch)`:

- `torch/train_toy/forward_backward`: `(64, 4, 2, 256, 16, 64)`;
- `torch/train_mid/forward_backward`: `(256, 8, 4, 1024, 256, 16)`;
- `torch/train_long/forward_backward`: `(512, 8, 2, 2048, 2048, 1)`.

The model: a token embedding `nn.Embedding(16, d_model)` times `sqrt(d_model)`, plus learned
positions `nn.Embedding(seq_len, d_model)`; `n_layers` of
`nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0, activation="relu",
batch_first=True, norm_first=True)` (pre-norm, no mask, in `train` mode); a final
`nn.LayerNorm(d_model)`; a head `nn.Linear(d_model, 16)` giving logits `[batch, seq_len, 16]`.
The loss is the mean cross-entropy over every position.

The task is reversal: the inputs are uniform random tokens in `0..16` of shape `[batch, seq_len]`
from a seeded `torch.Generator`, the targets the inputs flipped along the sequence. A fresh batch
is drawn before every step, outside the timed region.

One timed step: forward, loss, `loss.backward()`, `clip_grad_norm_(params, 1.0)` (global L2
norm), `optimizer.step()`, `scheduler.step()`, `optimizer.zero_grad(set_to_none=True)` and
`loss.item()` (the one read-back per step that the Rust loop also does, to catch NaN).
The optimizer is `Adam(lr=3e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0)`; the schedule a
`LambdaLR` that, for the 0-based update `t` with `w = 100` warm-up updates and
`T = --schedule-steps`, gives `lr * (t + 1) / w` for `t < w`, then a straight line from `lr` at
`t = w` down to 0 at `t = T` (attn-train's default schedule), and 0 after. The untimed warm-up steps
(`--warmup`) are training steps too: they update the model and advance the schedule.

Each step is timed on its own with `time.perf_counter()`; the line reports the median and the
shortest in milliseconds, `tokens_per_s` = `batch * seq_len` per median step, and `final_loss`
the loss of the last timed step. `gflops` is null (no FLOP count for a whole step).
Every shape runs in a process of its own, so that its memory figures are its own: asked for
several, the script runs itself once per shape and forwards each child's line.
`baseline_rss_mib` is the resident high-water mark (`ru_maxrss`) after building the model and
optimizer, before the first step; `peak_rss_mib` the same after the last step (whole process,
the interpreter and torch included, as the Rust program's `VmHWM`).
`cpu`, `cpu_features` and `threads` are the fields of `torch_sdpa.py`.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sdpa import machine, selected  # noqa: E402

VOCAB = 16
# name: (d_model, n_heads, n_layers, d_ff, seq_len, batch, default timed steps)
SHAPES = {
    "toy": (64, 4, 2, 256, 16, 64, 200),
    "mid": (256, 8, 4, 1024, 256, 16, 30),
    "long": (512, 8, 2, 2048, 2048, 1, 20),
}
LR, BETAS, EPS, CLIP = 3e-3, (0.9, 0.98), 1e-9, 1.0
WARMUP_UPDATES, FINAL_FRACTION = 100, 0.0
SEED = 42


def shape_list(text):
    names = [s for s in text.split(",") if s]
    unknown = [s for s in names if s not in SHAPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown shape(s) {unknown or text!r}; known: {', '.join(SHAPES)}")
    return names


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads (default: one per core, as the Rust backends)")
    parser.add_argument("--shapes", type=shape_list, default=list(SHAPES),
                        help="comma-separated, of toy, mid, long (default: all)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps for every shape (default: toy 200, mid 30, long 20)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before the timed ones")
    parser.add_argument("--schedule-steps", type=int, default=2000,
                        help="the update at which the learning rate reaches 0")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=[],
                        help="filters as in attn-bench: train_toy, torch/train_mid/forward_backward, ...")
    return parser.parse_args()


def case_id(name):
    return f"torch/train_{name}/forward_backward"


def lr_fraction(t, total):
    """The learning rate of the 0-based update `t` as a fraction of the peak."""
    if t < WARMUP_UPDATES:
        return (t + 1) / WARMUP_UPDATES
    span = max(total - WARMUP_UPDATES, 1)
    progress = min((t - WARMUP_UPDATES) / span, 1.0)
    return FINAL_FRACTION + (1.0 - FINAL_FRACTION) * (1.0 - progress)


def build_model(torch, d_model, n_heads, n_layers, d_ff, seq_len):
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, d_model)
            self.positions = nn.Embedding(seq_len, d_model)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="relu",
                                           batch_first=True, norm_first=True)
                for _ in range(n_layers))
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, VOCAB)
            self.register_buffer("index", torch.arange(seq_len), persistent=False)

        def forward(self, tokens):  # [batch, seq_len] -> [batch, seq_len, VOCAB]
            x = self.tokens(tokens) * math.sqrt(d_model) + self.positions(self.index)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    return Encoder().train()


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_shape(torch, name, args):
    """Train one shape in this process and print its line."""
    F = torch.nn.functional
    d_model, n_heads, n_layers, d_ff, seq_len, batch, default_steps = SHAPES[name]
    steps = args.steps if args.steps is not None else default_steps
    torch.manual_seed(SEED)
    model = build_model(torch, d_model, n_heads, n_layers, d_ff, seq_len)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: lr_fraction(t, args.schedule_steps))
    generator = torch.Generator().manual_seed(SEED)

    def draw():
        inputs = torch.randint(0, VOCAB, (batch, seq_len), generator=generator)
        return inputs, inputs.flip(1)

    def step(inputs, targets):
        logits = model(inputs)  # [batch, seq_len, VOCAB]
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    baseline = max_rss_mib()
    first_loss = None
    for _ in range(args.warmup):
        loss = step(*draw())
        first_loss = loss if first_loss is None else first_loss
    times, loss = [], None
    for _ in range(steps):
        batch_data = draw()
        clock = time.perf_counter()
        loss = step(*batch_data)
        times.append((time.perf_counter() - clock) * 1e3)
        first_loss = loss if first_loss is None else first_loss
    peak = max_rss_mib()
    cpu, cpu_features = machine()
    median = statistics.median(times) if times else None
    tokens_per_s = batch * seq_len / (median / 1e3) if median else None
    print(json.dumps({
        "impl": "torch", "case": f"train_{name}", "pass": "forward_backward", "device": "cpu",
        "batch": batch, "n_heads": n_heads, "seq_len": seq_len, "d_head": d_model // n_heads,
        "threads": torch.get_num_threads(),
        "cpu": cpu, "cpu_features": cpu_features, "reps": len(times),
        "median_ms": median, "min_ms": min(times) if times else None,
        "gflops": None, "peak_rss_mib": peak, "baseline_rss_mib": baseline,
        "tokens_per_s": tokens_per_s,
        "d_model": d_model, "n_layers": n_layers, "d_ff": d_ff, "final_loss": loss,
    }), flush=True)
    median_text = f"{median:.2f} ms" if median is not None else "n/a"
    tokens_text = f"{tokens_per_s:.0f}" if tokens_per_s is not None else "n/a"
    print(f"train_{name}: d_model {d_model}, {n_heads} heads, {n_layers} layers, d_ff {d_ff}, "
          f"seq_len {seq_len}, batch {batch}: median {median_text} over {len(times)} steps, "
          f"{tokens_text} tokens/s, peak {peak:.0f} MiB (baseline {baseline:.0f}), "
          f"loss {first_loss} -> {loss}", file=sys.stderr, flush=True)


def run_children(names, args):
    """Run each shape in a fresh process of this script; forward their lines."""
    failed = []
    for name in names:
        command = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads),
                   "--shapes", name, "--warmup", str(args.warmup),
                   "--schedule-steps", str(args.schedule_steps)]
        if args.steps is not None:
            command += ["--steps", str(args.steps)]
        child = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        sys.stdout.write(child.stdout)
        sys.stdout.flush()
        if child.returncode != 0:
            print(f"train_{name}: the child process exited with {child.returncode}",
                  file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        sys.exit(f"failed shapes: {', '.join(failed)}")


def main():
    args = parse_args()
    names = [n for n in dict.fromkeys(args.shapes) if selected(case_id(n), args.cases)]
    if not names:
        return
    if len(names) > 1:
        run_children(names, args)
        return
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed: `pip install torch` (the CPU build is enough)")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)
    run_shape(torch, names[0], args)


if __name__ == "__main__":
    main()
