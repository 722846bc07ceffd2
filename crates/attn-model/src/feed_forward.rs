//! The position-wise feed-forward network (Vaswani et al. 2017, §3.3):
//!
//! ```text
//! FFN(x) = act(x · W_1 + b_1) · W_2 + b_2
//! ```
//!
//! applied to every position alone. The paper uses ReLU; GELU (Hendrycks & Gimpel 2016,
//! the exact `erf` form, PyTorch's `activation="gelu"`) is the option BERT and GPT made common,
//! and GPT-2 uses its tanh approximation (Hugging Face's `gelu_new`).
//!
//! The gated form (Shazeer 2020's GLU variants; SwiGLU with SiLU: Llama, Qwen, Mistral)
//! multiplies the activation by a second projection of the same input:
//!
//! ```text
//! FFN(x) = (act(x · W_gate) ∘ (x · W_1)) · W_2
//! ```

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::Device;
use burn::tensor::Tensor;
use burn::tensor::activation::{relu, silu};
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, check_dropout, check_nonzero};
use crate::project::project;

/// The non-linearity between the two layers of the feed-forward network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activation {
    /// `max(0, x)`, as in the paper.
    #[default]
    Relu,
    /// `x · Φ(x)` with the exact normal CDF (not the tanh approximation).
    Gelu,
    /// GELU's tanh approximation, `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))` (GPT-2's
    /// `gelu_new`); it differs from [`Gelu`](Self::Gelu) by less than `1e-3`.
    GeluTanh,
    /// `x · σ(x)` (SiLU, or Swish with β = 1), the gate of SwiGLU.
    Silu,
}

impl Activation {
    /// Applies the activation element-wise.
    ///
    /// # Shapes
    /// - `x`: any; returns the same shape
    ///
    /// ```
    /// use attn_model::Activation;
    /// use burn::tensor::{Device, Tensor};
    ///
    /// let x = Tensor::<1>::from_floats([-1.0, 1.0], &Device::flex());
    /// let relu = Activation::Relu.apply(x.clone()).into_data().try_into_vec_as::<f32>().unwrap();
    /// assert_eq!(relu, [0.0, 1.0]);
    /// // GELU(1) = Φ(1) = 0.841345, GELU(-1) = -(1 - Φ(1)) = -0.158655
    /// let gelu = Activation::Gelu.apply(x).into_data().try_into_vec_as::<f32>().unwrap();
    /// assert!((gelu[1] - 0.841_345).abs() < 1e-5 && (gelu[0] + 0.158_655).abs() < 1e-5);
    /// // The tanh form: 1/2 · (1 + tanh(√(2/π) · 1.044715)) = 0.841192
    /// let x = Tensor::<1>::from_floats([1.0], &Device::flex());
    /// let tanh = Activation::GeluTanh.apply(x).into_data().try_into_vec_as::<f32>().unwrap();
    /// assert!((tanh[0] - 0.841_192).abs() < 1e-5);
    /// ```
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Activation::Relu => relu(x),
            Activation::Gelu => crate::ops::gelu(x),
            Activation::GeluTanh => crate::ops::gelu_tanh(x),
            Activation::Silu => silu(x),
        }
    }
}

/// Configuration of [`FeedForward`].
#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    /// Input and output width.
    pub d_model: usize,
    /// Hidden width (2048 for `d_model = 512` in the paper).
    pub d_ff: usize,
    /// The non-linearity.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// Dropout on the hidden activations while training.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Whether a gate `act(x · W_gate)` multiplies the expansion (SwiGLU with
    /// [`Activation::Silu`]).
    #[config(default = false)]
    pub gated: bool,
    /// Whether the projections have biases.
    #[config(default = true)]
    pub bias: bool,
}

impl FeedForwardConfig {
    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for a zero `d_model` or `d_ff`, [`ModelError::InvalidDropout`].
    pub fn validate(&self) -> Result<(), ModelError> {
        check_nonzero("d_model", self.d_model)?;
        check_nonzero("d_ff", self.d_ff)?;
        check_dropout(self.dropout)
    }

    /// Builds the module after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<FeedForward, ModelError> {
        self.validate()?;
        let linear = |d_input, d_output| {
            LinearConfig::new(d_input, d_output)
                .with_bias(self.bias)
                .init(device)
        };
        Ok(FeedForward {
            gate: self.gated.then(|| linear(self.d_model, self.d_ff)),
            expand: linear(self.d_model, self.d_ff),
            contract: linear(self.d_ff, self.d_model),
            dropout: DropoutConfig::new(self.dropout).init(),
            activation: self.activation,
        })
    }
}

/// `FFN(x) = act(x · W_1 + b_1) · W_2 + b_2`, or the gated
/// `(act(x · W_gate) ∘ (x · W_1)) · W_2`, position by position.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `W_gate`: `d_model → d_ff`, in a gated network (Hugging Face's `gate_proj`).
    pub(crate) gate: Option<Linear>,
    /// `W_1, b_1`: `d_model → d_ff` (PyTorch's `linear1`, Hugging Face's `up_proj`).
    pub(crate) expand: Linear,
    /// `W_2, b_2`: `d_ff → d_model` (PyTorch's `linear2`, Hugging Face's `down_proj`).
    pub(crate) contract: Linear,
    dropout: Dropout,
    #[module(skip)]
    activation: Activation,
}

impl FeedForward {
    /// Applies the network to every position.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    /// - returns: `[batch, seq_len, d_model]`
    ///
    /// # Panics
    /// When the last dimension of `x` is not `d_model`, naming both.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq_len, d_model] = x.dims();
        assert_eq!(
            d_model,
            self.d_model(),
            "feed-forward input is [batch {batch}, seq_len {seq_len}, d_model {d_model}], \
             the layer was built for d_model {}",
            self.d_model()
        );
        let hidden = match &self.gate {
            Some(gate) if self.activation == Activation::Silu => {
                let mut gate_up = crate::project::project_many(&[gate, &self.expand], x);
                let (up, gate) = (gate_up.pop(), gate_up.pop());
                let (Some(gate), Some(up)) = (gate, up) else {
                    unreachable!("two projections give two outputs")
                };
                crate::ops::silu_gate(gate, up)
            }
            Some(gate) => {
                self.activation.apply(project(gate, x.clone())) * project(&self.expand, x)
            }
            None => self.activation.apply(project(&self.expand, x)),
        }; // [batch, seq_len, d_ff]
        // PyTorch's TransformerEncoderLayer drops hidden units too; the paper only drops the
        // sub-layer's output (done by the block around it).
        project(&self.contract, self.dropout.forward(hidden)) // [batch, seq_len, d_model]
    }

    /// Input and output width.
    pub fn d_model(&self) -> usize {
        self.expand.weight.shape().dims::<2>()[0]
    }

    /// Hidden width.
    pub fn d_ff(&self) -> usize {
        self.expand.weight.shape().dims::<2>()[1]
    }

    /// Whether a gate multiplies the expansion.
    pub fn is_gated(&self) -> bool {
        self.gate.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};

    #[test]
    fn acts_on_each_position_alone() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(21);
            let ff = FeedForwardConfig::new(12, 7)
                .with_activation(Activation::Gelu)
                .init(&d.device)
                .expect("valid");
            assert_eq!((ff.d_model(), ff.d_ff()), (12, 7));
            let x = rng.tensor([3, 5, 12], &d.device);
            let all = ff.forward(x.clone());
            assert_eq!(all.dims(), [3, 5, 12]);
            let one = ff.forward(x.slice([1..2, 3..4, 0..12]));
            assert_close_slices(
                &to_vec(one),
                &to_vec(all.slice([1..2, 3..4, 0..12])),
                1e-6,
                1e-5,
                "position (1, 3) alone",
            );
        });
    }

    #[test]
    fn relu_network_matches_the_equation_by_hand() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(22);
            let ff = FeedForwardConfig::new(4, 6).init(&d.device).expect("valid");
            let x = rng.tensor([1, 2, 4], &d.device);
            let w1 = ff.expand.weight.val();
            let b1 = ff.expand.bias.as_ref().expect("bias").val();
            let w2 = ff.contract.weight.val();
            let b2 = ff.contract.bias.as_ref().expect("bias").val();
            let x2 = x.clone().reshape([2, 4]); // [seq_len, d_model]
            let hidden = (x2.matmul(w1) + b1.unsqueeze_dim::<2>(0)).clamp_min(0.0); // [seq_len, d_ff]
            let want = hidden.matmul(w2) + b2.unsqueeze_dim::<2>(0); // [seq_len, d_model]
            assert_close_slices(&to_vec(ff.forward(x)), &to_vec(want), 1e-6, 1e-5, "by hand");
        });
    }

    #[test]
    fn zero_sizes_and_bad_dropout_are_config_errors() {
        assert!(matches!(
            FeedForwardConfig::new(12, 0).validate(),
            Err(ModelError::ZeroSize { what: "d_ff" })
        ));
        assert!(matches!(
            FeedForwardConfig::new(12, 7).with_dropout(2.0).validate(),
            Err(ModelError::InvalidDropout { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "built for d_model 12")]
    fn wrong_width_panics_naming_both_widths() {
        let device = Device::flex();
        let ff = FeedForwardConfig::new(12, 7).init(&device).expect("valid");
        ff.forward(Tensor::zeros([1, 2, 8], &device));
    }
}
