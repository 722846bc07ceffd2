//! Everything a run needs, as one serde value: the task, the model sizes, the optimizer and the
//! loop. `config.json` in the output folder is this value, and `--config FILE.json` reads one
//! (missing fields take the defaults below).

use attn_model::{Activation, NormPlacement, TokenEncoderConfig};
use attn_pos::PositionalScheme;
use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::schedule::{Decay, LrSchedule};
use crate::tasks::TaskConfig;

/// The positional schemes by their command-line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PosName {
    /// No positional information: attention sees a bag of tokens.
    None,
    /// Fixed sines and cosines added to the embeddings (Vaswani et al. 2017).
    Sinusoidal,
    /// A learned vector per position added to the embeddings.
    Learned,
    /// Rotary embeddings applied to queries and keys (Su et al. 2021).
    Rope,
    /// Linear distance biases on the attention scores (Press et al. 2022).
    Alibi,
}

impl PosName {
    /// The scheme with its usual constants; `learned` gets one row per position of `seq_len`.
    pub fn scheme(self, seq_len: usize) -> PositionalScheme {
        match self {
            Self::None => PositionalScheme::None,
            Self::Sinusoidal => PositionalScheme::sinusoidal(),
            Self::Learned => PositionalScheme::learned(seq_len),
            Self::Rope => PositionalScheme::rotary(),
            Self::Alibi => PositionalScheme::alibi(),
        }
    }
}

/// Where LayerNorm sits in each encoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Norm {
    /// After each residual sum, as in the paper.
    Post,
    /// Before each sub-layer, inside the residual branch (GPT-2 and later).
    Pre,
}

/// The feed-forward non-linearity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Act {
    /// `max(0, x)`, as in the paper.
    Relu,
    /// Gaussian error linear unit.
    Gelu,
}

/// The encoder's sizes and choices.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Width of every token vector.
    pub d_model: usize,
    /// Attention heads per layer.
    pub n_heads: usize,
    /// Encoder layers.
    pub n_layers: usize,
    /// Hidden width of the feed-forward block.
    pub d_ff: usize,
    /// Dropout probability while training (off during evaluation).
    pub dropout: f64,
    /// How positions enter the model.
    pub pos: PositionalScheme,
    /// Pre- or post-norm layers.
    pub norm: Norm,
    /// Feed-forward non-linearity.
    pub activation: Act,
    /// A LayerNorm after the last layer (advisable with pre-norm).
    pub final_norm: bool,
    /// Multiply the embeddings by `sqrt(d_model)` (paper section 3.4).
    pub scale_embedding: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            n_heads: 4,
            n_layers: 2,
            d_ff: 256,
            dropout: 0.0,
            pos: PosName::Learned.scheme(TaskConfig::default().seq_len),
            norm: Norm::Pre,
            activation: Act::Relu,
            final_norm: true,
            scale_embedding: true,
        }
    }
}

/// Which of burn's optimizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// Adam (Kingma and Ba 2015); weight decay, if any, is added to the gradient.
    Adam,
    /// AdamW (Loshchilov and Hutter 2019): weight decay applied to the weights directly.
    Adamw,
}

/// The optimizer, its learning-rate schedule and gradient clipping.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Adam or AdamW.
    pub kind: OptimizerKind,
    /// Peak learning rate, reached at the end of warm-up.
    pub lr: f64,
    /// Updates spent warming up linearly to `lr`.
    pub warmup_steps: usize,
    /// Decay after warm-up.
    pub decay: Decay,
    /// The learning rate at the last step, as a fraction of `lr`.
    pub final_fraction: f64,
    /// Weight decay (0 turns it off).
    pub weight_decay: f64,
    /// Adam's first-moment decay.
    pub beta_1: f32,
    /// Adam's second-moment decay.
    pub beta_2: f32,
    /// Adam's epsilon.
    pub epsilon: f32,
    /// Largest global L2 norm of the gradient; larger gradients are scaled down to it.
    pub grad_clip: Option<f32>,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Adam,
            lr: 3e-3,
            warmup_steps: 100,
            decay: Decay::Linear,
            final_fraction: 0.0,
            weight_decay: 0.0,
            beta_1: 0.9,
            beta_2: 0.98,
            epsilon: 1e-9,
            grad_clip: Some(1.0),
        }
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// What to learn.
    pub task: TaskConfig,
    /// The encoder.
    pub model: ModelConfig,
    /// How to learn it.
    pub optim: OptimConfig,
    /// Optimizer updates in the run; the learning-rate schedule spans them.
    pub steps: usize,
    /// Sequences per update.
    pub batch_size: usize,
    /// Seed of every random stream of the run.
    pub seed: u64,
    /// Backend name (see [`crate::backend`]).
    pub device: String,
    /// Evaluate on the held-out set every this many steps (and at the end).
    pub eval_every: usize,
    /// Sequences in the held-out set.
    pub eval_sequences: usize,
    /// Write a checkpoint every this many steps (and at the end); 0 only at the end.
    pub checkpoint_every: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            task: TaskConfig::default(),
            model: ModelConfig::default(),
            optim: OptimConfig::default(),
            steps: 2000,
            batch_size: 64,
            seed: 1,
            device: crate::backend::default_backend().to_string(),
            eval_every: 250,
            eval_sequences: 512,
            checkpoint_every: 500,
        }
    }
}

impl TrainConfig {
    /// Checks every part of the configuration before anything is built.
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] for a loop or optimizer setting that cannot work,
    /// [`TrainError::Task`] for task sizes, [`TrainError::Model`] for the encoder.
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |reason: String| Err(TrainError::Config(reason));
        for (what, value) in [
            ("steps", self.steps),
            ("batch_size", self.batch_size),
            ("eval_every", self.eval_every),
            ("eval_sequences", self.eval_sequences),
        ] {
            if value == 0 {
                return bad(format!("{what} is 0; it must be at least 1"));
            }
        }
        let o = &self.optim;
        if !(o.lr.is_finite() && o.lr > 0.0) {
            return bad(format!("lr must be finite and positive, got {}", o.lr));
        }
        if !(0.0..=1.0).contains(&o.final_fraction) {
            return bad(format!(
                "final_fraction must be in [0, 1], got {}",
                o.final_fraction
            ));
        }
        if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
            return bad(format!("weight_decay must be >= 0, got {}", o.weight_decay));
        }
        if let Some(clip) = o.grad_clip
            && !(clip.is_finite() && clip > 0.0)
        {
            return bad(format!("grad_clip must be finite and positive, got {clip}"));
        }
        if let PositionalScheme::Learned { max_len } = self.model.pos
            && max_len < self.task.seq_len
        {
            return bad(format!(
                "learned positions have max_len {max_len} but sequences are {} long",
                self.task.seq_len
            ));
        }
        self.task.validate()?;
        self.encoder_config().validate()?;
        Ok(())
    }

    /// The encoder this run trains.
    pub fn encoder_config(&self) -> TokenEncoderConfig {
        let m = &self.model;
        TokenEncoderConfig::new(
            self.task.model_vocab(),
            self.task.n_classes(),
            m.d_model,
            m.n_heads,
            m.n_layers,
            m.d_ff,
            m.pos.clone(),
        )
        .with_dropout(m.dropout)
        .with_norm(match m.norm {
            Norm::Post => NormPlacement::Post,
            Norm::Pre => NormPlacement::Pre,
        })
        .with_activation(match m.activation {
            Act::Relu => Activation::Relu,
            Act::Gelu => Activation::Gelu,
        })
        .with_final_norm(m.final_norm)
        .with_scale_embedding(m.scale_embedding)
    }

    /// The learning rate as a function of the step.
    pub fn schedule(&self) -> LrSchedule {
        LrSchedule {
            peak: self.optim.lr,
            warmup_steps: self.optim.warmup_steps,
            total_steps: self.steps,
            decay: self.optim.decay,
            final_fraction: self.optim.final_fraction,
        }
    }

    /// The parts that fix the shapes of the weights and the meaning of the data: a checkpoint
    /// written under one of these cannot continue under another.
    pub fn identity(&self) -> serde_json::Value {
        serde_json::json!({ "task": self.task, "model": self.model, "seed": self.seed })
    }

    /// Reads a configuration from JSON text.
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] naming the JSON problem (unknown fields are refused, so a typo
    /// does not silently fall back to a default).
    pub fn from_json(text: &str) -> Result<Self, TrainError> {
        serde_json::from_str(text).map_err(|e| TrainError::Config(format!("bad config JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskKind;

    #[test]
    fn defaults_are_valid_and_round_trip_through_json() {
        let config = TrainConfig::default();
        config.validate().expect("defaults are valid");
        let json = serde_json::to_string_pretty(&config).expect("serialises");
        let back = TrainConfig::from_json(&json).expect("parses");
        assert_eq!(back.identity(), config.identity());
        assert_eq!(back.steps, config.steps);
    }

    #[test]
    fn a_partial_file_fills_in_defaults() {
        let config = TrainConfig::from_json(r#"{"task": {"kind": "sort"}, "steps": 7}"#)
            .expect("partial config parses");
        assert_eq!(config.task.kind, TaskKind::Sort);
        assert_eq!(config.task.seq_len, TaskConfig::default().seq_len);
        assert_eq!(config.steps, 7);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = TrainConfig::from_json(r#"{"stepz": 7}"#).expect_err("typo");
        assert!(err.to_string().contains("stepz"), "{err}");
    }

    #[test]
    fn validate_rejects_zero_steps_and_bad_heads() {
        let config = TrainConfig {
            steps: 0,
            ..TrainConfig::default()
        };
        assert!(
            config
                .validate()
                .expect_err("zero steps")
                .to_string()
                .contains("steps")
        );
        let mut config = TrainConfig::default();
        config.model.n_heads = 5;
        assert!(matches!(config.validate(), Err(TrainError::Model(_))));
    }
}
