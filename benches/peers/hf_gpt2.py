#!/usr/bin/env python3
"""Hugging Face transformers peer of `attn-bench hf`: one GPT-2-small folder, loaded by both sides.

    /root/peers/bin/python benches/peers/hf_gpt2.py --write /tmp/gpt2-small
    /root/peers/bin/python benches/peers/hf_gpt2.py --folder /tmp/gpt2-small --threads 2 > hf_gpt2.jsonl
    cargo run --release -p attn-bench -- hf /tmp/gpt2-small --json >> hf_gpt2.jsonl

transformers and PyTorch are not dependencies of this project; install them (the CPU build is
enough) to run this.

`--write DIR` builds `GPT2LMHeadModel(GPT2Config(...))` at GPT-2 small's shape (12 layers, 12
heads, `n_embd` 768, vocab 50257, 1024 positions, tied head: 124M parameters) with random weights
from seed 42 and writes it with `save_pretrained` (`config.json`, `model.safetensors`), the layout
`attn_model::hf::Gpt2::from_pretrained` reads.

`--folder DIR` loads that folder with `from_pretrained`, in `eval` under `no_grad`, and times two
cases at a prompt of `--prompt` tokens (512 by default), batch 1:
- `hf/hf_gpt2_prefill/forward`: the model on the whole prompt with `use_cache=True` (logits of
  every position and the filled cache), the peer of `attn/hf_gpt2_prefill/forward`;
- `hf/hf_gpt2_decode/forward`: one new token against the cache of the prompt (the cache grows by
  one token per run, as on the Rust side), the peer of `attn/hf_gpt2_decode/forward`.
Each case runs once to warm up, then `--reps` times; the line reports the median and the shortest,
in the bench's format, with the `cpu`, `cpu_features` and `threads` fields of `torch_sdpa.py`.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sdpa import machine  # noqa: E402

N_LAYERS, N_HEADS, D_MODEL, D_FF, VOCAB, N_POSITIONS = 12, 12, 768, 3072, 50257, 1024


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="DIR", help="write a random GPT-2 small folder here")
    parser.add_argument("--folder", metavar="DIR", help="time the folder written by --write")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads (default: one per core, as the Rust backends)")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    parser.add_argument("--reps", type=int, default=10, help="timed runs per case")
    args = parser.parse_args()
    if not (args.write or args.folder):
        parser.error("give --write DIR, --folder DIR, or both")
    return args


def main():
    args = parse_args()
    try:
        import torch
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        sys.exit("PyTorch and transformers are not installed: `pip install torch transformers`")
    torch.set_num_threads(args.threads)
    if args.write:
        torch.manual_seed(42)
        config = GPT2Config(
            vocab_size=VOCAB, n_positions=N_POSITIONS, n_embd=D_MODEL, n_layer=N_LAYERS,
            n_head=N_HEADS, n_inner=D_FF, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            tie_word_embeddings=True,
        )
        GPT2LMHeadModel(config).save_pretrained(args.write)
        print(f"wrote {args.write}", file=sys.stderr)
    if not args.folder:
        return
    model = GPT2LMHeadModel.from_pretrained(args.folder).eval()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads", file=sys.stderr)
    cpu, cpu_features = machine()
    generator = torch.Generator().manual_seed(42)
    prompt = torch.randint(0, VOCAB, (1, args.prompt), generator=generator)
    token = torch.randint(0, VOCAB, (1, 1), generator=generator)

    def prefill():
        return model(prompt, use_cache=True)

    state = {}

    def decode():
        # Start again from the prompt's cache when the next token would pass the positions.
        if "past" not in state or state["filled"] + 1 > N_POSITIONS:
            state["past"], state["filled"] = prefill().past_key_values, args.prompt
        out = model(token, past_key_values=state["past"], use_cache=True)
        state["past"], state["filled"] = out.past_key_values, state["filled"] + 1
        return out.logits.argmax(-1)

    def timed(step):
        with torch.no_grad():
            step()
            times = []
            for _ in range(args.reps):
                clock = time.perf_counter()
                step()
                times.append((time.perf_counter() - clock) * 1e3)
        return times

    for case, step in [("hf_gpt2_prefill", prefill), ("hf_gpt2_decode", decode)]:
        if case == "hf_gpt2_decode":
            with torch.no_grad():
                state["past"], state["filled"] = prefill().past_key_values, args.prompt
        times = timed(step)
        print(json.dumps({
            "impl": "hf", "case": case, "pass": "forward", "device": "cpu",
            "batch": 1, "n_heads": N_HEADS, "seq_len": args.prompt, "d_head": D_MODEL // N_HEADS,
            "threads": torch.get_num_threads(),
            "cpu": cpu, "cpu_features": cpu_features, "reps": len(times),
            "median_ms": statistics.median(times), "min_ms": min(times),
            "gflops": None, "peak_rss_mib": None,
        }), flush=True)


if __name__ == "__main__":
    main()
