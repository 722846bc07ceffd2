//! Attention inspection: the weights of every head on one sequence, a heatmap per head, and, on
//! the `context` task, how strongly the ambiguous word attends to its cue.
//!
//! A decoder's self-attention heatmaps are lower triangles (the causal mask); an
//! encoder-decoder also gets one cross-attention heatmap per head, its queries the target
//! tokens and its keys the source tokens: which source word each target token reads.

use attn_model::{DecoderWeights, TokenEncoder};
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
    let (_, layers) = model.forward_with_weights(one.tokens_tensor(device))?;
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
    let layers = match model {
        Model::Encoder(encoder) => {
            for (layer, weights) in attention_maps(encoder, tokens, device)?.iter().enumerate() {
                for head in 0..weights.n_heads {
                    let title = format!("{}: layer {layer}, head {head}", task.kind);
                    let path = run_dir.head_heatmap(layer, head)?;
                    plot::heatmap(&path, &title, weights.head(head), &names)?;
                }
            }
            return Ok(());
        }
        Model::Decoder(decoder) => {
            decoder
                .try_forward_with_weights(one(tokens, device), None)?
                .1
        }
        Model::EncoderDecoder(model) => {
            let source = one(batch.source_sequence(0), device);
            model
                .try_forward_with_weights(source, None, one(tokens, device), None)?
                .1
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
            plot::heatmap(&path, &title, weights, &names)?;
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
