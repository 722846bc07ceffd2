#!/usr/bin/env python3
"""Hugging Face transformers peer for Llama-family folders: load, prefill and cached decode on the CPU.

    /root/peers/bin/python benches/peers/hf_llama.py write /tmp/hf-llama
    /root/peers/bin/python benches/peers/hf_llama.py time /tmp/hf-llama/smollm2-135m-f32 --threads 2 > hf_llama.jsonl

    # a quick check: two layers, hidden 64, small prompt and contexts
    /root/peers/bin/python benches/peers/hf_llama.py write /tmp/hf-llama-tiny --tiny
    /root/peers/bin/python benches/peers/hf_llama.py time /tmp/hf-llama-tiny/qwen2.5-tiny-bf16 \\
        --threads 1 --repeats 2 --prefill-len 32 --contexts 16,64 --decode-tokens 4

transformers, PyTorch and safetensors are not dependencies of this project; install them (the
CPU build is enough) to run this.

`write OUT` builds each shape with random weights, transformers' own initialisation
(`XForCausalLM(config)`, `initializer_range` 0.02, biases zero, norms one) after
`torch.manual_seed(--seed)` (42), and writes it with `save_pretrained` (`config.json`,
`generation_config.json`, `model.safetensors`; the tied head is not stored) once per `--dtypes`
entry: `OUT/<shape>-f32` holds the float32 weights, `OUT/<shape>-bf16` the same weights rounded to
bfloat16 (`model.to(torch.bfloat16)`), so that the two folders of a shape differ by the rounding
alone. OUT must lie outside the repository (the f32 folders are 0.5 and 2 GB).
- `smollm2-135m`: `LlamaForCausalLM`, 30 layers, hidden 576, 9 heads, 3 key/value heads
  (head 64), intermediate 1536, vocab 49152, tied head, rope_theta 1e5, rms_norm_eps 1e-5,
  max_position_embeddings 8192 (SmolLM2-135M's shape, 135M parameters);
- `qwen2.5-0.5b`: `Qwen2ForCausalLM`, 24 layers, hidden 896, 14 heads, 2 key/value heads
  (head 64), intermediate 4864, vocab 151936, tied head, q/k/v biases, rope_theta 1e6,
  rms_norm_eps 1e-6, max_position_embeddings 32768, no sliding window (Qwen2.5-0.5B's shape,
  494M parameters).
`--tiny` writes the same two architectures at 2 layers and hidden 64 (`smollm2-tiny`: 4 heads,
2 key/value heads, intermediate 128; `qwen2.5-tiny`: 4 heads, 1 key/value head, intermediate
352; vocab 512 for both; the other fields as above), to test the script in seconds.
transformers 5 writes the rotary base inside `rope_parameters` and the weights' type as `dtype`
in `config.json`.

`time FOLDER` measures one folder, in this order, with `torch.set_num_threads(--threads)` (2 by
default) set before anything else and everything after the load under `torch.inference_mode()`:
- `load`: `from_pretrained(FOLDER, dtype=<the dtype of the folder's safetensors>,
  attn_implementation="sdpa")`, timed once (the model's class is imported before the clock
  starts), with the process's peak resident set (`getrusage(RUSAGE_SELF).ru_maxrss`, in bytes)
  just before and just after it, and the size of the folder's `*.safetensors` files;
- `prefill`: one forward of a `--prefill-len` (512) token random prompt, batch 1,
  `use_cache=True` (a fresh cache each run), logits of every position (`--logits last` passes
  `logits_to_keep=1`); one warm-up, then `--repeats` (5) timed runs;
- `decode` at each context of `--contexts` (128, 1024): the random prompt of that length is
  prefilled once (untimed); each run crops the `DynamicCache` back to the context (untimed;
  `cache.crop(-n)` removes the last n tokens, the only form transformers 5.24 accepts, and
  `get_seq_length` checks the result), then feeds `--decode-tokens` (16) fixed random tokens one
  at a time through the cache (each forward computes the logits of its token) and takes the time
  per token; one warm-up run, then `--repeats` timed runs. Every run thus decodes the tokens at
  contexts `context` .. `context + decode_tokens - 1`.
The cache goes in as the forward's `cache` argument, and comes out as the output's `cache`
field, where the transformers installed has them (5.24 renamed `past_key_values` so, and keeps
the old name with a deprecation warning), as `past_key_values` where it has not.
Prompts and tokens come from a `torch.Generator` seeded with `--seed`.

stdout gets one JSON line per measurement: `peer` ("transformers"), `torch`, `transformers`,
`folder`, `model` (the architecture), `dtype`, `threads`, `what` ("load", "prefill" or
"decode"), `context` (tokens already in the cache when the timed tokens start: 0 for prefill,
null for load), `tokens` (tokens per run: the prompt for prefill, one for decode, whose times
are per token, null for load), `median_ms`, `min_ms`, `samples` (every timed run, ms),
`tokens_per_s` (`tokens / median`), and the `cpu` and `cpu_features` fields of `torch_sdpa.py`.
The `load` line also has `load_s`, `peak_rss_bytes`, `rss_before_load_bytes` (the peak before
the load: Python, torch and transformers), `weights_bytes` and `peak_rss_over_weights`; its
`median_ms` is the one load. Progress goes to stderr.

Fairness rules, for the caller comparing this with the Rust side:
- the same folder for both sides (the Rust side reads what `write` wrote), at the same dtype;
- the same thread count on both sides (`--threads` here, the Rust side's thread setting there),
  on an otherwise idle machine;
- the same prompt length, contexts and tokens per run, and the same logits (every position, or
  the last only) on both sides;
- runs alternated with the Rust side by the caller (Python, Rust, Python, Rust, ... in fresh
  processes), so that drift of the machine (heat, other load) falls on both; the first load of
  a folder also warms the page cache, so discard the first pair or read the folder once before.
"""

import argparse
import inspect
import json
import os
import resource
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sdpa import machine  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name: (architecture, config fields). Shared by the full and tiny shapes of each model.
SHAPES = {
    "smollm2-135m": ("LlamaForCausalLM", dict(
        num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        rms_norm_eps=1e-5, max_position_embeddings=8192, hidden_act="silu",
        attention_bias=False, mlp_bias=False)),
    "qwen2.5-0.5b": ("Qwen2ForCausalLM", dict(
        num_hidden_layers=24, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
        intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-6, max_position_embeddings=32768, hidden_act="silu",
        use_sliding_window=False)),
}
# The --tiny shapes: folder name and the fields that replace the full shape's.
TINY = {
    "smollm2-135m": ("smollm2-tiny", dict(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=512)),
    "qwen2.5-0.5b": ("qwen2.5-tiny", dict(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
        intermediate_size=352, vocab_size=512)),
}
DTYPES = {"f32": "float32", "bf16": "bfloat16"}
# safetensors' dtype names, as torch dtype names.
SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    write = commands.add_parser("write", help="write random-weight model folders")
    write.add_argument("out", metavar="OUT", help="folder to write <shape>-<dtype> folders into "
                       "(outside the repository)")
    write.add_argument("--tiny", action="store_true",
                       help="2 layers, hidden 64, vocab 512: for testing the script")
    write.add_argument("--shapes", type=lambda s: s.split(","), default=list(SHAPES),
                       help=f"comma-separated, of {', '.join(SHAPES)} (default: both)")
    write.add_argument("--dtypes", type=lambda s: s.split(","), default=list(DTYPES),
                       help="comma-separated, of f32, bf16 (default: both)")
    write.add_argument("--seed", type=int, default=42, help="torch.manual_seed before each model")

    timing = commands.add_parser("time", help="time one folder written by `write`")
    timing.add_argument("folder", metavar="FOLDER")
    timing.add_argument("--threads", type=int, default=2,
                        help="torch.set_num_threads (default 2; give the Rust side the same)")
    timing.add_argument("--repeats", type=int, default=5,
                        help="timed runs per measurement, after one warm-up")
    timing.add_argument("--prefill-len", type=int, default=512, help="prompt tokens of prefill")
    timing.add_argument("--contexts", type=int_list, default=[128, 1024],
                        help="comma-separated decode contexts (default 128,1024)")
    timing.add_argument("--decode-tokens", type=int, default=16,
                        help="single-token forwards per decode run")
    timing.add_argument("--logits", choices=["all", "last"], default="all",
                        help="prefill logits of every position (default) or the last only")
    timing.add_argument("--seed", type=int, default=42, help="seed of the prompts and tokens")

    args = parser.parse_args()
    if args.command == "write":
        for name in args.shapes:
            if name not in SHAPES:
                parser.error(f"unknown shape {name!r}: choose from {', '.join(SHAPES)}")
        for name in args.dtypes:
            if name not in DTYPES:
                parser.error(f"unknown dtype {name!r}: choose from {', '.join(DTYPES)}")
        out = os.path.realpath(args.out)
        if out == REPO or out.startswith(REPO + os.sep):
            parser.error(f"{args.out} is inside the repository {REPO}: write the folders "
                         "elsewhere, e.g. /tmp/hf-llama")
    else:
        if args.repeats < 1 or args.decode_tokens < 1 or args.prefill_len < 1:
            parser.error("--repeats, --decode-tokens and --prefill-len must be at least 1")
        if any(c < 1 for c in args.contexts):
            parser.error("--contexts must be at least 1")
    return args


def import_peers():
    try:
        import torch
        import transformers
    except ImportError:
        sys.exit("PyTorch and transformers are not installed: "
                 "`pip install torch transformers safetensors`")
    return torch, transformers


def write(args):
    torch, transformers = import_peers()
    for name in args.shapes:
        architecture, fields = SHAPES[name]
        folder_name = name
        if args.tiny:
            folder_name, tiny_fields = TINY[name]
            fields = {**fields, **tiny_fields}
        config_class = getattr(transformers, architecture.replace("ForCausalLM", "Config"))
        model_class = getattr(transformers, architecture)
        config = config_class(**fields)
        torch.manual_seed(args.seed)
        model = model_class(config).eval()
        params = sum(p.numel() for p in model.parameters())
        # f32 first: the bf16 folder holds the same weights, rounded.
        for dtype_name in sorted(args.dtypes, key=lambda d: d != "f32"):
            model = model.to(getattr(torch, DTYPES[dtype_name]))
            folder = os.path.join(args.out, f"{folder_name}-{dtype_name}")
            model.save_pretrained(folder)
            print(f"wrote {folder} ({architecture}, {params / 1e6:.1f}M parameters, "
                  f"{weights_bytes(folder) / 2**20:.1f} MiB)", file=sys.stderr)
        del model


def weights_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.endswith(".safetensors"))


def folder_dtype(folder):
    """The torch dtype name of the folder's weights, read from the safetensors headers."""
    found = set()
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        found.update(v["dtype"] for k, v in header.items() if k != "__metadata__")
    if not found:
        sys.exit(f"{folder} holds no *.safetensors weights")
    if len(found) != 1 or next(iter(found)) not in SAFETENSORS_DTYPES:
        sys.exit(f"{folder}: expected one weight dtype of {', '.join(SAFETENSORS_DTYPES)}, "
                 f"found {', '.join(sorted(found))}")
    return SAFETENSORS_DTYPES[found.pop()]


def max_rss_bytes():
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def time_folder(args):
    torch, transformers = import_peers()
    torch.set_num_threads(args.threads)
    folder = os.path.abspath(args.folder)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    architecture = config["architectures"][0]
    vocab = config["vocab_size"]
    dtype_name = folder_dtype(folder)
    dtype = getattr(torch, dtype_name)
    model_class = getattr(transformers, architecture)  # imports the modeling code now
    cpu, cpu_features = machine()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, {architecture} {dtype_name} from {folder}",
          file=sys.stderr)

    def line(what, context, tokens, times, **extra):
        median = statistics.median(times)
        print(json.dumps({
            "peer": "transformers", "torch": torch.__version__,
            "transformers": transformers.__version__,
            "folder": folder, "model": architecture, "dtype": dtype_name,
            "threads": torch.get_num_threads(), "what": what, "context": context,
            "tokens": tokens, "median_ms": median, "min_ms": min(times), "samples": times,
            "tokens_per_s": tokens / (median / 1e3) if tokens else None,
            "cpu": cpu, "cpu_features": cpu_features, **extra,
        }), flush=True)

    rss_before = max_rss_bytes()
    clock = time.perf_counter()
    model = model_class.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    load_s = time.perf_counter() - clock
    model.eval()
    peak_rss, weights = max_rss_bytes(), weights_bytes(folder)
    assert next(model.parameters()).dtype == dtype, next(model.parameters()).dtype
    line("load", None, None, [load_s * 1e3], load_s=load_s, peak_rss_bytes=peak_rss,
         rss_before_load_bytes=rss_before, weights_bytes=weights,
         peak_rss_over_weights=peak_rss / weights)

    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, vocab, (1, args.prefill_len), generator=generator)
    contexts = {c: torch.randint(0, vocab, (1, c), generator=generator) for c in args.contexts}
    new_tokens = torch.randint(0, vocab, (args.decode_tokens, 1, 1), generator=generator)
    keep = {"logits_to_keep": 1} if args.logits == "last" else {}

    def timed(step, per):
        step()  # warm-up
        times = []
        for _ in range(args.repeats):
            clock = time.perf_counter()
            step()
            times.append((time.perf_counter() - clock) * 1e3 / per)
        return times

    # transformers 5.24 renamed `past_key_values` (argument and output field) to `cache`.
    cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"

    with torch.inference_mode():
        def prefill():
            out = model(prompt, use_cache=True, **keep)
            assert getattr(out, cache_name).get_seq_length() == args.prefill_len
            return out

        times = timed(prefill, 1)
        line("prefill", 0, args.prefill_len, times, logits=args.logits)
        print(f"prefill {args.prefill_len}: {statistics.median(times):.1f} ms", file=sys.stderr)

        for context, context_ids in contexts.items():
            cache = getattr(model(context_ids, use_cache=True, logits_to_keep=1), cache_name)

            def decode():
                # Back to the context: a negative count removes that many tokens.
                extra = cache.get_seq_length() - context
                if extra:
                    cache.crop(-extra)
                assert cache.get_seq_length() == context, cache.get_seq_length()
                for token in new_tokens:
                    model(token, use_cache=True, **{cache_name: cache})
                assert cache.get_seq_length() == context + args.decode_tokens

            times = timed(decode, args.decode_tokens)
            line("decode", context, 1, times, decode_tokens=args.decode_tokens)
            print(f"decode at {context}: {statistics.median(times):.2f} ms/token",
                  file=sys.stderr)
            del cache


def main():
    args = parse_args()
    if args.command == "write":
        write(args)
    else:
        time_folder(args)


if __name__ == "__main__":
    main()
