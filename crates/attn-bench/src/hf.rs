//! A Hugging Face GPT-2 folder, timed as transformers times it in `benches/peers/hf_gpt2.py`:
//! the prompt processed once (`hf_gpt2_prefill`), then one new token at a time against the
//! key/value cache (`hf_gpt2_decode`).
//!
//! ```text
//! /root/peers/bin/python benches/peers/hf_gpt2.py --write /tmp/gpt2-small
//! cargo run --release -p attn-bench -- hf-gpt2 /tmp/gpt2-small --json
//! ```
//!
//! The folder is loaded with [`attn_model::hf::Gpt2::from_pretrained`]; the lines have the
//! bench's format, `impl` `attn`, `seq_len` the prompt's length, batch 1.

use std::path::Path;

use anyhow::{Context, Result, bail};
use attn_model::hf::{Gpt2, Gpt2Config, read_config};
use attn_model::{KvCache, TokenDecoderInput};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cases::{Pass, SEED, Step, finish};
use crate::record::Record;
use crate::timing::{Budget, measure};

/// Tokens the decode case adds to the prompt's cache before it processes the prompt again.
const HEADROOM: usize = 256;

/// The prefill and decode lines of the GPT-2 folder at `folder` on `device`, for a prompt of
/// `prompt_len` seeded token ids.
///
/// # Errors
/// When the folder cannot be loaded or the prompt does not fit its positions; a failure of a
/// run becomes its line's `error`.
pub fn gpt2_records(
    folder: &Path,
    device: &Device,
    device_name: &str,
    prompt_len: usize,
    budget: &Budget,
) -> Result<Vec<Record>> {
    let config: Gpt2Config = read_config(folder)?;
    let (n_heads, d_head) = (config.n_head, config.n_embd / config.n_head.max(1));
    if prompt_len == 0 {
        bail!("a prompt needs at least one token, got 0");
    }
    let capacity = prompt_len.saturating_add(HEADROOM);
    if capacity > config.n_positions {
        bail!(
            "a prompt of {prompt_len} tokens and {HEADROOM} new ones pass the {} positions of {}",
            config.n_positions,
            folder.display()
        );
    }
    let model = Gpt2::from_pretrained(folder, device)
        .with_context(|| format!("loading {}", folder.display()))?
        .into_model();
    let vocab = model.vocab();
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut ids = |n: usize| {
        let ids: Vec<i64> = (0..n).map(|_| rng.random_range(0..vocab) as i64).collect();
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), device) // [batch, n]
    };
    let prompt = ids(prompt_len);
    let token = ids(1);
    let prefill = {
        let (model, prompt) = (model.clone(), prompt.clone());
        move || -> Result<(KvCache, Tensor<3>)> {
            let mut cache = model.new_cache(1, capacity, None)?;
            let logits = model
                .try_forward(TokenDecoderInput::new(prompt.clone()).with_cache(&mut cache))?
                .logits; // [batch, prompt_len, vocab]
            Ok((cache, logits))
        }
    };

    let prefill_step: Step = {
        let (prefill, device) = (prefill.clone(), device.clone());
        Box::new(move || {
            let (_, logits) = prefill()?;
            finish(&device, logits)
        })
    };
    let decode_step: Step = {
        let device = device.clone();
        let mut cache: Option<KvCache> = None;
        Box::new(move || {
            let mut current = match cache.take() {
                Some(c) if c.filled() < capacity => c,
                _ => prefill()?.0,
            };
            let logits = model
                .try_forward(TokenDecoderInput::new(token.clone()).with_cache(&mut current))?
                .logits; // [batch, 1, vocab]
            cache = Some(current);
            finish(&device, logits.argmax(2).float())
        })
    };

    let mut records = Vec::new();
    for (name, mut step) in [
        ("hf_gpt2_prefill", prefill_step),
        ("hf_gpt2_decode", decode_step),
    ] {
        let record = Record::named(
            "attn",
            name,
            Pass::Forward,
            device_name,
            [1, n_heads, prompt_len, d_head],
        );
        records.push(match measure(&mut step, budget) {
            Ok(times) => record.with_times_only(&times),
            Err(e) => Record {
                error: Some(format!("{e:#}")),
                ..record
            },
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::QUICK;

    #[test]
    fn a_prompt_of_no_token_or_past_every_position_is_an_error_not_a_panic() {
        let folder =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf/gpt2_tiny");
        let device = Device::flex();
        let empty = gpt2_records(&folder, &device, "flex", 0, &QUICK).expect_err("0 tokens");
        assert!(empty.to_string().contains("at least one token"), "{empty}");
        let huge =
            gpt2_records(&folder, &device, "flex", usize::MAX, &QUICK).expect_err("usize::MAX");
        let text = huge.to_string();
        assert!(
            text.contains(&usize::MAX.to_string()) && text.contains("48 positions"),
            "{text}"
        );
    }
}
