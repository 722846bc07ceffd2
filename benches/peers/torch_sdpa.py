#!/usr/bin/env python3
"""PyTorch peer of the `attn-bench` program: the same shapes, timing rules and JSON lines, on the CPU.

    python3 benches/peers/torch_sdpa.py --threads 2 > torch.jsonl

PyTorch is not a dependency of this project; install it (the CPU build is enough) to run this.
Cases:

- `torch/sdpa/forward`: `F.scaled_dot_product_attention` on `[1, 8, s, 64]` under `no_grad`
  (the peer of `attn/*` and `burn/module_attention`).
- `torch/sdpa/forward_backward`: the same with `requires_grad` inputs, then `out.sum().backward()`.
- `torch/mha/*`: `nn.MultiheadAttention(512, 8, dropout=0, batch_first=True)` on `[1, s, 512]`
  with `need_weights=False` (its fast path; the peer of `attn/mha` and `burn/mha`).
- `torch/encoder_block/*`: `nn.TransformerEncoderLayer(512, 8, 2048, dropout=0, batch_first=True)`
  (post-norm, ReLU; in `eval` under `no_grad` its fused fast path), the peer of
  `attn/encoder_block` and `burn/encoder_block`.
- `torch/sgemm/forward`: `a @ b` on two `[n, n]` matrices for n = 1024 and 2048 (`seq_len` is n),
  after the others: the machine's practical rate for f32 matrix products, 2n^3 flops, which
  `attn-bench report` holds the native kernel to. Not run with `--quick`.

`--device cuda` runs the `sdpa` cases on the GPU instead (each step ends with
`torch.cuda.synchronize()`), the peer of the CubeCL kernels in `benches/gpu/flash_attention.sh`;
the other cases stay on the CPU and are skipped there.

Each case runs untimed to warm up (once at least, for half a second, 50 ms with --quick), then
repeats until it has both a minimum number of runs and a minimum time, as the Rust program does;
the line reports the median. FLOPs count matrix products only: attention forward is
4 * batch * n_heads * s^2 * d_head, forward plus backward three times that.

Every line names its machine as the Rust program's lines do: `cpu` (the `model name` of
/proc/cpuinfo, `unknown` where there is none) and `cpu_features` (the instruction sets of the
same list that the CPU's /proc/cpuinfo flags name, in the same order and spelling).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

BATCH, N_HEADS, D_HEAD = 1, 8, 64
D_MODEL = N_HEADS * D_HEAD
D_FF = 4 * D_MODEL
SIZES = [128, 512, 2048, 4096]
QUICK_SIZES = [128, 512]
SGEMM_SIZES = [1024, 2048]
# (warm-up seconds, min_reps, max_reps, target seconds, max seconds): the budgets of
# crates/attn-bench/src/timing.rs.
FULL = (0.5, 5, 200, 2.0, 20.0)
QUICK = (0.05, 3, 50, 0.25, 3.0)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads (default: one per core, as the Rust backends)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=None)
    parser.add_argument("--cases", type=lambda s: s.split(","), default=[],
                        help="filters as in attn-bench: sdpa, mha, sdpa/forward, ...")
    parser.add_argument("--quick", action="store_true", help="seq_len 128 and 512, short budget")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the sdpa cases run (cuda: the GPU, sdpa cases only)")
    return parser.parse_args()


# The instruction sets of crates/attn-bench/src/machine.rs (X86_FEATURES), with the name each has
# among the flags of /proc/cpuinfo.
X86_FEATURES = [
    ("avx2", "avx2"), ("fma", "fma"), ("avx512f", "avx512f"), ("avx512cd", "avx512cd"),
    ("avx512bw", "avx512bw"), ("avx512dq", "avx512dq"), ("avx512vl", "avx512vl"),
    ("avx512bf16", "avx512_bf16"), ("avx512fp16", "avx512_fp16"),
    ("amx-tile", "amx_tile"), ("amx-bf16", "amx_bf16"),
]


def machine():
    """(cpu, cpu_features): the first `model name` and the listed `flags` of /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    cpu = fields.get("model name") or "unknown"
    flags = set(fields.get("flags", "").split())
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    features = [name for name, flag in X86_FEATURES if x86 and flag in flags]
    return cpu, features


def selected(case_id, filters):
    parts = case_id.split("/")
    return not filters or any(all(p in parts for p in f.split("/")) for f in filters)


def measure(step, budget):
    """Untimed runs for the warm-up (one at least), then runs until the budget says stop; ms."""
    warm_up, min_reps, max_reps, target, max_time = budget
    warm_up_start = time.perf_counter()
    step()
    while time.perf_counter() - warm_up_start < warm_up:
        step()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps:
        clock = time.perf_counter()
        step()
        times.append((time.perf_counter() - clock) * 1e3)
        spent = time.perf_counter() - start
        if (len(times) >= min_reps and spent >= target) or (len(times) >= 3 and spent >= max_time):
            break
    return times


def sdpa_step(torch, seq_len, backward, device="cpu"):
    F = torch.nn.functional
    q, k, v = (torch.randn(BATCH, N_HEADS, seq_len, D_HEAD, requires_grad=backward, device=device)
               for _ in range(3))
    # A GPU runs asynchronously: a step is over when the device has finished it.
    finish = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if not backward:
        def step():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v)
            finish()
        return step

    def step():
        F.scaled_dot_product_attention(q, k, v).sum().backward()
        q.grad = k.grad = v.grad = None
        finish()
    return step


def mha_step(torch, seq_len, backward):
    mha = torch.nn.MultiheadAttention(D_MODEL, N_HEADS, dropout=0.0, batch_first=True)
    x = torch.randn(BATCH, seq_len, D_MODEL, requires_grad=backward)
    if not backward:
        mha.eval()

        def step():
            with torch.no_grad():
                mha(x, x, x, need_weights=False)
        return step

    def step():
        mha(x, x, x, need_weights=False)[0].sum().backward()
        mha.zero_grad(set_to_none=True)
        x.grad = None
    return step


def encoder_block_step(torch, seq_len, backward):
    block = torch.nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True)
    x = torch.randn(BATCH, seq_len, D_MODEL, requires_grad=backward)
    if not backward:
        block.eval()

        def step():
            with torch.no_grad():
                block(x)
        return step

    def step():
        block(x).sum().backward()
        block.zero_grad(set_to_none=True)
        x.grad = None
    return step


def sgemm_step(torch, n):
    a, b = torch.randn(n, n), torch.randn(n, n)

    def step():
        with torch.no_grad():
            a @ b
    return step


def flops(case, passes, seq_len):
    attention = 4 * BATCH * N_HEADS * seq_len * seq_len * D_HEAD
    projections = 4 * 2 * BATCH * seq_len * D_MODEL * D_MODEL
    feed_forward = 2 * 2 * BATCH * seq_len * D_MODEL * D_FF
    forward = {
        "sdpa": attention,
        "mha": attention + projections,
        "encoder_block": attention + projections + feed_forward,
    }[case]
    return forward if passes == "forward" else 3 * forward


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed: `pip install torch` (the CPU build is enough)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)
    cpu, cpu_features = machine()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    budget = QUICK if args.quick else FULL
    steps = {"sdpa": sdpa_step, "mha": mha_step, "encoder_block": encoder_block_step}
    gpu = None
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: this PyTorch sees no CUDA device")
        print(f"GPU {torch.cuda.get_device_name()}", file=sys.stderr)
        gpu = torch.cuda.get_device_name()
        steps = {"sdpa": lambda t, s, b: sdpa_step(t, s, b, "cuda")}
    for seq_len in sizes:
        for case, make in steps.items():
            for passes in ("forward", "forward_backward"):
                if not selected(f"torch/{case}/{passes}", args.cases):
                    continue
                times = measure(make(torch, seq_len, passes == "forward_backward"), budget)
                median = statistics.median(times)
                print(json.dumps({
                    "impl": "torch", "case": case, "pass": passes, "device": args.device,
                    "batch": BATCH, "n_heads": N_HEADS, "seq_len": seq_len, "d_head": D_HEAD,
                    "threads": torch.get_num_threads(),
                    "cpu": cpu, "cpu_features": cpu_features, "gpu": gpu, "reps": len(times),
                    "median_ms": median, "min_ms": min(times),
                    "gflops": flops(case, passes, seq_len) / (median * 1e6),
                    "peak_rss_mib": None,
                }), flush=True)
    for n in [] if args.quick or args.device == "cuda" else SGEMM_SIZES:
        if not selected("torch/sgemm/forward", args.cases):
            continue
        times = measure(sgemm_step(torch, n), budget)
        median = statistics.median(times)
        print(json.dumps({
            "impl": "torch", "case": "sgemm", "pass": "forward", "device": "cpu",
            "batch": 1, "n_heads": 1, "seq_len": n, "d_head": n,
            "threads": torch.get_num_threads(),
            "cpu": cpu, "cpu_features": cpu_features, "reps": len(times),
            "median_ms": median, "min_ms": min(times),
            "gflops": 2 * n ** 3 / (median * 1e6),
            "peak_rss_mib": None,
        }), flush=True)


if __name__ == "__main__":
    main()
