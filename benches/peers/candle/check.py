#!/usr/bin/env python3
"""Compares `candle-peer check FOLDER` with transformers on the same folder.

    candle-peer check /tmp/hf-llama-tiny/smollm2-tiny-f32 > candle.json
    /root/peers/bin/python benches/peers/candle/check.py candle.json

candle's JSON holds a seeded prompt, the greedy tokens candle took (the first from the prompt's
prefill, each next one from a single-token step through candle's cache) and the logits each
came from. transformers runs the prompt followed by those tokens (all but the last) in one
forward, at the folder's dtype with `attn_implementation="sdpa"`, and its logits at the same
positions are compared with candle's: the largest absolute difference, that difference over
the largest absolute logit, and at how many positions the two argmaxes agree. One JSON line on
stdout.
"""

import json
import sys

import torch
import transformers

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main():
    with open(sys.argv[1]) as f:
        candle = json.load(f)
    dtype = DTYPES[candle["dtype"]]
    config = transformers.AutoConfig.from_pretrained(candle["folder"])
    model_class = getattr(transformers, config.architectures[0])
    model = model_class.from_pretrained(candle["folder"], dtype=dtype,
                                        attn_implementation="sdpa").eval()
    prompt, tokens = candle["prompt"], candle["tokens"]
    ids = torch.tensor([prompt + tokens[:-1]])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1:].float()
    theirs = torch.tensor(candle["logits"])
    assert logits.shape == theirs.shape, (logits.shape, theirs.shape)
    diff = (logits - theirs).abs().max().item()
    scale = logits.abs().max().item()
    agree = (logits.argmax(-1) == theirs.argmax(-1)).sum().item()
    print(json.dumps({
        "folder": candle["folder"], "model": candle["model"], "dtype": candle["dtype"],
        "prompt_len": len(prompt), "positions": len(tokens),
        "max_abs_diff": diff, "max_abs_logit": scale, "relative": diff / scale,
        "argmax_agree": agree, "transformers": transformers.__version__,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
