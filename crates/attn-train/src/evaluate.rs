//! Evaluation: the held-out set, and a model's loss and accuracies on it (see
//! [`crate::metrics`] for what is counted).
//!
//! The held-out set comes from its own random stream ([`Stream::Eval`]), so it is the same for
//! every run of a seed, whatever the training draws; for `add` and `translate` it holds only
//! held-out prompts ([`Split::HeldOut`]), which no training batch contains.
//!
//! The loss is teacher-forced on every task. The accuracies are the encoder's argmax, and for
//! the generating tasks the answers generated greedily through the key/value cache
//! ([`Model::predictions`]): sequence accuracy is then exact match of the whole answer.

use burn::nn::loss::CrossEntropyLoss;
use burn::tensor::Device;

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::loss::{token_loss, value_of};
use crate::metrics::{Counts, EvalMetrics};
use crate::model::Model;
use crate::random::{Rng, Stream};
use crate::tasks::{Batch, Split, TaskConfig};

/// The held-out set: `eval_sequences` examples from their own stream, in batches of
/// `max(batch_size, 256)`.
pub fn eval_set(config: &TrainConfig) -> Vec<Batch> {
    let mut rng = Rng::stream(config.seed, Stream::Eval);
    let chunk = config.batch_size.max(256);
    let mut left = config.eval_sequences;
    let mut batches = Vec::new();
    while left > 0 {
        let n = left.min(chunk);
        batches.push(config.task.batch_from(Split::HeldOut, n, &mut rng));
        left -= n;
    }
    batches
}

/// Loss and accuracies of `model` (in evaluation mode: no dropout) on `eval_set`.
///
/// The encoder's predictions come from the same forward pass as the loss; a decoder's are
/// generated, one more pass per answer token.
///
/// # Errors
///
/// [`TrainError::Model`] when the model cannot run, [`TrainError::Config`] when results cannot
/// be read back from the device.
pub fn evaluate(
    model: &Model,
    task: &TaskConfig,
    eval_set: &[Batch],
    loss_fn: &CrossEntropyLoss,
    device: &Device,
) -> Result<EvalMetrics, TrainError> {
    let mut counts = Counts::default();
    for batch in eval_set {
        let logits = model.logits(batch, device)?; // [batch, seq_len, n_classes]
        let predictions = model.predictions(task, batch, logits.clone(), device)?; // [batch, seq_len]
        let loss = value_of(token_loss(loss_fn, logits, batch.targets_tensor(device)))?;
        counts.add(Counts::score(
            &predictions,
            batch,
            loss,
            task.ignored_class(),
        ));
    }
    Ok(counts.metrics())
}
