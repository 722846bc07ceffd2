//! `hf/<model>/`: Hugging Face checkpoints (`config.json`, `model.safetensors`) with
//! transformers' outputs (`reference.json`), loaded through `attn_model::hf` and run as a
//! whole model; the folder's `model_type` says which.

use std::path::Path;

use anyhow::{Context, Result, bail};
use attn_model::hf::{Bert, CausalLm, GenerationDefaults, Gpt2};
use attn_model::{GenerateConfig, Prompt};
use attn_reference::hf::TOLERANCE;
use attn_reference::{BertReference, CausalLmReference, Closeness, Gpt2Reference, read};
use burn::tensor::Device;

use super::CaseReport;

/// Whether `dir` is a model folder this checker runs.
pub(super) fn is_model_folder(dir: &Path) -> bool {
    dir.join("config.json").is_file() && dir.join(attn_reference::hf::FILE).is_file()
}

/// Runs the model folder `dir` on every device.
pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    #[derive(serde::Deserialize)]
    struct ModelType {
        model_type: String,
    }
    let ModelType { model_type } = read(&dir.join("config.json"))?;
    let file = format!("{}/{}", dir.display(), attn_reference::hf::FILE);
    let mut reports = Vec::new();
    for (backend, device) in devices {
        match model_type.as_str() {
            "bert" => {
                let reference = BertReference::from_folder(dir)?;
                let bert = Bert::from_pretrained(dir, device)?;
                let out = bert.try_forward(
                    reference.input_ids.try_int_tensor(device)?,
                    Some(reference.token_type_ids.try_int_tensor(device)?),
                    Some(reference.attention_mask.try_int_tensor(device)?),
                )?;
                let mut hidden = Closeness::new(TOLERANCE);
                hidden.tensor(out.last_hidden_state, &reference.last_hidden_state);
                reports.push(CaseReport::new(
                    &file,
                    "last_hidden_state",
                    backend,
                    "module",
                    &hidden,
                ));
                let pooled = out.pooler_output.context("the checkpoint has no pooler")?;
                let mut c = Closeness::new(TOLERANCE);
                c.tensor(pooled, &reference.pooler_output);
                reports.push(CaseReport::new(
                    &file,
                    "pooler_output",
                    backend,
                    "module",
                    &c,
                ));
            }
            "gpt2" => {
                let reference = Gpt2Reference::from_folder(dir)?;
                let gpt2 = Gpt2::from_pretrained(dir, device)?;
                let logits = gpt2.try_forward(
                    reference.batch_ids.try_int_tensor(device)?,
                    Some(reference.batch_attention_mask.try_int_tensor(device)?),
                )?;
                let mut c = Closeness::new(TOLERANCE);
                c.tensor(logits, &reference.batch_logits);
                reports.push(CaseReport::new(
                    &file,
                    "batch_logits",
                    backend,
                    "module",
                    &c,
                ));
                let expected = reference.new_tokens();
                let config = GenerateConfig::new(expected.len()).with_keep_logits(true);
                let prompt = Prompt::new(reference.prompt_ids.try_int_tensor(device)?);
                let mut steps = Closeness::new(TOLERANCE);
                let mut tokens = Vec::new();
                for (step, want) in gpt2
                    .generate(prompt, config)?
                    .zip(&reference.greedy_step_logits)
                {
                    let step = step?;
                    tokens.extend(step.tokens[0]);
                    let logits = step.logits.context("logits kept")?;
                    steps.tensor(logits.reshape([want.data.len()]), want);
                }
                reports.push(CaseReport::new(
                    &file,
                    "greedy_step_logits",
                    backend,
                    "cache",
                    &steps,
                ));
                let mut ids = Closeness::new(TOLERANCE);
                let got: Vec<f32> = tokens.iter().map(|&t| t as f32).collect();
                let want: Vec<f32> = expected.iter().map(|&t| t as f32).collect();
                ids.values(&got, &want);
                reports.push(CaseReport::new(&file, "greedy_ids", backend, "cache", &ids));
            }
            "llama" | "qwen2" | "qwen3" | "mistral" => {
                reports.extend(check_causal_lm(dir, &file, backend, device)?);
            }
            other => bail!(
                "{}: model_type {other:?} is none of bert, gpt2, llama, qwen2, qwen3, mistral",
                dir.display()
            ),
        }
    }
    Ok(reports)
}

/// A Llama-family folder: the left-padded batch's logits at its real positions, greedy
/// generation (every step's logits and the ids), and batched greedy generation with left
/// padding (transformers' `min_new_tokens` holding off the end-of-text ids).
fn check_causal_lm(
    dir: &Path,
    file: &str,
    backend: &str,
    device: &Device,
) -> Result<Vec<CaseReport>> {
    let reference = CausalLmReference::from_folder(dir)?;
    let lm = CausalLm::from_pretrained(dir, device)?;
    let mut reports = Vec::new();
    let logits = lm.try_forward(
        reference.batch_ids.try_int_tensor(device)?,
        Some(reference.batch_attention_mask.try_int_tensor(device)?),
    )?;
    let [batch, seq_len, vocab] = logits.dims();
    let actual = logits
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("logits read back: {e:?}"))?;
    let mask = &reference.batch_attention_mask.data;
    let mut c = Closeness::new(TOLERANCE);
    for at in (0..batch * seq_len).filter(|&i| mask[i] != 0.0) {
        let row = at * vocab..(at + 1) * vocab;
        c.values(&actual[row.clone()], &reference.batch_logits.data[row]);
    }
    reports.push(CaseReport::new(file, "batch_logits", backend, "module", &c));

    let expected = reference.new_tokens();
    let config = GenerateConfig::new(expected.len()).with_keep_logits(true);
    let prompt = Prompt::new(reference.prompt_ids.try_int_tensor(device)?);
    let mut steps = Closeness::new(TOLERANCE);
    let mut tokens = Vec::new();
    for (step, want) in lm
        .generate(prompt, config)?
        .zip(&reference.greedy_step_logits)
    {
        let step = step?;
        tokens.extend(step.tokens[0]);
        let logits = step.logits.context("logits kept")?;
        steps.tensor(logits.reshape([want.data.len()]), want);
    }
    reports.push(CaseReport::new(
        file,
        "greedy_step_logits",
        backend,
        "cache",
        &steps,
    ));
    let as_f32 = |ids: &[i64]| ids.iter().map(|&t| t as f32).collect::<Vec<f32>>();
    let mut ids = Closeness::new(TOLERANCE);
    ids.values(&as_f32(&tokens), &as_f32(&expected));
    reports.push(CaseReport::new(file, "greedy_ids", backend, "cache", &ids));

    let total = reference.batch_greedy_ids.shape[1];
    let left_pad: Vec<usize> = mask
        .chunks_exact(seq_len)
        .map(|row| row.iter().take_while(|&&m| m == 0.0).count())
        .collect();
    let eos = GenerationDefaults::from_folder(dir)?.eos_token_ids;
    let config = GenerateConfig::new(total - seq_len)
        .with_stop_tokens(eos)
        .with_min_new_tokens(total - seq_len);
    let prompt = Prompt::left_padded(reference.batch_ids.try_int_tensor(device)?, left_pad);
    let new = lm.generate(prompt, config)?.tokens()?;
    let mut batched = Closeness::new(TOLERANCE);
    for (b, tokens) in new.iter().enumerate() {
        let want = &reference.batch_greedy_ids.data[b * total + seq_len..(b + 1) * total];
        batched.values(&as_f32(tokens), want);
    }
    reports.push(CaseReport::new(
        file,
        "batch_greedy_ids",
        backend,
        "cache",
        &batched,
    ));
    Ok(reports)
}
