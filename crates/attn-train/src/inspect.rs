//! Attention inspection: the weights of every head on one sequence, a heatmap per head, and, on
//! the `context` task, how strongly the ambiguous word attends to its cue.
//!
//! A decoder's self-attention heatmaps are lower triangles (the causal mask); an
//! encoder-decoder also gets one cross-attention heatmap per head, its queries the target
//! tokens and its keys the source tokens: which source word each target token reads.

use attn_model::{
    DecoderWeights, EncoderDecoderInput, NeedWeights, TokenDecoderInput, TokenEncoder,
    TokenEncoderInput,
};
use burn::tensor::{Device, Tensor};

use crate::error::TrainError;
use crate::model::Model;
use crate::plot;
use crate::run_dir::RunDir;
use crate::tasks::{Batch, TaskConfig};

/// One layer's attention weights on one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    /// Heads of the layer.
    pub n_heads: usize,
    /// Tokens of the sequence.
    pub seq_len: usize,
    /// `[n_heads, seq_len, seq_len]` row-major: head, query, key.
    pub weights: Vec<f32>,
}

impl LayerWeights {
    /// One head's weights, `[seq_len, seq_len]` row-major.
    pub fn head(&self, head: usize) -> &[f32] {
        let size = self.seq_len * self.seq_len;
        &self.weights[head * size..(head + 1) * size]
    }

    /// The weight head `head` gives from `query` to `key`.
    pub fn weight(&self, head: usize, query: usize, key: usize) -> f32 {
        self.head(head)[query * self.seq_len + key]
    }
}

/// Every layer's attention weights on one sequence `tokens`.
///
/// # Errors
///
/// [`TrainError::Model`] when the model cannot run on `tokens`, [`TrainError::Config`] when the
/// weights cannot be read back from the device.
pub fn attention_maps(
    model: &TokenEncoder,
    tokens: &[i64],
    device: &Device,
) -> Result<Vec<LayerWeights>, TrainError> {
    let seq_len = tokens.len();
    let one = Batch {
        batch: 1,
        seq_len,
        tokens: tokens.to_vec(),
        targets: vec![0; seq_len],
        source_len: 0,
        source: Vec::new(),
    };
    let input =
        TokenEncoderInput::new(one.tokens_tensor(device)).with_weights(NeedWeights::PerHead);
    let layers = model.try_forward(input)?.weights;
    layers
        .into_iter()
        .map(|w| {
            let [_, n_heads, _, _] = w.dims(); // [1, n_heads, seq_len, seq_len]
            let weights = w.into_data().try_into_vec_as::<f32>().map_err(|e| {
                TrainError::Config(format!("cannot read attention weights back: {e:?}"))
            })?;
            Ok(LayerWeights {
                n_heads,
                seq_len,
                weights,
            })
        })
        .collect()
}

/// Per layer, the mean over the first 64 sequences of `batch` of the largest weight any head
/// gives from the ambiguous word to its cue. Meaningful for the `context` task only; a uniform
/// head would give `1 / seq_len`.
///
/// # Errors
///
/// As [`attention_maps`].
pub fn cue_attention(
    model: &TokenEncoder,
    task: &TaskConfig,
    batch: &Batch,
    device: &Device,
) -> Result<Vec<f64>, TrainError> {
    let n = batch.batch.min(64);
    let mut sums: Vec<f64> = Vec::new();
    for b in 0..n {
        let tokens = batch.sequence(b);
        let Some(at) = task.cue_positions(tokens) else {
            continue;
        };
        let layers = attention_maps(model, tokens, device)?;
        sums.resize(layers.len(), 0.0);
        for (sum, layer) in sums.iter_mut().zip(&layers) {
            let best = (0..layer.n_heads)
                .map(|h| layer.weight(h, at.word, at.cue))
                .fold(0.0_f32, f32::max);
            *sum += f64::from(best);
        }
    }
    Ok(sums.into_iter().map(|s| s / n.max(1) as f64).collect())
}

/// The positions of `tokens` a heatmap always names: on the `context` task the ambiguous
/// word and its cue; none on the other tasks.
pub fn marked_positions(task: &TaskConfig, tokens: &[i64]) -> Vec<usize> {
    task.cue_positions(tokens)
        .map_or_else(Vec::new, |at| vec![at.word, at.cue])
}

/// How one head treats the `context` task's cue, over held-out sentences.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadCue {
    /// The fraction of sentences in which the head's largest weight from the ambiguous word
    /// lands on the cue.
    pub hit_rate: f64,
    /// The mean weight the head gives from the ambiguous word to the cue (a uniform head would
    /// give `1 / seq_len`).
    pub mean_weight: f64,
}

/// Per layer and head, how often the largest weight from the ambiguous word lands on its cue,
/// and how large the weight on the cue is, over the first `limit` sequences of `batch` that
/// hold both words. Meaningful for the `context` task only; other tasks give empty layers.
///
/// # Errors
///
/// As [`attention_maps`].
pub fn cue_hits(
    model: &TokenEncoder,
    task: &TaskConfig,
    batch: &Batch,
    limit: usize,
    device: &Device,
) -> Result<Vec<Vec<HeadCue>>, TrainError> {
    let mut hits: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut seen = 0usize;
    for b in 0..batch.batch {
        if seen == limit {
            break;
        }
        let tokens = batch.sequence(b);
        let Some(at) = task.cue_positions(tokens) else {
            continue;
        };
        seen += 1;
        let layers = attention_maps(model, tokens, device)?;
        hits.resize_with(layers.len(), Vec::new);
        for (sums, layer) in hits.iter_mut().zip(&layers) {
            sums.resize(layer.n_heads, (0.0, 0.0));
            for (head, sum) in sums.iter_mut().enumerate() {
                let row = &layer.head(head)[at.word * layer.seq_len..][..layer.seq_len];
                if strongest(row) == at.cue {
                    sum.0 += 1.0;
                }
                sum.1 += f64::from(row[at.cue]);
            }
        }
    }
    let n = seen.max(1) as f64;
    Ok(hits
        .into_iter()
        .map(|layer| {
            layer
                .into_iter()
                .map(|(hit, weight)| HeadCue {
                    hit_rate: hit / n,
                    mean_weight: weight / n,
                })
                .collect()
        })
        .collect())
}

/// The position of the largest weight of a row (the first, on ties).
pub fn strongest(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (j, &w)| {
            if w > best.1 { (j, w) } else { best }
        })
        .0
}

/// How differently heads `a` and `b` of one layer attend: the mean over queries of the total
/// variation distance `½ Σ_key |w_a − w_b|` between their rows of weights. 0 for heads that
/// attend alike, 1 for heads that never look at the same key.
pub fn head_distance(layer: &LayerWeights, a: usize, b: usize) -> f64 {
    let seq_len = layer.seq_len;
    let total: f64 = layer
        .head(a)
        .chunks(seq_len)
        .zip(layer.head(b).chunks(seq_len))
        .map(|(x, y)| {
            0.5 * x
                .iter()
                .zip(y)
                .map(|(p, q)| f64::from((p - q).abs()))
                .sum::<f64>()
        })
        .sum();
    total / seq_len.max(1) as f64
}

/// One heatmap per layer and head of `model`'s attention on the first sequence of `batch`,
/// into the run folder's attention folder: self-attention as `layer<L>-head<H>.png`, and for
/// an encoder-decoder cross-attention as `cross-layer<L>-head<H>.png`.
///
/// # Errors
///
/// As [`attention_maps`], plus [`TrainError::Io`] or [`TrainError::Plot`] when a file cannot be
/// written.
pub fn draw_heads(
    run_dir: &RunDir,
    model: &Model,
    task: &TaskConfig,
    batch: &Batch,
    device: &Device,
) -> Result<(), TrainError> {
    let tokens = batch.sequence(0);
    let names: Vec<String> = tokens.iter().map(|&t| task.token_name(t)).collect();
    let marked = marked_positions(task, tokens);
    let layers = match model {
        Model::Encoder(encoder) => {
            for (layer, weights) in attention_maps(encoder, tokens, device)?.iter().enumerate() {
                for head in 0..weights.n_heads {
                    let title = format!("{}: layer {layer}, head {head}", task.kind);
                    let path = run_dir.head_heatmap(layer, head)?;
                    plot::heatmap(&path, &title, weights.head(head), &names, &marked)?;
                }
            }
            return Ok(());
        }
        Model::Decoder(decoder) => {
            decoder
                .try_forward(
                    TokenDecoderInput::new(one(tokens, device)).with_weights(NeedWeights::PerHead),
                )?
                .weights
        }
        Model::EncoderDecoder(model) => {
            let source = one(batch.source_sequence(0), device);
            model
                .try_forward(
                    EncoderDecoderInput::new(source, one(tokens, device))
                        .with_weights(NeedWeights::PerHead),
                )?
                .weights
        }
    };
    let source: Vec<String> = batch
        .source_sequence(0)
        .iter()
        .map(|&t| task.source_token_name(t))
        .collect();
    for (
        layer,
        DecoderWeights {
            self_attention,
            cross_attention,
        },
    ) in layers.into_iter().enumerate()
    {
        let self_attention = per_head(self_attention)?;
        for (head, weights) in self_attention.iter().enumerate() {
            let title = format!("{}: layer {layer}, head {head}", task.kind);
            let path = run_dir.head_heatmap(layer, head)?;
            plot::heatmap(&path, &title, weights, &names, &marked)?;
        }
        let Some(cross_attention) = cross_attention else {
            continue;
        };
        for (head, weights) in per_head(cross_attention)?.iter().enumerate() {
            let title = format!("{}: cross-attention, layer {layer}, head {head}", task.kind);
            let path = run_dir.cross_heatmap(layer, head)?;
            plot::cross_heatmap(&path, &title, weights, &names, &source)?;
        }
    }
    Ok(())
}

/// One sequence as a batch of one.
///
/// # Shapes
///
/// - output: `[1, seq_len]`
fn one(tokens: &[i64], device: &Device) -> Tensor<2, burn::tensor::Int> {
    Tensor::from_data(
        burn::tensor::TensorData::new(tokens.to_vec(), [1, tokens.len()]),
        device,
    )
}

/// A batch of one's weights, `[1, n_heads, seq_len_q, seq_len_kv]`, as one row-major
/// `[seq_len_q, seq_len_kv]` vector per head.
fn per_head(weights: Tensor<4>) -> Result<Vec<Vec<f32>>, TrainError> {
    let [_, n_heads, seq_len_q, seq_len_kv] = weights.dims();
    let all = weights
        .into_data()
        .try_into_vec_as::<f32>()
        .map_err(|e| TrainError::Config(format!("cannot read attention weights back: {e:?}")))?;
    Ok(all
        .chunks(seq_len_q * seq_len_kv)
        .take(n_heads)
        .map(<[f32]>::to_vec)
        .collect())
}
