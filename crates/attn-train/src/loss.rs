//! The objective, the same in training and in evaluation: mean cross-entropy over the scored
//! positions of a batch.
//!
//! ```text
//! loss = mean over scored positions p of  −log softmax(logits_p)[y_p]
//! ```
//!
//! A task with an ignored class (the `context` task's filler words) scores only the other
//! positions.

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::tensor::{Device, Int, Tensor};

use crate::error::TrainError;
use crate::tasks::TaskConfig;

/// Cross-entropy over classes that skips the task's ignored class, if it has one.
pub fn loss_function(task: &TaskConfig, device: &Device) -> CrossEntropyLoss {
    CrossEntropyLossConfig::new()
        .with_pad_tokens(task.ignored_class().map(|c| vec![c]))
        .init(device)
}

/// Mean cross-entropy per scored position.
///
/// # Shapes
///
/// - logits: `[batch, seq_len, n_classes]`
/// - targets: `[batch, seq_len]`
/// - output: `[1]`
pub fn token_loss(
    loss_fn: &CrossEntropyLoss,
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
) -> Tensor<1> {
    let [batch, seq_len, n_classes] = logits.dims();
    let logits = logits.reshape([batch * seq_len, n_classes]); // [batch * seq_len, n_classes]
    let targets = targets.reshape([batch * seq_len]); // [batch * seq_len]
    loss_fn.forward(logits, targets)
}

/// Reads a loss back to the host.
///
/// # Errors
///
/// [`TrainError::Config`] when the device cannot give the value back.
pub fn value_of(loss: Tensor<1>) -> Result<f64, TrainError> {
    loss.try_into_scalar::<f32>().map(f64::from).map_err(|e| {
        TrainError::Config(format!("cannot read the loss back from the device: {e:?}"))
    })
}
