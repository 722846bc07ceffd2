#!/usr/bin/env python3
"""Hugging Face transformers peer of `attn-bench`'s decode cases: greedy `generate` with its cache at GPT-2 small's shape.

    /root/peers/bin/python benches/peers/hf_generate.py --threads 2 > hf.jsonl

transformers and PyTorch are not dependencies of this project; install them (the CPU build is
enough) to run this.
The model is `GPT2LMHeadModel(GPT2Config(...))` with random weights: 12 layers, 12 heads,
`n_embd` 768, `n_inner` 3072, vocab 50257, learned positions (`n_positions` large enough for the
longest prompt plus the new tokens), pre-norm, tied head, batch 1, in `eval` under `no_grad`.
It is the peer of `attn/decode_cached/forward` (`TokenDecoder::step` with the KV cache).

For a prompt of `s` tokens (128, 1024, 4096 by default) the script times `generate` twice, greedy
with `min_new_tokens = max_new_tokens`: once with `--new-tokens` new tokens and once with one, and
reports `(t_many - t_one) / (new_tokens - 1)`, the time of one cached decoding step at a context
of about `s` tokens, without the prefill.
Each pair is timed `--reps` times after a warm-up, and the line reports the median and the
shortest.
The lines have the bench's format (`impl` `hf`, `case` `generate`, `pass` `forward`), with the
`cpu`, `cpu_features` and `threads` fields of `torch_sdpa.py`.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sdpa import machine, selected  # noqa: E402

BATCH, N_LAYERS, N_HEADS, D_MODEL, D_FF, VOCAB = 1, 12, 12, 768, 3072, 50257
D_HEAD = D_MODEL // N_HEADS
SIZES = [128, 1024, 4096]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads (default: one per core, as the Rust backends)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES)
    parser.add_argument("--new-tokens", type=int, default=33,
                        help="tokens of the long generation (the short one makes one)")
    parser.add_argument("--reps", type=int, default=3, help="timed pairs per prompt length")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=[],
                        help="filters as in attn-bench: generate, hf/generate/forward, ...")
    return parser.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        sys.exit("PyTorch and transformers are not installed: `pip install torch transformers`")
    if not selected("hf/generate/forward", args.cases):
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    cpu, cpu_features = machine()
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=max(args.sizes) + args.new_tokens + 1, n_embd=D_MODEL,
        n_layer=N_LAYERS, n_head=N_HEADS, n_inner=D_FF, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(config).eval()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads", file=sys.stderr)

    def generate(prompt, new_tokens):
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
                           pad_token_id=0)

    def timed(prompt, new_tokens):
        clock = time.perf_counter()
        generate(prompt, new_tokens)
        return time.perf_counter() - clock

    for seq_len in args.sizes:
        prompt = torch.randint(0, VOCAB, (BATCH, seq_len))
        generate(prompt, 2)
        times = []
        for _ in range(args.reps):
            many, one = timed(prompt, args.new_tokens), timed(prompt, 1)
            times.append((many - one) / (args.new_tokens - 1) * 1e3)
        print(json.dumps({
            "impl": "hf", "case": "generate", "pass": "forward", "device": "cpu",
            "batch": BATCH, "n_heads": N_HEADS, "seq_len": seq_len, "d_head": D_HEAD,
            "threads": torch.get_num_threads(),
            "cpu": cpu, "cpu_features": cpu_features, "reps": len(times),
            "median_ms": statistics.median(times), "min_ms": min(times),
            "gflops": None, "peak_rss_mib": None,
        }), flush=True)


if __name__ == "__main__":
    main()
