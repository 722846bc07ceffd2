#!/usr/bin/env python3
# /root/peers/bin/python crates/attn-model/tests/data/hf/make_tokenizer.py crates/attn-model/tests/data/hf/gpt2_tiny
"""Writes tokenizer.json for the gpt2_tiny folder (97 ids: the 95 printable ASCII characters,
<unk> and <|endoftext|> = 96, the config's eos) and tokenizer_reference.json: a text encoded by
Hugging Face tokenizers, greedily continued by transformers' GPT2LMHeadModel.generate (cache on),
and decoded."""
import json, sys, torch
from tokenizers import Tokenizer, models, decoders
from transformers import GPT2LMHeadModel
folder = sys.argv[1]
vocab = {chr(c): c - 32 for c in range(32, 127)}
vocab["<unk>"] = 95
vocab["<|endoftext|>"] = 96
tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
tok.decoder = decoders.Fuse()
tok.save(f"{folder}/tokenizer.json")
tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
text = "Attention is all you need"
ids = tok.encode(text).ids
model = GPT2LMHeadModel.from_pretrained(folder).eval()
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=12, use_cache=True, pad_token_id=0, eos_token_id=None)
new = out[0, len(ids):].tolist()
ref = {"source": "tokenizers %s char-level BPE; transformers GPT2LMHeadModel.generate, greedy, cache on" % __import__("tokenizers").__version__,
       "text": text, "ids": ids, "new_ids": new, "new_text": tok.decode(new)}
json.dump(ref, open(f"{folder}/tokenizer_reference.json", "w"), indent=1)
print(ref)
