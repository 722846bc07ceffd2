//! `hf/<model>/`: Hugging Face checkpoints (`config.json`, `model.safetensors`) with
//! transformers' outputs (`reference.json`), loaded through `attn_model::hf` and run as a
//! whole model; the folder's `model_type` says which.

use std::path::Path;

use anyhow::{Context, Result, bail};
use attn_model::hf::{Bert, Gpt2};
use attn_model::{GenerateConfig, Prompt};
use attn_reference::hf::TOLERANCE;
use attn_reference::{BertReference, Closeness, Gpt2Reference, read};
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
            other => bail!(
                "{}: model_type {other:?} is neither bert nor gpt2",
                dir.display()
            ),
        }
    }
    Ok(reports)
}
