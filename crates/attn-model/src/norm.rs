//! The normalisations the blocks use: LayerNorm, and RMSNorm (Zhang & Sennrich 2019: Llama,
//! Qwen, Mistral), one [`Norm`] for a decoder block to hold either.
//!
//! LayerNorm as the blocks use it: burn's [`burn::nn::LayerNorm`] fields and record, computed
//! by [`crate::ops::layer_norm`], whose backward under autodiff is one operation.
//!
//! `y = γ ∘ (x − μ) / √(σ² + ε) + β` over the last dimension, with the biased variance `σ²`
//! (Ba et al., 2016; PyTorch's `nn.LayerNorm`).
//!
//! The fields, their names and their types are burn's, so a record saved from a block built
//! on burn's `LayerNorm` loads into this one, and a state-dict path such as `norm_ff.gamma`
//! is unchanged.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Initializer, RmsNorm, RmsNormConfig};
use burn::tensor::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

/// Configuration of a [`LayerNorm`], as burn's `LayerNormConfig`.
#[derive(Config, Debug)]
pub struct LayerNormConfig {
    /// The size of the last dimension.
    pub d_model: usize,
    /// Added to the variance; `1e-5` as PyTorch.
    #[config(default = 1e-5)]
    pub epsilon: f64,
}

impl LayerNormConfig {
    /// `γ` of ones and `β` of zeros.
    pub fn init(&self, device: &Device) -> LayerNorm {
        LayerNorm {
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: Some(Initializer::Zeros.init([self.d_model], device)),
            epsilon: self.epsilon,
        }
    }
}

/// LayerNorm over the last dimension.
#[derive(Module, Debug)]
pub struct LayerNorm {
    /// The scale `γ`, `[d_model]`.
    pub gamma: Param<Tensor<1>>,
    /// The shift `β`, `[d_model]`; `None` leaves it out.
    pub beta: Option<Param<Tensor<1>>>,
    /// Added to the variance.
    epsilon: f64,
}

impl LayerNorm {
    /// The normalised, scaled and shifted rows of `x`, `[.., d_model]`.
    ///
    /// # Panics
    /// If the last dimension of `x` is not `d_model` (as burn's `LayerNorm`).
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let gamma = self.gamma.val();
        let [d_model] = gamma.dims();
        let last = x.dims()[D - 1];
        assert_eq!(
            last, d_model,
            "LayerNorm over {d_model} features got an input whose last dimension is {last}"
        );
        let Some(beta) = self.beta.as_ref().map(Param::val) else {
            return burn::tensor::module::layer_norm(x, gamma, None, self.epsilon);
        };
        // Half precision cannot hold the sums of squares: normalise in f32, as burn does.
        match x.dtype() {
            dtype @ (DType::F16 | DType::BF16) => crate::ops::layer_norm(
                x.cast(DType::F32),
                gamma.cast(DType::F32),
                beta.cast(DType::F32),
                self.epsilon,
            )
            .cast(dtype),
            _ => crate::ops::layer_norm(x, gamma, beta, self.epsilon),
        }
    }

    /// The epsilon added to the variance.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }
}

/// Which normalisation a block uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NormKind {
    /// LayerNorm: centred and scaled, `γ`, `β` (the paper, GPT-2, BERT).
    #[default]
    Layer,
    /// RMSNorm: scaled by the root mean square only, `γ`, no `β`:
    /// `y = γ ∘ x / √(mean(x²) + ε)` (Llama, Qwen, Mistral).
    Rms,
}

impl NormKind {
    /// A norm of this kind over `d_model` features: `γ` of ones (and `β` of zeros).
    pub fn init(self, d_model: usize, epsilon: f64, device: &Device) -> Norm {
        match self {
            NormKind::Layer => Norm::Layer(
                LayerNormConfig::new(d_model)
                    .with_epsilon(epsilon)
                    .init(device),
            ),
            NormKind::Rms => Norm::Rms(
                RmsNormConfig::new(d_model)
                    .with_epsilon(epsilon)
                    .init(device),
            ),
        }
    }
}

/// A decoder block's norm: [`LayerNorm`] or burn's [`RmsNorm`] module, applied through
/// [`crate::ops::rms_norm`] (which computes in f32 whatever the input's type, as transformers'
/// `LlamaRMSNorm` does, and in one pass on flex).
#[derive(Module, Debug)]
pub enum Norm {
    /// LayerNorm.
    Layer(LayerNorm),
    /// RMSNorm.
    Rms(RmsNorm),
}

impl Norm {
    /// The normalised rows of `x`, `[.., d_model]`.
    ///
    /// # Panics
    /// If the last dimension of `x` is not `d_model`.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Norm::Layer(norm) => norm.forward(x),
            Norm::Rms(norm) => crate::ops::rms_norm(x, norm.gamma.val(), norm.epsilon),
        }
    }

    /// Which kind this is.
    pub fn kind(&self) -> NormKind {
        match self {
            Norm::Layer(_) => NormKind::Layer,
            Norm::Rms(_) => NormKind::Rms,
        }
    }

    /// The scale `γ`.
    pub fn gamma(&self) -> &Param<Tensor<1>> {
        match self {
            Norm::Layer(norm) => &norm.gamma,
            Norm::Rms(norm) => &norm.gamma,
        }
    }

    /// The width it normalises, read without initialising a lazy parameter.
    pub fn d_model(&self) -> usize {
        self.gamma().lazy_shape().dims::<1>()[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::module::Module;
    use burn::nn::LayerNormConfig as BurnLayerNormConfig;

    #[test]
    fn a_file_saved_from_burns_layer_norm_loads_and_gives_burns_output() {
        let dir = std::env::temp_dir().join(format!("attn-model-norm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for_each_device(|d| {
            let mut rng = SeededRng::new(7);
            let mut burns = BurnLayerNormConfig::new(16)
                .with_epsilon(1e-12)
                .init(&d.device);
            burns.gamma = Param::from_tensor(rng.tensor([16], &d.device));
            burns.beta = Some(Param::from_tensor(rng.tensor([16], &d.device)));
            let path = dir.join(format!("{}.bpk", d.name));
            burns.clone().save_file(&path).expect("save burn's record");
            let ours = LayerNormConfig::new(16)
                .with_epsilon(1e-12)
                .init(&d.device)
                .try_load_file(&path)
                .expect("burn's record loads");
            let x = rng.tensor([2, 3, 16], &d.device);
            assert_close_slices(
                &to_vec(ours.forward(x.clone())),
                &to_vec(burns.forward(x)),
                1e-5,
                1e-5,
                &format!("{}: ours vs burn's LayerNorm", d.name),
            );
            assert_eq!(ours.epsilon(), 1e-12);
        });
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    #[should_panic(expected = "LayerNorm over 16 features got an input whose last dimension is 8")]
    fn a_wrong_width_names_both_numbers() {
        let device = Device::flex();
        let norm = LayerNormConfig::new(16).init(&device);
        norm.forward(Tensor::<2>::zeros([2, 8], &device));
    }
}
