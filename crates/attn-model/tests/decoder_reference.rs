//! The decoder against independent references, on every compiled-in backend: PyTorch 2.15's
//! `nn.TransformerDecoderLayer` (weights loaded from the `state_dict` it saved as safetensors,
//! beside `decoder_layer.json` in `crates/attn-testing/data`), and, for the key/value cache
//! and generation, the same model recomputed over the whole prefix without a cache.
//!
//! `cargo test -p attn-model --test decoder_reference`

use attn_model::{
    Activation, AlibiForm, DecoderBlockConfig, DecoderInput, EncoderDecoderConfig,
    EncoderDecoderInput, GenerateConfig, ModelError, NeedWeights, NormPlacement, PositionalScheme,
    Prompt, Sampling, StateDict, TokenDecoder, TokenDecoderConfig, TokenDecoderInput,
};
use attn_testing::reference::encoder_layer::Activation as RefActivation;
use attn_testing::reference::{DecoderLayerFile, ReferenceFile};
use attn_testing::{
    ATOL, RTOL, SeededRng, assert_close, assert_tensors_close, for_each_device, to_vec,
};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

const VOCAB: usize = 11;
const D_MODEL: usize = 12;
const N_HEADS: usize = 3;
const N_LAYERS: usize = 2;
const D_FF: usize = 7;
const BATCH: usize = 3;
const SEQ_LEN: usize = 7;
/// Leading padding of each sequence: lengths 7, 4 and 6.
const LEFT_PAD: [usize; BATCH] = [0, 3, 1];

#[test]
fn decoder_layer_matches_pytorch_in_both_cases() {
    let dir = attn_testing::data_dir();
    let file = DecoderLayerFile::read_from(&dir).expect("reference file");
    assert!(
        file.source.contains("TransformerDecoderLayer"),
        "{}",
        file.source
    );
    let names: Vec<&str> = file.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["relu_post_norm", "gelu_pre_norm"]);
    for_each_device(|d| {
        for case in &file.cases {
            assert!(case.tgt_causal, "{}: the block is always causal", case.name);
            let weights = case
                .weights_path(&dir)
                .expect("a file beside the reference");
            let dict = StateDict::from_safetensors_file(weights).expect("state dict");
            let block = DecoderBlockConfig::new(case.d_model, case.n_heads, case.d_ff)
                .with_dropout(0.0)
                .with_norm(if case.norm_first {
                    NormPlacement::Pre
                } else {
                    NormPlacement::Post
                })
                .with_activation(match case.activation {
                    RefActivation::Relu => Activation::Relu,
                    RefActivation::Gelu => Activation::Gelu,
                })
                .with_layer_norm_eps(case.layer_norm_eps)
                .init(&d.device)
                .expect("valid config")
                .load_pytorch_state_dict(&dict, "")
                .expect("every tensor present with its shape");
            let padding = case.memory_padding.bool_tensor::<2>(&d.device);
            let input = || {
                DecoderInput::new(case.tgt.tensor::<3>(&d.device))
                    .with_memory(case.memory.tensor::<3>(&d.device), Some(padding.clone()))
            };
            let out = block
                .try_forward(input().with_weights(NeedWeights::PerHead))
                .expect("explicit strategy returns weights");
            assert_close(
                out.output,
                &case.out,
                ATOL,
                RTOL,
                &format!("{}: out", case.name),
            );
            assert_close(
                block.forward(input()).output,
                &case.out,
                ATOL,
                RTOL,
                &case.name,
            );
            // Sequence 1's last two memory keys are padding: no head gives them weight.
            let cross = out.weights[0]
                .cross_attention
                .clone()
                .expect("cross-attention weights");
            let [_, n_heads, seq_len, seq_len_kv] = cross.dims();
            let padded =
                to_vec(cross.slice([1..2, 0..n_heads, 0..seq_len, seq_len_kv - 2..seq_len_kv]));
            assert!(
                padded.iter().all(|w| *w == 0.0),
                "{}: {padded:?}",
                case.name
            );
        }
    });
}

fn schemes() -> Vec<PositionalScheme> {
    vec![
        PositionalScheme::None,
        PositionalScheme::Sinusoidal { base: 10_000.0 },
        PositionalScheme::Learned { max_len: 9 },
        PositionalScheme::rotary(),
        PositionalScheme::rotary_half_split(),
        PositionalScheme::Alibi {
            form: AlibiForm::Causal,
        },
        PositionalScheme::Alibi {
            form: AlibiForm::Symmetric,
        },
    ]
}

fn config(pos: PositionalScheme) -> TokenDecoderConfig {
    TokenDecoderConfig::new(VOCAB, D_MODEL, N_HEADS, N_LAYERS, D_FF, pos).with_dropout(0.0)
}

fn random_tokens(
    rng: &mut SeededRng,
    batch: usize,
    seq_len: usize,
    device: &Device,
) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..batch * seq_len)
        .map(|_| rng.range(0, VOCAB - 1) as i64)
        .collect();
    Tensor::from_data(TensorData::new(ids, [batch, seq_len]), device)
}

/// Feeds `tokens` through a cache in steps of the given sizes and checks every step's logits
/// against the model recomputed over the whole prefix without a cache.
fn check_steps_against_full_recomputation(
    model: &TokenDecoder,
    tokens: &Tensor<2, Int>,
    steps: &[usize],
    what: &str,
) {
    let [batch, seq_len] = tokens.dims();
    assert_eq!(steps.iter().sum::<usize>(), seq_len);
    let mut cache = model
        .new_cache(batch, seq_len + 2, Some(&LEFT_PAD))
        .expect("valid cache");
    let mut start = 0;
    for &len in steps {
        let new = tokens.clone().narrow(1, start, len);
        let cached = model
            .try_forward(TokenDecoderInput::new(new).with_cache(&mut cache))
            .expect("fits")
            .logits;
        let prefix = tokens.clone().narrow(1, 0, start + len);
        // A prefix shorter than a sequence's padding is all padding.
        let prefix_pad = LEFT_PAD.map(|pad| pad.min(start + len));
        let full = model
            .try_forward(TokenDecoderInput::new(prefix).with_left_pad(&prefix_pad))
            .expect("prefix fits")
            .logits
            .narrow(1, start, len); // [batch, len, vocab]
        assert_tensors_close(
            cached,
            full,
            1e-5,
            0.0,
            &format!("{what}: slots {start}..{}", start + len),
        );
        start += len;
        assert_eq!(cache.filled(), start);
    }
}

#[test]
fn cached_decoding_equals_full_recomputation_for_every_scheme_with_a_padded_batch() {
    for_each_device(|d| {
        for (i, pos) in schemes().into_iter().enumerate() {
            let mut rng = SeededRng::new(71);
            // Every other scheme with grouped-query attention (one key/value head).
            let n_kv_heads = (i % 2 == 1).then_some(1);
            let model = config(pos.clone())
                .with_n_kv_heads(n_kv_heads)
                .init(&d.device)
                .expect("valid");
            let tokens = random_tokens(&mut rng, BATCH, SEQ_LEN, &d.device);
            // A prompt longer than every padding, then one token at a time, then two.
            check_steps_against_full_recomputation(
                &model,
                &tokens,
                &[4, 1, 2],
                &format!("{pos:?}"),
            );
        }
    });
}

#[test]
fn long_caches_read_in_place_by_the_decode_pass_equal_full_recomputation() {
    // Past `DECODE_MIN_KEYS` filled slots, steps of a few tokens take the native decode pass
    // on the CPU backends, which reads the filled prefix of the cache buffers in place.
    let prompt = attn_core::DECODE_MIN_KEYS + 9;
    let steps = [prompt, 1, 1, 3];
    let seq_len = steps.iter().sum();
    for_each_device(|d| {
        for (pos, n_kv_heads) in [
            (PositionalScheme::rotary(), None),
            (PositionalScheme::learned(seq_len + 2), Some(1)),
            (
                PositionalScheme::Alibi {
                    form: AlibiForm::Causal,
                },
                None,
            ),
        ] {
            let mut rng = SeededRng::new(72);
            let model = config(pos.clone())
                .with_n_kv_heads(n_kv_heads)
                .init(&d.device)
                .expect("valid");
            let tokens = random_tokens(&mut rng, BATCH, seq_len, &d.device);
            check_steps_against_full_recomputation(
                &model,
                &tokens,
                &steps,
                &format!("{pos:?}, {n_kv_heads:?} key/value heads"),
            );
        }
    });
}

#[test]
fn a_left_padded_sequence_gets_the_logits_it_gets_alone() {
    for_each_device(|d| {
        for pos in schemes() {
            let mut rng = SeededRng::new(72);
            let model = config(pos.clone()).init(&d.device).expect("valid");
            let tokens = random_tokens(&mut rng, BATCH, SEQ_LEN, &d.device);
            let padded = model
                .try_forward(TokenDecoderInput::new(tokens.clone()).with_left_pad(&LEFT_PAD))
                .expect("fits")
                .logits;
            for (b, &pad) in LEFT_PAD.iter().enumerate() {
                let alone = model
                    .forward(TokenDecoderInput::new(
                        tokens.clone().slice([b..b + 1, pad..SEQ_LEN]),
                    ))
                    .logits;
                let [_, _, vocab] = alone.dims();
                assert_tensors_close(
                    padded.clone().slice([b..b + 1, pad..SEQ_LEN, 0..vocab]),
                    alone,
                    ATOL,
                    RTOL,
                    &format!("{pos:?}: sequence {b}"),
                );
            }
        }
    });
}

#[test]
fn rolling_cache_equals_full_attention_with_the_sliding_window_mask() {
    for_each_device(|d| {
        for pos in schemes() {
            let mut rng = SeededRng::new(73);
            let window = 3;
            let model = config(pos.clone())
                .with_window(Some(window))
                .init(&d.device)
                .expect("valid");
            let cache = model.new_cache(BATCH, SEQ_LEN + 2, None).expect("valid");
            assert!(cache.is_rolling());
            assert_eq!(cache.slots(), window);
            let tokens = random_tokens(&mut rng, BATCH, SEQ_LEN, &d.device);
            // A prompt longer than the window, a step that rolls in place, a chunk that wraps
            // around the slots; then a short prompt, single steps, a chunk, a single step.
            for steps in [&[4, 1, 2][..], &[2, 1, 1, 2, 1]] {
                check_steps_against_full_recomputation(
                    &model,
                    &tokens,
                    steps,
                    &format!("window {window}, steps {steps:?}, {pos:?}"),
                );
            }
            // The window matters: the same parameters without it give other logits.
            let unlimited = config(pos.clone())
                .init(&d.device)
                .expect("valid")
                .load_record(model.clone().into_record());
            let a = to_vec(
                model
                    .try_forward(TokenDecoderInput::new(tokens.clone()).with_left_pad(&LEFT_PAD))
                    .expect("fits")
                    .logits,
            );
            let b = to_vec(
                unlimited
                    .try_forward(TokenDecoderInput::new(tokens).with_left_pad(&LEFT_PAD))
                    .expect("fits")
                    .logits,
            );
            let (diff, _) = attn_testing::max_abs_diff(&a, &b);
            assert!(
                diff > 1e-3,
                "{pos:?}: the window changes the logits ({diff})"
            );
        }
    });
}

#[test]
fn cache_capacity_and_batch_errors_name_the_numbers() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(74);
        let model = config(PositionalScheme::rotary())
            .init(&d.device)
            .expect("valid");
        let mut cache = model.new_cache(BATCH, 4, None).expect("valid");
        model
            .try_forward(
                TokenDecoderInput::new(random_tokens(&mut rng, BATCH, 3, &d.device))
                    .with_cache(&mut cache),
            )
            .expect("3 of 4");
        let err = model
            .try_forward(
                TokenDecoderInput::new(random_tokens(&mut rng, BATCH, 2, &d.device))
                    .with_cache(&mut cache),
            )
            .expect_err("5 > 4");
        assert!(
            matches!(
                err,
                ModelError::CacheFull {
                    capacity: 4,
                    filled: 3,
                    new: 2
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "the key/value cache holds 4 tokens per sequence; 3 are written and this step adds 2"
        );
        let err = model
            .try_forward(
                TokenDecoderInput::new(random_tokens(&mut rng, 2, 1, &d.device))
                    .with_cache(&mut cache),
            )
            .expect_err("batch 2");
        assert!(
            matches!(
                err,
                ModelError::CacheBatchMismatch {
                    expected: 3,
                    got: 2
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "the key/value cache was made for a batch of 3, the step has 2"
        );
        // A refused step writes nothing: the last slot is still free.
        assert_eq!(cache.filled(), 3);
        model
            .try_forward(
                TokenDecoderInput::new(random_tokens(&mut rng, BATCH, 1, &d.device))
                    .with_cache(&mut cache),
            )
            .expect("4 of 4");
        let err = model
            .new_cache(BATCH, 4, Some(&[0, 5, 1]))
            .expect_err("padding 5 > 4");
        assert_eq!(
            err.to_string(),
            "sequence 1 has 5 padding tokens but only 4 slots"
        );
        let err = model
            .new_cache(BATCH, 4, Some(&[0, 1]))
            .expect_err("two entries");
        assert_eq!(err.to_string(), "left_pad has 2 entries for a batch of 3");
    });
}

/// Prompt ids as rows, each sequence left-padded with 0.
fn prompt(device: &Device) -> Prompt {
    Prompt::from_sequences(&[vec![1, 2, 3, 4], vec![5, 6], vec![7, 8, 9]], 0, device)
}

/// The prompt followed by the generated tokens, `[batch, seq_len + steps]`.
fn extended(prompt: &Prompt, generated: &[Vec<i64>]) -> Tensor<2, Int> {
    let [batch, seq_len] = prompt.tokens().dims();
    let steps = generated[0].len();
    let prompt_ids = prompt
        .tokens()
        .clone()
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .expect("ids");
    let ids: Vec<i64> = (0..batch)
        .flat_map(|b| {
            prompt_ids[b * seq_len..(b + 1) * seq_len]
                .iter()
                .chain(&generated[b])
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    Tensor::from_data(
        TensorData::new(ids, [batch, seq_len + steps]),
        &prompt.tokens().device(),
    )
}

#[test]
fn greedy_generation_is_the_argmax_of_a_full_forward_at_each_step() {
    for_each_device(|d| {
        for pos in [
            PositionalScheme::sinusoidal(),
            PositionalScheme::rotary(),
            PositionalScheme::alibi_causal(),
        ] {
            let model = config(pos.clone()).init(&d.device).expect("valid");
            let prompt = prompt(&d.device);
            let left_pad = prompt.left_pad();
            let steps: Vec<_> = model
                .generate(
                    prompt.clone(),
                    GenerateConfig::new(5).with_keep_logits(true),
                )
                .expect("starts")
                .collect::<Result<_, _>>()
                .expect("every step runs");
            assert_eq!(steps.len(), 5);
            let mut generated = vec![Vec::new(); BATCH];
            for (i, step) in steps.into_iter().enumerate() {
                let full = model
                    .try_forward(
                        TokenDecoderInput::new(extended(&prompt, &generated))
                            .with_left_pad(&left_pad),
                    )
                    .expect("fits")
                    .logits; // [batch, seq_len, vocab]
                let [_, seq_len, vocab] = full.dims();
                let last = full.narrow(1, seq_len - 1, 1).reshape([BATCH, vocab]);
                let logits = step.logits.expect("kept");
                assert_tensors_close(
                    logits,
                    last.clone(),
                    1e-5,
                    0.0,
                    &format!("{pos:?}: step {i}"),
                );
                let want = last
                    .argmax(1)
                    .into_data()
                    .convert::<i64>()
                    .try_to_vec::<i64>()
                    .expect("ids");
                for (b, token) in step.tokens.into_iter().enumerate() {
                    let token = token.expect("no stop tokens");
                    assert_eq!(token, want[b], "{pos:?}: step {i}, sequence {b}");
                    generated[b].push(token);
                }
            }
        }
    });
}

#[test]
fn seeded_sampling_is_reproducible_and_top_k_one_is_greedy() {
    for_each_device(|d| {
        let model = config(PositionalScheme::rotary())
            .init(&d.device)
            .expect("valid");
        let run = |sampling: Sampling, seed: u64| {
            model
                .generate(
                    prompt(&d.device),
                    GenerateConfig::new(8)
                        .with_sampling(sampling)
                        .with_seed(seed),
                )
                .expect("starts")
                .tokens()
                .expect("runs")
        };
        let nucleus = Sampling::Sample {
            temperature: 1.5,
            top_k: None,
            top_p: Some(0.95),
        };
        let first = run(nucleus.clone(), 5);
        assert_eq!(run(nucleus.clone(), 5), first, "same seed, same tokens");
        let others: Vec<_> = (6..10).map(|seed| run(nucleus.clone(), seed)).collect();
        assert!(
            others.iter().any(|o| *o != first),
            "other seeds draw other tokens"
        );
        let greedy = run(Sampling::Greedy, 0);
        let top_1 = Sampling::Sample {
            temperature: 0.7,
            top_k: Some(1),
            top_p: None,
        };
        assert_eq!(run(top_1, 11), greedy);
    });
}

#[test]
fn stop_tokens_end_each_sequence_after_it_is_produced() {
    for_each_device(|d| {
        let model = config(PositionalScheme::sinusoidal())
            .init(&d.device)
            .expect("valid");
        let greedy = model
            .generate(prompt(&d.device), GenerateConfig::new(6))
            .expect("starts")
            .tokens()
            .expect("runs");
        let stop = greedy[0][2];
        let stopped = model
            .generate(
                prompt(&d.device),
                GenerateConfig::new(6).with_stop_tokens(vec![stop]),
            )
            .expect("starts")
            .tokens()
            .expect("runs");
        for (b, (full, cut)) in greedy.iter().zip(&stopped).enumerate() {
            let end = full
                .iter()
                .position(|t| *t == stop)
                .map_or(full.len(), |i| i + 1);
            assert_eq!(cut[..], full[..end], "sequence {b}");
        }
        assert!(stopped[0].len() <= 3, "{stopped:?}");
        // Every sequence stopped: the iterator ends early.
        let all = greedy.iter().map(|s| s[0]).collect::<Vec<_>>();
        let steps = model
            .generate(
                prompt(&d.device),
                GenerateConfig::new(6).with_stop_tokens(all),
            )
            .expect("starts")
            .count();
        assert_eq!(steps, 1);
    });
}

#[test]
fn encoder_decoder_greedy_generation_equals_full_recomputation() {
    for_each_device(|d| {
        for pos in [
            PositionalScheme::learned(12),
            PositionalScheme::rotary_half_split(),
        ] {
            let mut rng = SeededRng::new(75);
            let model =
                EncoderDecoderConfig::new(13, VOCAB, D_MODEL, N_HEADS, N_LAYERS, D_FF, pos.clone())
                    .with_dropout(0.0)
                    .init(&d.device)
                    .expect("valid");
            let source = random_tokens(&mut rng, BATCH, 6, &d.device);
            let source_padding = attn_core::padding_mask_from_lengths(&[6, 4, 5], 6, &d.device)
                .expect("lengths fit");
            let prompt = prompt(&d.device);
            let left_pad = prompt.left_pad();
            let generated = model
                .generate(
                    source.clone(),
                    Some(source_padding.clone()),
                    prompt.clone(),
                    GenerateConfig::new(4),
                )
                .expect("starts")
                .tokens()
                .expect("runs");
            for step in 0..4 {
                let so_far: Vec<Vec<i64>> = generated.iter().map(|g| g[..step].to_vec()).collect();
                let full = model
                    .try_forward(
                        EncoderDecoderInput::new(source.clone(), extended(&prompt, &so_far))
                            .with_source_padding(source_padding.clone())
                            .with_left_pad(&left_pad),
                    )
                    .expect("fits")
                    .logits;
                let [_, seq_len, vocab] = full.dims();
                let want = full
                    .narrow(1, seq_len - 1, 1)
                    .reshape([BATCH, vocab])
                    .argmax(1)
                    .into_data()
                    .convert::<i64>()
                    .try_to_vec::<i64>()
                    .expect("ids");
                let got: Vec<i64> = generated.iter().map(|g| g[step]).collect();
                assert_eq!(got, want, "{pos:?}: step {step}");
            }
        }
    });
}
