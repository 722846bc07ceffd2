//! Evaluation: the held-out set, and a model's loss and accuracies on it (see
//! [`crate::metrics`] for what is counted).
//!
//! The held-out set comes from its own random stream ([`Stream::Eval`]), so it is the same for
//! every run of a seed, whatever the training draws.

use attn_model::TokenEncoder;
use burn::nn::loss::CrossEntropyLoss;
use burn::tensor::Device;

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::loss::{token_loss, value_of};
use crate::metrics::{Counts, EvalMetrics};
use crate::random::{Rng, Stream};
use crate::tasks::{Batch, TaskConfig};

/// The held-out set: `eval_sequences` examples from their own stream, in batches of
/// `max(batch_size, 256)`.
pub fn eval_set(config: &TrainConfig) -> Vec<Batch> {
    let mut rng = Rng::stream(config.seed, Stream::Eval);
    let chunk = config.batch_size.max(256);
    let mut left = config.eval_sequences;
    let mut batches = Vec::new();
    while left > 0 {
        let n = left.min(chunk);
        batches.push(config.task.batch(n, &mut rng));
        left -= n;
    }
    batches
}

/// Loss and accuracies of `model` (in evaluation mode: no dropout) on `eval_set`.
///
/// # Errors
///
/// [`TrainError::Config`] when results cannot be read back from the device.
pub fn evaluate(
    model: &TokenEncoder,
    task: &TaskConfig,
    eval_set: &[Batch],
    loss_fn: &CrossEntropyLoss,
    device: &Device,
) -> Result<EvalMetrics, TrainError> {
    let mut counts = Counts::default();
    for batch in eval_set {
        let logits = model.forward(batch.tokens_tensor(device)); // [batch, seq_len, n_classes]
        let predictions = logits.clone().argmax(2).squeeze_dim::<2>(2); // [batch, seq_len]
        let loss = value_of(token_loss(loss_fn, logits, batch.targets_tensor(device)))?;
        let predictions = predictions
            .into_data()
            .try_into_vec_as::<i64>()
            .map_err(|e| TrainError::Config(format!("cannot read predictions back: {e:?}")))?;
        counts.add(Counts::score(
            &predictions,
            batch,
            loss,
            task.ignored_class(),
        ));
    }
    Ok(counts.metrics())
}
