//! Hugging Face checkpoints against transformers 5: a `BertModel` and a `GPT2LMHeadModel`
//! written by `save_pretrained`, loaded into this crate's modules and run on every
//! compiled-in backend; broken and half-precision checkpoints written here from them.
//!
//! `ATTN_TEST_DEVICES=flex,ndarray cargo test -p attn-model --test hf`

use std::path::{Path, PathBuf};

use attn_model::hf::{
    Bert, BertConfig, CausalLm, ChatTemplate, GenerationDefaults, Gpt2, Gpt2Config,
    SHARD_INDEX_FILE, read_config, read_llama_weights, read_weights,
};
use attn_model::ops::linear_serves;
use attn_model::{ConfigError, GenerateConfig, ModelError, Prompt, TokenDecoderInput};
use attn_testing::reference::hf::TOLERANCE;
use attn_testing::reference::{BertReference, CausalLmReference, Gpt2Reference};
use attn_testing::{Closeness, RefTensor, Tolerance, assert_close_slices, for_each_device, to_vec};
use burn::tensor::{Device, Int, Tensor};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn folder(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hf")
        .join(model)
}

fn ids(t: &RefTensor, device: &Device) -> Tensor<2, Int> {
    t.int_tensor(device)
}

/// Checks `actual` against `expected`, prints the largest difference, and returns it.
#[track_caller]
fn check<const D: usize>(
    actual: Tensor<D>,
    expected: &RefTensor,
    tolerance: Tolerance,
    what: &str,
) -> f32 {
    let mut closeness = Closeness::new(tolerance);
    closeness.tensor(actual, expected);
    eprintln!("{what}: {closeness}");
    assert!(closeness.is_within(), "{what}: {closeness}");
    closeness.max_abs_err()
}

fn bert_outputs(bert: &Bert, reference: &BertReference, device: &Device) -> (Tensor<3>, Tensor<2>) {
    let out = bert
        .try_forward(
            ids(&reference.input_ids, device),
            Some(ids(&reference.token_type_ids, device)),
            Some(ids(&reference.attention_mask, device)),
        )
        .expect("inputs fit");
    (
        out.last_hidden_state,
        out.pooler_output.expect("the checkpoint has a pooler"),
    )
}

#[test]
fn bert_tiny_matches_transformers_hidden_states_and_pooler_output() {
    let reference = BertReference::from_folder(&folder("bert_tiny")).expect("reference.json");
    for_each_device(|d| {
        let bert = Bert::from_pretrained(folder("bert_tiny"), &d.device).expect("loads");
        let (hidden, pooled) = bert_outputs(&bert, &reference, &d.device);
        check(
            hidden,
            &reference.last_hidden_state,
            TOLERANCE,
            "last_hidden_state",
        );
        check(pooled, &reference.pooler_output, TOLERANCE, "pooler_output");
    });
}

#[test]
fn gpt2_tiny_matches_transformers_logits_of_a_right_padded_batch() {
    let reference = Gpt2Reference::from_folder(&folder("gpt2_tiny")).expect("reference.json");
    for_each_device(|d| {
        let gpt2 = Gpt2::from_pretrained(folder("gpt2_tiny"), &d.device).expect("loads");
        let logits = gpt2
            .try_forward(
                ids(&reference.batch_ids, &d.device),
                Some(ids(&reference.batch_attention_mask, &d.device)),
            )
            .expect("inputs fit");
        check(logits, &reference.batch_logits, TOLERANCE, "batch_logits");
    });
}

#[test]
fn gpt2_tiny_greedy_generation_through_the_cache_matches_transformers() {
    let reference = Gpt2Reference::from_folder(&folder("gpt2_tiny")).expect("reference.json");
    let expected = reference.new_tokens();
    assert_eq!(expected.len(), reference.greedy_step_logits.len());
    for_each_device(|d| {
        let gpt2 = Gpt2::from_pretrained(folder("gpt2_tiny"), &d.device).expect("loads");
        let prompt = Prompt::new(ids(&reference.prompt_ids, &d.device));
        let config = GenerateConfig::new(expected.len()).with_keep_logits(true);
        let mut tokens = Vec::new();
        let mut worst = 0.0f32;
        for (i, step) in gpt2
            .generate(prompt, config)
            .expect("prompt fits")
            .enumerate()
        {
            let step = step.expect("step runs");
            tokens.push(step.tokens[0].expect("no stop token"));
            let logits = step
                .logits
                .expect("kept")
                .reshape([reference.greedy_step_logits[i].data.len()]);
            let err = check::<1>(
                logits,
                &reference.greedy_step_logits[i],
                TOLERANCE,
                &format!("greedy_step_logits[{i}]"),
            );
            worst = worst.max(err);
        }
        eprintln!("greedy_step_logits: largest difference {worst:e}");
        assert_eq!(tokens, expected, "greedy_ids after the prompt");
    });
}

/// The Llama-family folders, one feature each (see `tests/data/README.md`).
const CAUSAL_LMS: [&str; 4] = ["llama_tiny", "qwen2_tiny", "qwen3_tiny", "mistral_tiny"];

/// The real (unpadded) positions of a left-padded batch's logits, `[batch, seq_len, vocab]`,
/// checked against the reference row by row.
fn check_real_positions(logits: Tensor<3>, reference: &CausalLmReference, what: &str) -> f32 {
    check_real_positions_within(logits, reference, what, TOLERANCE)
}

/// [`check_real_positions`] within `tolerance`.
fn check_real_positions_within(
    logits: Tensor<3>,
    reference: &CausalLmReference,
    what: &str,
    tolerance: Tolerance,
) -> f32 {
    let [batch, seq_len, vocab] = logits.dims();
    let actual = logits
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32");
    let mask = &reference.batch_attention_mask.data;
    let mut closeness = Closeness::new(tolerance);
    let mut real = 0;
    for b in 0..batch {
        for t in 0..seq_len {
            if mask[b * seq_len + t] == 0.0 {
                continue;
            }
            real += 1;
            let at = (b * seq_len + t) * vocab;
            closeness.values(
                &actual[at..at + vocab],
                &reference.batch_logits.data[at..at + vocab],
            );
        }
    }
    eprintln!("{what}: {real} positions, {closeness}");
    assert!(
        real > seq_len,
        "{what}: the batch has real positions in both rows"
    );
    assert!(closeness.is_within(), "{what}: {closeness}");
    closeness.max_abs_err()
}

#[test]
fn llama_family_logits_of_a_left_padded_batch_match_transformers() {
    for model in CAUSAL_LMS {
        let reference = CausalLmReference::from_folder(&folder(model)).expect("reference.json");
        for_each_device(|d| {
            let lm = CausalLm::from_pretrained(folder(model), &d.device).expect("loads");
            let logits = lm
                .try_forward(
                    ids(&reference.batch_ids, &d.device),
                    Some(ids(&reference.batch_attention_mask, &d.device)),
                )
                .expect("inputs fit");
            check_real_positions(logits, &reference, &format!("{model} batch_logits"));
        });
    }
}

#[test]
fn llama_family_greedy_generation_through_the_cache_matches_transformers() {
    for model in CAUSAL_LMS {
        let reference = CausalLmReference::from_folder(&folder(model)).expect("reference.json");
        let expected = reference.new_tokens();
        assert_eq!(expected.len(), reference.greedy_step_logits.len());
        for_each_device(|d| {
            let lm = CausalLm::from_pretrained(folder(model), &d.device).expect("loads");
            let prompt = Prompt::new(ids(&reference.prompt_ids, &d.device));
            let config = GenerateConfig::new(expected.len()).with_keep_logits(true);
            let mut tokens = Vec::new();
            let mut worst = 0.0f32;
            for (i, step) in lm
                .generate(prompt, config)
                .expect("prompt fits")
                .enumerate()
            {
                let step = step.expect("step runs");
                tokens.push(step.tokens[0].expect("no stop token"));
                let expected_row = &reference.greedy_step_logits[i];
                let logits = step
                    .logits
                    .expect("kept")
                    .reshape([expected_row.data.len()]);
                let err = check::<1>(
                    logits,
                    expected_row,
                    TOLERANCE,
                    &format!("{model} greedy_step_logits[{i}]"),
                );
                worst = worst.max(err);
            }
            eprintln!("{model} greedy_step_logits: largest difference {worst:e}");
            assert_eq!(tokens, expected, "{model}: greedy_ids after the prompt");
        });
    }
}

#[test]
fn a_truncated_cache_decodes_as_if_the_dropped_tokens_were_never_seen() {
    // Prompt, then two tokens that transformers never saw, truncated away, then the greedy
    // tokens one at a time: every step's logits are transformers' for the greedy sequence.
    let model = CAUSAL_LMS[0];
    let reference = CausalLmReference::from_folder(&folder(model)).expect("reference.json");
    let expected = reference.new_tokens();
    for_each_device(|d| {
        let lm = CausalLm::from_pretrained(folder(model), &d.device).expect("loads");
        let decoder = lm.model();
        let prompt = ids(&reference.prompt_ids, &d.device);
        let [_, prompt_len] = prompt.dims();
        let token = |id: i64| Tensor::<2, Int>::from_data([[id]], &d.device);
        let mut cache = decoder
            .new_cache(1, prompt_len + expected.len() + 2, None)
            .expect("valid");
        decoder
            .try_forward(TokenDecoderInput::new(prompt).with_cache(&mut cache))
            .expect("prompt runs");
        let detour = Tensor::<2, Int>::from_data([[expected[1], expected[0]]], &d.device);
        decoder
            .try_forward(TokenDecoderInput::new(detour).with_cache(&mut cache))
            .expect("detour runs");
        assert_eq!(cache.filled(), prompt_len + 2);

        let past = cache
            .truncate(prompt_len + 3)
            .expect_err("past what is written");
        assert!(
            matches!(past, ModelError::CacheTruncate { len, filled, .. }
                if len == prompt_len + 3 && filled == prompt_len + 2),
            "{past}"
        );
        cache.truncate(prompt_len).expect("inside what is written");
        assert_eq!(cache.filled(), prompt_len);

        for (i, &id) in expected.iter().enumerate().take(expected.len() - 1) {
            let logits = decoder
                .try_forward(TokenDecoderInput::new(token(id)).with_cache(&mut cache))
                .expect("step runs")
                .logits;
            let expected_row = &reference.greedy_step_logits[i + 1];
            check::<1>(
                logits.reshape([expected_row.data.len()]),
                expected_row,
                TOLERANCE,
                &format!("{model} after truncation, greedy_step_logits[{}]", i + 1),
            );
        }
    });
}

/// Bytes of a model's parameters as they are held, by type.
#[derive(Default)]
struct HeldBytes {
    bf16: u64,
    f32: u64,
}

impl burn::module::ModuleVisitor for HeldBytes {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
        let tensor = param.val();
        let values = tensor.shape().num_elements() as u64;
        match tensor.dtype() {
            burn::tensor::DType::BF16 => self.bf16 += 2 * values,
            _ => self.f32 += 4 * values,
        }
    }
}

#[test]
fn a_bf16_folder_kept_in_bf16_holds_its_file_size_and_matches_transformers() {
    use burn::module::Module;
    // llama_tiny's weights are stored in bfloat16 and its reference was computed in f32 from
    // those same values: kept in bfloat16, with products that widen them in f32, the logits
    // and the greedy tokens are transformers' within the f32 tolerance. qwen2_tiny (tied
    // head) rounded to bfloat16 gives the logits of the same values widened to f32.
    let file = std::fs::metadata(folder("llama_tiny").join("model.safetensors"))
        .expect("the weights")
        .len();
    let rounded = half_folder("qwen2_tiny", Dtype::BF16);
    for_each_device(|d| {
        let loaded = CausalLm::from_pretrained_as(
            folder("llama_tiny"),
            &d.device,
            burn::tensor::DType::BF16,
        );
        if !d.device.supports_dtype(burn::tensor::DType::BF16) {
            let err = loaded.expect_err("refused");
            assert!(
                matches!(err, ModelError::UnsupportedDtype { .. }),
                "{}: {err}",
                d.name
            );
            return;
        }
        let lm = loaded.expect("loads");
        let mut held = HeldBytes::default();
        lm.model().visit(&mut held);
        // The matrices stay bfloat16; the norms (a few hundred values) are widened.
        assert!(held.f32 < 4096, "{} bytes held in f32", held.f32);
        assert!(
            held.bf16 + held.f32 / 2 <= file && file - (held.bf16 + held.f32 / 2) < 16_384,
            "{} + {} bytes held, a file of {file}",
            held.bf16,
            held.f32
        );
        let reference =
            CausalLmReference::from_folder(&folder("llama_tiny")).expect("reference.json");
        let logits = lm
            .try_forward(
                ids(&reference.batch_ids, &d.device),
                Some(ids(&reference.batch_attention_mask, &d.device)),
            )
            .expect("inputs fit");
        // On a CPU with vdpbf16ps, flex multiplies the batch's 22 rows by a bfloat16 weight
        // with the inputs rounded to bfloat16, as PyTorch does in a bfloat16 model: the logits
        // then carry bfloat16's rounding (8 bits of mantissa). transformers 5.24 itself, run in
        // bfloat16 on this batch, is up to 0.105 from this f32 reference (0.017 on average).
        let rounds_inputs = linear_serves(&d.device) && attn_kernels::half::has_bf16_dot();
        let tolerance = if rounds_inputs {
            Tolerance::new(0.08, 0.0)
        } else {
            TOLERANCE
        };
        check_real_positions_within(
            logits,
            &reference,
            "llama_tiny in bf16: batch_logits",
            tolerance,
        );
        let expected = reference.new_tokens();
        let tokens = lm
            .generate(
                Prompt::new(ids(&reference.prompt_ids, &d.device)),
                GenerateConfig::new(expected.len()),
            )
            .expect("prompt fits")
            .tokens()
            .expect("steps run");
        assert_eq!(tokens[0], expected, "llama_tiny in bf16: greedy_ids");

        // The tied table read in place as the head: the same values widened to f32 by the
        // loader (burn's f32 products, checked against transformers above) give the same
        // logits, a batch at once and one token at a time.
        let qwen = CausalLmReference::from_folder(&folder("qwen2_tiny")).expect("reference.json");
        let widened = CausalLm::from_pretrained(&rounded, &d.device).expect("loads");
        let kept = CausalLm::from_pretrained_as(&rounded, &d.device, burn::tensor::DType::BF16)
            .expect("loads");
        let batch = |lm: &CausalLm| {
            to_vec(
                lm.try_forward(
                    ids(&qwen.batch_ids, &d.device),
                    Some(ids(&qwen.batch_attention_mask, &d.device)),
                )
                .expect("inputs fit"),
            )
        };
        let (atol, rtol) = if rounds_inputs {
            (0.08, 0.0)
        } else {
            (1e-4, 1e-4)
        };
        assert_close_slices(&batch(&kept), &batch(&widened), atol, rtol, "qwen2 batch");
        let steps = |lm: &CausalLm| {
            lm.generate(
                Prompt::new(ids(&qwen.prompt_ids, &d.device)),
                GenerateConfig::new(16).with_keep_logits(true),
            )
            .expect("prompt fits")
            .map(|step| {
                let step = step.expect("step runs");
                (step.tokens[0], to_vec(step.logits.expect("kept")))
            })
            .collect::<Vec<_>>()
        };
        for (i, (k, w)) in steps(&kept).into_iter().zip(steps(&widened)).enumerate() {
            assert_eq!(k.0, w.0, "qwen2 in bf16, token {i}");
            assert_close_slices(&k.1, &w.1, 1e-4, 1e-4, &format!("qwen2 step {i}"));
        }
    });
    std::fs::remove_dir_all(rounded).expect("cleanup");
}

#[test]
fn llama_family_batched_greedy_generation_with_left_padding_matches_transformers() {
    for model in CAUSAL_LMS {
        let reference = CausalLmReference::from_folder(&folder(model)).expect("reference.json");
        let [batch, seq_len] = [reference.batch_ids.shape[0], reference.batch_ids.shape[1]];
        let total = reference.batch_greedy_ids.shape[1];
        let left_pad: Vec<usize> = (0..batch)
            .map(|b| {
                reference.batch_attention_mask.data[b * seq_len..(b + 1) * seq_len]
                    .iter()
                    .take_while(|&&m| m == 0.0)
                    .count()
            })
            .collect();
        let eos = GenerationDefaults::from_folder(&folder(model))
            .expect("generation_config.json")
            .eos_token_ids;
        for_each_device(|d| {
            let lm = CausalLm::from_pretrained(folder(model), &d.device).expect("loads");
            let prompt =
                Prompt::left_padded(ids(&reference.batch_ids, &d.device), left_pad.clone());
            // transformers generated all 12 tokens with min_new_tokens = 12: its end-of-text
            // tokens were unavailable until then.
            let config = GenerateConfig::new(total - seq_len)
                .with_stop_tokens(eos.clone())
                .with_min_new_tokens(total - seq_len);
            let new = lm
                .generate(prompt, config)
                .expect("prompt fits")
                .tokens()
                .expect("steps run");
            for (b, tokens) in new.iter().enumerate() {
                let expected: Vec<i64> = reference.batch_greedy_ids.data
                    [b * total + seq_len..(b + 1) * total]
                    .iter()
                    .map(|&id| id as i64)
                    .collect();
                assert_eq!(tokens, &expected, "{model}: sequence {b}'s greedy tokens");
            }
        });
    }
}

/// A copy of `model`'s folder whose tensors went through `edit` and whose `config.json` went
/// through `config`.
fn edited_folder(
    model: &str,
    case: &str,
    edit: impl Fn(&str, Dtype, &[usize], &[f32]) -> Option<(Dtype, Vec<usize>, Vec<u8>)>,
    config: impl Fn(&mut serde_json::Value),
) -> PathBuf {
    let source = folder(model);
    let dir = std::env::temp_dir().join(format!("attn-hf-{}-{model}-{case}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bytes = std::fs::read(source.join("model.safetensors")).expect("model.safetensors");
    let parsed = SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in parsed.iter() {
        assert_eq!(view.dtype(), Dtype::F32, "{name}");
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        if let Some((dtype, shape, data)) = edit(name, view.dtype(), view.shape(), &values) {
            tensors.push((name.to_string(), dtype, shape, data));
        }
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| {
            (
                name.clone(),
                TensorView::new(*dtype, shape.clone(), data).expect("view"),
            )
        })
        .collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(views, None).expect("serialises"),
    )
    .expect("write");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).expect("config"))
            .expect("json");
    config(&mut json);
    std::fs::write(dir.join("config.json"), json.to_string()).expect("write");
    dir
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn unchanged(
    _: &str,
    dtype: Dtype,
    shape: &[usize],
    values: &[f32],
) -> Option<(Dtype, Vec<usize>, Vec<u8>)> {
    Some((dtype, shape.to_vec(), f32_bytes(values)))
}

#[test]
fn a_wrong_tensor_shape_names_the_tensor_and_both_shapes() {
    let device = Device::flex();
    // One key row short: [32, 32] stored as [31, 32].
    let dir = edited_folder(
        "bert_tiny",
        "shape",
        |name, dtype, shape, values| {
            if name == "encoder.layer.1.attention.self.key.weight" {
                Some((
                    dtype,
                    vec![shape[0] - 1, shape[1]],
                    f32_bytes(&values[shape[1]..]),
                ))
            } else {
                unchanged(name, dtype, shape, values)
            }
        },
        |_| {},
    );
    let err = Bert::from_pretrained(&dir, &device).expect_err("a short key weight");
    assert!(
        matches!(&err, ModelError::TensorShape { name, expected, got }
            if name == "encoder.layer.1.attention.self.key.weight"
                && expected == &[32, 32] && got == &[31, 32]),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "tensor `encoder.layer.1.attention.self.key.weight` has shape [31, 32], but the module \
         needs [32, 32] (PyTorch layout)"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn a_missing_tensor_is_named() {
    let device = Device::flex();
    let dir = edited_folder(
        "gpt2_tiny",
        "missing",
        |name, dtype, shape, values| {
            (name != "transformer.h.1.attn.c_attn.bias")
                .then(|| unchanged(name, dtype, shape, values))?
        },
        |_| {},
    );
    let err = Gpt2::from_pretrained(&dir, &device).expect_err("no c_attn bias");
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "transformer.h.1.attn.c_attn.bias"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn a_config_that_disagrees_with_the_checkpoint_names_the_key_or_tensor() {
    let device = Device::flex();
    // A wider model than the tensors: the first tensor read says which and by how much.
    let dir = edited_folder("gpt2_tiny", "config", unchanged, |json| {
        json["n_embd"] = 48.into();
        json["n_head"] = 4.into();
    });
    let err = Gpt2::from_pretrained(&dir, &device).expect_err("n_embd 48 against 32");
    assert!(
        matches!(&err, ModelError::TensorShape { name, expected, got }
            if name == "transformer.wte.weight" && expected == &[97, 48] && got == &[97, 32]),
        "{err}"
    );
    // Heads that do not divide the width.
    let config: Gpt2Config = {
        let mut c: Gpt2Config = read_config(&folder("gpt2_tiny")).expect("config");
        c.n_head = 5;
        c
    };
    let dict = read_weights(&folder("gpt2_tiny")).expect("weights");
    let err = Gpt2::from_state_dict(&config, &dict, &device).expect_err("32 / 5");
    assert!(
        matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 32,
                n_heads: 5
            }
        ),
        "{err}"
    );
    // A setting this crate does not implement, and a folder of another model.
    let mut config: BertConfig = read_config(&folder("bert_tiny")).expect("config");
    config.hidden_act = "silu".into();
    let dict = read_weights(&folder("bert_tiny")).expect("weights");
    let err = Bert::from_state_dict(&config, &dict, &device).expect_err("silu");
    assert!(
        matches!(&err, ModelError::Config(ConfigError::Unsupported { key: "hidden_act", value, .. }) if value == "\"silu\""),
        "{err}"
    );
    let err = Bert::from_pretrained(folder("gpt2_tiny"), &device).expect_err("a GPT-2 folder");
    assert!(
        err.to_string().contains("missing field `hidden_size`"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

/// The tiny checkpoints with every tensor stored as `dtype`.
fn half_folder(model: &str, dtype: Dtype) -> PathBuf {
    edited_folder(
        model,
        &format!("{dtype:?}"),
        move |_, _, shape, values| {
            let bytes: Vec<u8> = match dtype {
                Dtype::F16 => values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect(),
                Dtype::BF16 => values
                    .iter()
                    .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                    .collect(),
                other => panic!("not a half type: {other:?}"),
            };
            Some((dtype, shape.to_vec(), bytes))
        },
        move |json| {
            json["dtype"] = match dtype {
                Dtype::F16 => "float16",
                _ => "bfloat16",
            }
            .into()
        },
    )
}

#[test]
fn f16_and_bf16_checkpoints_load_as_f32_and_match_within_their_precision() {
    let bert_reference = BertReference::from_folder(&folder("bert_tiny")).expect("reference");
    let gpt2_reference = Gpt2Reference::from_folder(&folder("gpt2_tiny")).expect("reference");
    // Rounding every weight to 11 (f16) or 8 (bf16) significant bits moves the outputs by
    // about that relative precision times the outputs' scale; the f32 run is within 1e-4.
    for (dtype, bert_tol, gpt2_tol) in [
        (
            Dtype::F16,
            Tolerance::new(2e-2, 1e-2),
            Tolerance::new(2e-2, 1e-2),
        ),
        (
            Dtype::BF16,
            Tolerance::new(1.5e-1, 5e-2),
            Tolerance::new(1.5e-1, 5e-2),
        ),
    ] {
        let bert_dir = half_folder("bert_tiny", dtype);
        let gpt2_dir = half_folder("gpt2_tiny", dtype);
        let dict = read_weights(&bert_dir).expect("weights");
        assert_eq!(
            dict.dtype("embeddings.word_embeddings.weight")
                .map(|d| format!("{d:?}")),
            Some(format!("{dtype:?}")),
            "stored in half precision"
        );
        for_each_device(|d| {
            let bert = Bert::from_pretrained(&bert_dir, &d.device).expect("loads");
            let (hidden, pooled) = bert_outputs(&bert, &bert_reference, &d.device);
            check(
                hidden,
                &bert_reference.last_hidden_state,
                bert_tol,
                &format!("{dtype:?} last_hidden_state"),
            );
            check(
                pooled,
                &bert_reference.pooler_output,
                bert_tol,
                &format!("{dtype:?} pooler_output"),
            );
            let gpt2 = Gpt2::from_pretrained(&gpt2_dir, &d.device).expect("loads");
            let logits = gpt2
                .try_forward(
                    ids(&gpt2_reference.batch_ids, &d.device),
                    Some(ids(&gpt2_reference.batch_attention_mask, &d.device)),
                )
                .expect("inputs fit");
            check(
                logits,
                &gpt2_reference.batch_logits,
                gpt2_tol,
                &format!("{dtype:?} batch_logits"),
            );
        });
        std::fs::remove_dir_all(bert_dir).expect("cleanup");
        std::fs::remove_dir_all(gpt2_dir).expect("cleanup");
    }
}

#[test]
fn a_pickled_pytorch_file_reads_as_its_safetensors_twin() {
    let device = Device::flex();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let pickled =
        attn_model::StateDict::from_pytorch_file(data.join("encoder_layer_relu_post_norm.pt"))
            .expect("torch.save file");
    let safetensors = attn_model::StateDict::from_safetensors_file(
        attn_testing::data_dir().join("encoder_layer_relu_post_norm.safetensors"),
    )
    .expect("safetensors file");
    let names: Vec<&str> = safetensors.names().collect();
    assert_eq!(pickled.names().collect::<Vec<_>>(), names);
    for name in names {
        let shape = safetensors.shape(name).expect("listed").to_vec();
        assert_eq!(pickled.shape(name), Some(shape.as_slice()), "{name}");
        let read = |dict: &attn_model::StateDict| match shape.as_slice() {
            [n] => attn_testing::to_vec(dict.tensor::<1>(name, [*n], &device).expect("f32")),
            [r, c] => attn_testing::to_vec(dict.tensor::<2>(name, [*r, *c], &device).expect("f32")),
            other => panic!("{name}: rank {}", other.len()),
        };
        assert_eq!(read(&pickled), read(&safetensors), "{name}");
    }
}

/// Sizes in `config.json` that the weights cannot back are refused before the model is
/// built, with the count each side gives: a billion blocks, a feed-forward of 10^12, and a
/// depth whose parameter count overflows `u64`.
#[test]
fn a_config_larger_than_its_weights_is_refused_before_anything_is_allocated() {
    let device = Device::flex();
    let stored = read_weights(&folder("gpt2_tiny"))
        .expect("weights")
        .values();
    for (case, key, value) in [
        ("layers", "n_layer", serde_json::json!(1_000_000_000u64)),
        ("inner", "n_inner", serde_json::json!(1_000_000_000_000u64)),
        ("overflow", "n_layer", serde_json::json!(u64::MAX)),
    ] {
        let dir = edited_folder("gpt2_tiny", case, unchanged, |json| {
            json[key] = value.clone();
        });
        let err = Gpt2::from_pretrained(&dir, &device).expect_err(case);
        match &err {
            ModelError::Config(ConfigError::LargerThanWeights {
                described,
                stored: s,
            }) => {
                assert_eq!(*s, stored, "{case}");
                if case == "overflow" {
                    assert_eq!(described, "more than 2^64");
                } else {
                    let described: u64 = described.parse().expect("a count");
                    assert!(described > 1_000_000 * stored, "{case}: {described}");
                }
            }
            other => panic!("{case}: {other}"),
        }
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
    // BERT's too.
    let mut config: BertConfig = read_config(&folder("bert_tiny")).expect("config");
    config.num_hidden_layers = 1 << 40;
    let dict = read_weights(&folder("bert_tiny")).expect("weights");
    let err = Bert::from_state_dict(&config, &dict, &device).expect_err("2^40 blocks");
    assert!(
        matches!(&err, ModelError::Config(ConfigError::LargerThanWeights { stored, .. }) if *stored == dict.values()),
        "{err}"
    );
}

/// A `config.json` that is not a regular file (a FIFO, a symlink to a device, a folder) or is
/// far larger than any configuration is refused by name, without blocking or reading it whole.
#[cfg(unix)]
#[test]
fn a_config_that_is_not_a_small_regular_file_is_refused() {
    let device = Device::flex();
    let base = edited_folder("gpt2_tiny", "special", unchanged, |_| {});
    let config = base.join("config.json");
    let refused = |what: &str, expected: &str| {
        let err = Gpt2::from_pretrained(&base, &device).expect_err(what);
        let text = err.to_string();
        assert!(
            text.contains("config.json") && text.contains(expected),
            "{what}: {text}"
        );
    };
    std::fs::remove_file(&config).expect("remove");
    std::os::unix::fs::symlink("/dev/zero", &config).expect("symlink");
    refused(
        "a symlink to /dev/zero",
        "config.json is a device, not a regular file; only regular files are read",
    );
    std::fs::remove_file(&config).expect("remove");
    let status = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    refused(
        "a FIFO",
        "config.json is a FIFO, not a regular file; only regular files are read",
    );
    std::fs::remove_file(&config).expect("remove");
    std::fs::create_dir(&config).expect("a folder");
    refused(
        "a folder",
        "config.json is a folder, not a regular file; only regular files are read",
    );
    std::fs::remove_dir(&config).expect("remove");
    std::fs::write(&config, vec![b' '; 2 << 20]).expect("write");
    refused("2 MiB of spaces", "2097152 bytes, more than the 1048576");
    std::fs::remove_dir_all(base).expect("cleanup");
}

#[test]
fn llama_family_settings_this_crate_does_not_implement_are_named_with_their_values() {
    let device = Device::flex();
    /// A case's name, its edit of `config.json`, and what the error must say.
    type Case = (&'static str, fn(&mut serde_json::Value), &'static str);
    let cases: [Case; 4] = [
        (
            "yarn",
            |c| c["rope_parameters"]["rope_type"] = "yarn".into(),
            "config `rope_type` is \"yarn\"",
        ),
        (
            "model-type",
            |c| c["model_type"] = "gemma".into(),
            "config `model_type` is \"gemma\"",
        ),
        (
            "act",
            |c| c["hidden_act"] = "gelu".into(),
            "config `hidden_act` is \"gelu\"",
        ),
        (
            "mixed-window",
            |c| {
                c["use_sliding_window"] = true.into();
                c["sliding_window"] = 4.into();
                c["layer_types"] = serde_json::json!(["sliding_attention", "full_attention"]);
            },
            "1 sliding and 1 full-attention layers",
        ),
    ];
    for (case, edit, expected) in cases {
        let dir = edited_folder("qwen3_tiny", case, unchanged, edit);
        let err = CausalLm::from_pretrained(&dir, &device).expect_err(case);
        let text = err.to_string();
        assert!(text.contains(expected), "{case}: {text}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

#[test]
fn llama_family_a_missing_shard_and_a_misshapen_tensor_are_named() {
    let device = Device::flex();
    // A shard the index lists, gone from the folder.
    let source = folder("mistral_tiny");
    let dir = std::env::temp_dir().join(format!("attn-hf-{}-shard", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for entry in std::fs::read_dir(&source).expect("folder") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("a name").to_owned();
        if name != "model-00007-of-00010.safetensors" {
            std::fs::copy(&path, dir.join(name)).expect("copy");
        }
    }
    let err = CausalLm::from_pretrained(&dir, &device).expect_err("a shard is missing");
    let text = err.to_string();
    assert!(
        text.contains("model-00007-of-00010.safetensors") && text.contains("lists the shard"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");

    // One row short of W_K: [24, 32] stored as [23, 32].
    let dir = edited_folder(
        "qwen3_tiny",
        "shape",
        |name, dtype, shape, values| {
            if name == "model.layers.1.self_attn.k_proj.weight" {
                Some((
                    dtype,
                    vec![shape[0] - 1, shape[1]],
                    f32_bytes(&values[shape[1]..]),
                ))
            } else {
                unchanged(name, dtype, shape, values)
            }
        },
        |_| {},
    );
    let err = CausalLm::from_pretrained(&dir, &device).expect_err("misshapen");
    let text = err.to_string();
    assert!(
        text.contains("model.layers.1.self_attn.k_proj.weight")
            && text.contains("[24, 32]")
            && text.contains("[23, 32]"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Runs `f` on another thread, failing the test if it does not return within 20 s (opening a
/// FIFO blocks until a writer comes).
fn within_time<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(f());
    });
    receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: blocked"))
}

/// A fresh folder `case` holding copies of `files` of the test folder `model`.
fn copied_folder(model: &str, case: &str, files: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-hf-{}-{model}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for file in files {
        std::fs::copy(folder(model).join(file), dir.join(file)).expect("copy");
    }
    dir
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Weights that are not regular files (a FIFO, a link to a device) are named as such, not as
/// missing, and nothing blocks on them.
#[cfg(unix)]
#[test]
fn weights_and_shards_that_are_not_regular_files_are_named_as_such() {
    let dir = copied_folder("gpt2_tiny", "fifo-weights", &["config.json"]);
    let weights = dir.join("model.safetensors");
    mkfifo(&weights);
    let read = dir.clone();
    let err =
        within_time("a FIFO model.safetensors", move || read_weights(&read)).expect_err("a FIFO");
    assert_eq!(
        err.to_string(),
        format!(
            "{} is a FIFO, not a regular file; only regular files are read",
            weights.display()
        )
    );
    std::fs::remove_dir_all(&dir).expect("clean up");

    let shards: Vec<String> = (1..=10)
        .map(|i| format!("model-{i:05}-of-00010.safetensors"))
        .collect();
    let mut files: Vec<&str> = shards.iter().map(String::as_str).collect();
    files.extend([SHARD_INDEX_FILE, "config.json"]);
    let dir = copied_folder("mistral_tiny", "odd-shards", &files);
    let shard = dir.join(&shards[6]);
    std::fs::remove_file(&shard).expect("remove");
    mkfifo(&shard);
    let read = dir.clone();
    let err = within_time("a FIFO shard", move || read_llama_weights(&read)).expect_err("a FIFO");
    assert!(
        err.to_string().contains(&format!(
            "{} is a FIFO, not a regular file",
            shard.display()
        )),
        "{err}"
    );
    std::fs::remove_file(&shard).expect("remove");
    std::os::unix::fs::symlink("/dev/zero", &shard).expect("a link");
    let read = dir.clone();
    let err = within_time("a shard linked to /dev/zero", move || {
        read_llama_weights(&read)
    })
    .expect_err("a device");
    assert!(
        err.to_string().contains(&format!(
            "{} is a device, not a regular file",
            shard.display()
        )),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// The files of a Hugging Face cache's revision, each a link `../../blobs/HASH`, made from
/// `files` of the test folder `model` under `root`: the revision folder.
#[cfg(unix)]
fn cache_revision(root: &Path, model: &str, files: &[&str]) -> PathBuf {
    let repository = root.join(format!("models--attn--{model}"));
    let revision = repository.join("snapshots/3f2a9c0d");
    std::fs::create_dir_all(&revision).expect("a folder");
    std::fs::create_dir_all(repository.join("blobs")).expect("a folder");
    for (i, file) in files.iter().enumerate() {
        let blob = format!("{i:040x}");
        std::fs::copy(
            folder(model).join(file),
            repository.join("blobs").join(&blob),
        )
        .expect("copy");
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), revision.join(file))
            .expect("a link");
    }
    revision
}

#[cfg(unix)]
#[test]
fn a_hugging_face_cache_revision_loads_through_its_links_into_blobs() {
    let device = Device::flex();
    let root = std::env::temp_dir().join(format!("attn-hf-{}-cache", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let files = [
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "model.safetensors",
    ];
    let revision = cache_revision(&root, "llama_tiny", &files);
    let plain = folder("llama_tiny");
    let ids = Tensor::<2, Int>::from_ints([[1, 7, 42, 99]], &device);
    let logits = |dir: &Path| {
        let model = CausalLm::from_pretrained(dir, &device).expect("loads");
        to_vec(model.try_forward(ids.clone(), None).expect("runs"))
    };
    assert_eq!(logits(&revision), logits(&plain));
    let template = ChatTemplate::from_folder(&revision)
        .expect("reads")
        .expect("a template");
    assert_eq!(
        template.source(),
        std::fs::read_to_string(plain.join("chat_template.jinja")).expect("the template")
    );
    assert_eq!(
        GenerationDefaults::from_folder(&revision).expect("reads"),
        GenerationDefaults::from_folder(&plain).expect("reads")
    );

    // A sharded checkpoint's index and shards, all links.
    let shards: Vec<String> = (1..=10)
        .map(|i| format!("model-{i:05}-of-00010.safetensors"))
        .collect();
    let mut files: Vec<&str> = shards.iter().map(String::as_str).collect();
    files.extend([SHARD_INDEX_FILE, "config.json"]);
    let revision = cache_revision(&root, "mistral_tiny", &files);
    assert_eq!(
        read_llama_weights(&revision).expect("reads").values(),
        read_llama_weights(&folder("mistral_tiny"))
            .expect("reads")
            .values()
    );
    std::fs::remove_dir_all(&root).expect("clean up");
}

/// A model folder's file that links out of it (`chat_template.jinja` to a private file,
/// `config.json` and the weights to another folder's) is refused, naming the link and its
/// target: nothing outside is read into a prompt or a model.
#[cfg(unix)]
#[test]
fn a_file_that_links_out_of_its_folder_is_refused_naming_link_and_target() {
    let device = Device::flex();
    let root = std::env::temp_dir().join(format!("attn-hf-{}-link-out", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).expect("a folder");
    let secret = root.join("passwd");
    std::fs::write(&secret, "root:x:0:0:root:/root:/bin/bash\n").expect("written");
    let outside = root.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("a folder");
    for file in ["config.json", "model.safetensors", "tokenizer_config.json"] {
        std::fs::copy(folder("llama_tiny").join(file), outside.join(file)).expect("copy");
    }
    std::os::unix::fs::symlink(&secret, dir.join("chat_template.jinja")).expect("a link");
    let refused = |err: &dyn std::fmt::Display, file: &str, target: &Path| {
        let text = err.to_string();
        let target = std::fs::canonicalize(target).expect("exists");
        assert!(
            text.contains(&format!(
                "{} is a link to {}, outside",
                dir.join(file).display(),
                target.display()
            )),
            "{file}: {text}"
        );
    };
    let err = ChatTemplate::from_folder(&dir).expect_err("a link to a private file");
    refused(&err, "chat_template.jinja", &secret);

    // The same file inside the folder, linked from beside it, is read.
    std::fs::remove_file(dir.join("chat_template.jinja")).expect("remove");
    std::fs::copy(&secret, dir.join("template.txt")).expect("copy");
    std::os::unix::fs::symlink("template.txt", dir.join("chat_template.jinja")).expect("a link");
    let template = ChatTemplate::from_folder(&dir)
        .expect("a link inside")
        .expect("a template");
    assert!(template.source().starts_with("root:"));

    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(folder("llama_tiny").join(file), dir.join(file)).expect("copy");
    }
    for file in ["config.json", "model.safetensors"] {
        std::fs::remove_file(dir.join(file)).expect("remove");
        std::os::unix::fs::symlink(outside.join(file), dir.join(file)).expect("a link");
        let err = CausalLm::from_pretrained(&dir, &device).expect_err(file);
        refused(&err, file, &outside.join(file));
        std::fs::remove_file(dir.join(file)).expect("remove");
        std::fs::copy(folder("llama_tiny").join(file), dir.join(file)).expect("copy");
    }
    CausalLm::from_pretrained(&dir, &device).expect("the folder's own files load");
    std::fs::remove_dir_all(&root).expect("clean up");
}

/// Writes a safetensors file of `f32` tensors (name, shape, values) at `path`.
fn write_f32_safetensors(path: &Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, _, v)| f32_bytes(v)).collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), data)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), data).expect("view");
            (name.to_string(), view)
        })
        .collect();
    std::fs::write(
        path,
        safetensors::serialize(views, None).expect("serialises"),
    )
    .expect("write");
}

/// A tensor in a second shard, or in a shard its index does not name for it, replaced the one
/// the index assigns (whichever file came last); now it is refused, naming the tensor and both
/// files.
#[test]
fn a_tensor_outside_the_shard_its_index_names_is_refused_naming_both_files() {
    let device = Device::flex();
    let dir = std::env::temp_dir().join(format!("attn-hf-{}-tiny-shards", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (one, two) = (dir.join("one.safetensors"), dir.join("two.safetensors"));
    let index = dir.join(SHARD_INDEX_FILE);
    let write_index = |map: serde_json::Value| {
        std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).expect("write")
    };
    write_index(serde_json::json!({
        "a": "one.safetensors", "b": "one.safetensors", "c": "two.safetensors"
    }));
    write_f32_safetensors(
        &one,
        &[
            ("a", vec![2], vec![1.0, 2.0]),
            ("b", vec![3], vec![3.0, 4.0, 5.0]),
        ],
    );
    write_f32_safetensors(&two, &[("c", vec![1], vec![6.0])]);
    let dict = read_llama_weights(&dir).expect("each tensor in its shard");
    assert_eq!(
        to_vec(dict.tensor::<1>("a", [2], &device).expect("a")),
        [1.0, 2.0]
    );
    assert_eq!(
        to_vec(dict.tensor::<1>("c", [1], &device).expect("c")),
        [6.0]
    );

    let refused = |expected: String| {
        let err = read_llama_weights(&dir).expect_err(&expected);
        assert!(
            matches!(err, ModelError::MisplacedTensor { .. }),
            "{expected}: {err}"
        );
        assert_eq!(err.to_string(), expected);
    };
    // `a` again, with other values, in the shard after its own.
    write_f32_safetensors(
        &two,
        &[("c", vec![1], vec![6.0]), ("a", vec![2], vec![9.0, 9.0])],
    );
    refused(format!(
        "tensor `a` is stored in {}, but {} assigns it to {}",
        two.display(),
        index.display(),
        one.display()
    ));
    // `c`, which the index places in the first shard, found in the second.
    write_f32_safetensors(&two, &[("c", vec![1], vec![6.0])]);
    write_index(serde_json::json!({
        "a": "one.safetensors", "b": "one.safetensors", "c": "one.safetensors",
        "x": "two.safetensors"
    }));
    refused(format!(
        "tensor `c` is stored in {}, but {} assigns it to {}",
        two.display(),
        index.display(),
        one.display()
    ));
    // A tensor the index does not list.
    write_index(serde_json::json!({ "a": "one.safetensors", "c": "two.safetensors" }));
    refused(format!(
        "tensor `b` is stored in {}, but {} does not list it",
        one.display(),
        index.display()
    ));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A rotary length that is not a positive integer is named with its value, not cast (`-5`
/// became 0 and was reported as "cannot be 0").
#[test]
fn an_original_max_position_embeddings_that_is_not_a_positive_integer_is_named() {
    let device = Device::flex();
    for value in [
        serde_json::json!(-5),
        serde_json::json!(0),
        serde_json::json!(16.5),
        serde_json::json!(1e300),
        serde_json::json!("8192"),
    ] {
        let dir = copied_folder("llama_tiny", "rope-length", &["config.json"]);
        let path = dir.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        config["rope_parameters"]["original_max_position_embeddings"] = value.clone();
        std::fs::write(&path, config.to_string()).expect("write");
        let err = CausalLm::from_pretrained(&dir, &device).expect_err("refused");
        let shown = value.to_string();
        assert_eq!(
            err.to_string(),
            format!(
                "model config: config `original_max_position_embeddings` is {shown}; it must \
                 be a positive integer"
            )
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
