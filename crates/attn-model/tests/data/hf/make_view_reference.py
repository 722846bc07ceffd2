#!/usr/bin/env python3
# /root/peers/bin/python crates/attn-model/tests/data/hf/make_view_reference.py [crates/attn-model/tests/data/hf]
"""Writes view_reference.json, the attention weights Hugging Face transformers gives for a short
text, into each model folder here that has a tokenizer.json (gpt2_tiny, bert_tiny, llama_tiny,
and mistral_tiny, whose tokenizer.json is a copy of gpt2_tiny's 97 ids, its vocab_size; qwen2_tiny
and qwen3_tiny are taken too once they have one, else skipped).

First it writes bert_tiny/tokenizer.json (tokenizers' WordPiece, 77 ids within the config's
vocab_size 103: [PAD]=0 (the config's pad_token_id), [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then
a-z, 0-9, 10 punctuation marks and ##a-##z; BertNormalizer (lowercase), BertPreTokenizer,
"[CLS] $A [SEP]" as BERT's post-processor, WordPiece decoder).

Then, per folder: the text is encoded by tokenizers.Tokenizer.from_file(tokenizer.json)
.encode(text, add_special_tokens=X) (X False for gpt2, True, transformers' default, for the
others); the model (BertModel for bert, AutoModelForCausalLM for the others) is loaded in float32
with attn_implementation="eager", in eval mode, and run once under no_grad on input_ids [1, n]
with an all-ones attention_mask and output_attentions=True. view_reference.json holds
{source, text, add_special_tokens, ids, tokens, layers, heads,
 attentions: [layer][head][query][key] rounded to 6 decimals}.
Checked before writing: each row sums to 1 within 1e-5, and a causal model's weights above the
diagonal are 0. Deterministic (one CPU thread, no randomness): a rerun writes the same bytes."""
import json, os, sys
import torch, transformers, tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, decoders
from transformers import AutoModelForCausalLM, BertModel

HF = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
TEXT = "The cat sat on the mat."
# (folder, add_special_tokens, causal)
FOLDERS = [("gpt2_tiny", False, True), ("bert_tiny", True, False), ("llama_tiny", True, True),
           ("qwen2_tiny", True, True), ("qwen3_tiny", True, True), ("mistral_tiny", True, True)]
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def write_bert_tokenizer(folder):
    cfg = json.load(open(f"{folder}/config.json"))
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    words += [chr(c) for c in range(ord("0"), ord("9") + 1)]
    words += list(".,!?'-:;()")
    words += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {w: i for i, w in enumerate(words)}
    assert len(vocab) == len(words) <= cfg["vocab_size"], (len(vocab), cfg["vocab_size"])
    assert vocab["[PAD]"] == cfg["pad_token_id"]
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(words[:5])
    tok.save(f"{folder}/tokenizer.json")
    assert Tokenizer.from_file(f"{folder}/tokenizer.json").get_vocab_size() == len(vocab)
    return len(vocab)


def reference(name, add_special, causal):
    folder = f"{HF}/{name}"
    cfg = json.load(open(f"{folder}/config.json"))
    tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
    enc = tok.encode(TEXT, add_special_tokens=add_special)
    ids, n = enc.ids, len(enc.ids)
    max_pos = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    assert n <= max_pos, f"{name}: {n} tokens > {max_pos} positions; use a shorter text"
    assert max(ids) < cfg["vocab_size"]
    cls = BertModel if cfg["model_type"] == "bert" else AutoModelForCausalLM
    model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, n, dtype=torch.long),
                    output_attentions=True)
    att = torch.stack([a[0] for a in out.attentions]).double()  # [layers, heads, n, n]
    layers, heads = att.shape[0], att.shape[1]
    assert att.shape == (layers, heads, n, n), att.shape
    assert att.dtype == torch.float64 and out.attentions[0].dtype == torch.float32
    dev = (att.sum(-1) - 1).abs().max().item()
    assert dev < 1e-5, f"{name}: a row sums to 1 +- {dev}"
    if causal:
        above = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        assert (att[..., above] == 0).all(), f"{name}: weight above the diagonal"
    rounded = [[[[round(x, 6) + 0.0 for x in row] for row in head] for head in layer] for layer in att.tolist()]
    source = (f"transformers {transformers.__version__}, torch {torch.__version__}, tokenizers "
              f"{tokenizers.__version__}: Tokenizer.from_file(tokenizer.json).encode(text, "
              f"add_special_tokens={add_special}); {cls.__name__}.from_pretrained(folder, dtype=float32, "
              f"attn_implementation='eager').eval(), no_grad, input_ids [1, {n}], attention_mask ones, "
              f"output_attentions=True")
    head = {"source": source, "text": TEXT, "add_special_tokens": add_special, "ids": ids,
            "tokens": enc.tokens, "layers": layers, "heads": heads}
    # One line per attention row: readable, diffable, small.
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items()]
    lines.append(' "attentions": [')
    for li, layer in enumerate(rounded):
        lines.append("  [")
        for hi, h in enumerate(layer):
            lines.append("   [")
            for qi, row in enumerate(h):
                lines.append("    " + json.dumps(row, separators=(",", ":")) + ("," if qi + 1 < n else ""))
            lines.append("   ]" + ("," if hi + 1 < heads else ""))
        lines.append("  ]" + ("," if li + 1 < layers else ""))
    lines += [" ]", "}"]
    path = f"{folder}/view_reference.json"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    back = json.load(open(path, encoding="utf-8"))
    assert back["attentions"] == rounded and back["ids"] == ids
    rdev = max(abs(sum(r) - 1) for l in rounded for h in l for r in h)
    print(f"{name}: {n} tokens {enc.tokens}, {layers} layers x {heads} heads, row sums 1 +- {dev:.1e} "
          f"(rounded {rdev:.1e}), {os.path.getsize(path)} bytes -> {path}")


print(f"bert_tiny/tokenizer.json: {write_bert_tokenizer(f'{HF}/bert_tiny')} ids")
for name, add_special, causal in FOLDERS:
    if not os.path.exists(f"{HF}/{name}/tokenizer.json"):
        print(f"{name}: no tokenizer.json, skipped")
        continue
    reference(name, add_special, causal)
