//! Everything a run needs, as one serde value: the task, the model sizes, the optimizer and the
//! loop. `config.json` in the output folder is this value, and `--config FILE.json` reads one
//! (missing fields take the defaults below).
//!
//! The command line's flags are [`Overrides`], applied on top by [`TrainConfig::apply`]: the
//! defaults, then the file, then the flags.

use std::path::{Path, PathBuf};

use attn_model::{
    Activation, EncoderDecoderConfig, NormPlacement, TokenDecoderConfig, TokenEncoderConfig,
};
use attn_pos::PositionalScheme;
use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::schedule::{Decay, LrSchedule};
use crate::tasks::{Architecture, Size, TaskConfig, TaskKind};
use crate::text::TokenizerChoice;

/// The most bytes a configuration file may hold.
pub const CONFIG_FILE_LIMIT: u64 = 1 << 20;
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

/// The positional scheme of [`ModelConfig::default`].
const DEFAULT_POS: PosName = PosName::Learned;

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
    /// The decoder's output head is the transposed embedding table (GPT-2, nanoGPT).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tie_embeddings: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            n_heads: 4,
            n_layers: 2,
            d_ff: 256,
            dropout: 0.0,
            pos: DEFAULT_POS.scheme(TaskConfig::default().seq_len),
            norm: Norm::Pre,
            activation: Act::Relu,
            final_norm: true,
            scale_embedding: true,
            tie_embeddings: false,
        }
    }
}

/// Which of burn's optimizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// Adam (Kingma and Ba 2015); weight decay, if any, is added to the gradient.
    Adam,
    /// AdamW (Loshchilov and Hutter 2019): weight decay applied to the weights directly, to
    /// matrices only (biases and LayerNorm parameters do not decay).
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
    /// Backend name (see [`crate::backend`]), or a comma-separated list of them (`flex,flex`,
    /// `wgpu:0,wgpu:1`) for data-parallel training, one replica per entry, the first holding
    /// the model ([`crate::train::update_data_parallel`]).
    pub device: String,
    /// Evaluate on the held-out set every this many steps (and at the end).
    pub eval_every: usize,
    /// Sequences in the held-out set.
    pub eval_sequences: usize,
    /// Write a checkpoint every this many steps (and at the end); 0 only at the end.
    pub checkpoint_every: usize,
    /// Also write a checkpoint when this many seconds have passed since the last one; 0 turns
    /// the clock off. These checkpoints add no row to `metrics.csv`, so they leave a run's
    /// numbers as they were.
    pub checkpoint_seconds: f64,
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
            checkpoint_seconds: 60.0,
        }
    }
}

/// The command line's changes to a configuration: each flag given replaces one setting of the
/// defaults or of the `--config` file ([`TrainConfig::apply`]). A flag not given changes
/// nothing, so none has a value of its own; each help text states the default it overrides,
/// read from [`TrainConfig::default`] (`stated_default`).
#[derive(Clone, Debug, Default, clap::Args)]
#[command(mut_args = state_default)]
pub struct Overrides {
    /// The task: copy, reverse, sort, context (the "apple" problem), add (a decoder
    /// generates the sum), translate (an encoder-decoder writes digit words as digits,
    /// backwards) or text (a language model on --data; it switches to nanoGPT's recipe:
    /// --seq-len 64, GELU, a tied head, AdamW with weight decay 0.1 on matrices, cosine decay
    /// to 0.1 × lr)
    #[arg(long, value_enum, help_heading = "Task and data")]
    pub task: Option<TaskKind>,
    /// text: the text files to train on, in order (a folder stands for its files); the first
    /// 90% trains, the last 10% validates
    #[arg(long, value_name = "FILE", num_args = 1.., help_heading = "Task and data")]
    pub data: Option<Vec<PathBuf>>,
    /// text: char (one token per character), bpe:N (a byte-level BPE of N tokens trained on
    /// the text) or the path of a tokenizer.json
    #[arg(
        long,
        value_name = "char|bpe:N|FILE.json",
        help_heading = "Task and data"
    )]
    pub tokenizer: Option<TokenizerChoice>,
    /// text: read bytes that are not UTF-8 as U+FFFD instead of refusing the file
    #[arg(long, help_heading = "Task and data")]
    pub lossy: bool,
    /// Backend, one compiled into this build (default: flex where compiled in, else the first
    /// backend compiled in); a comma-separated list (`flex,flex`, `wgpu:0,wgpu:1`) trains one
    /// replica per entry, data-parallel, the batch shared among them
    #[arg(
        long,
        visible_alias = "devices",
        value_name = "flex|ndarray|wgpu|vulkan|metal|cuda",
        help_heading = "Loop"
    )]
    pub device: Option<String>,
    /// Optimizer updates; the learning-rate schedule spans them
    #[arg(long, help_heading = "Loop")]
    pub steps: Option<usize>,
    /// Sequences per update
    #[arg(long, help_heading = "Loop")]
    pub batch_size: Option<usize>,
    /// Tokens per sequence
    #[arg(long, help_heading = "Task and data")]
    pub seq_len: Option<usize>,
    /// Distinct symbols for copy, reverse and sort
    #[arg(long, help_heading = "Task and data")]
    pub vocab: Option<usize>,
    /// context: least distance between the ambiguous word and its cue
    #[arg(long, help_heading = "Task and data")]
    pub min_distance: Option<usize>,
    /// add: digits of each operand
    #[arg(long, help_heading = "Task and data")]
    pub digits: Option<usize>,
    /// context: the long-range setting, the cue 30 or more positions away (seq_len 48 unless
    /// --seq-len says otherwise)
    #[arg(long, help_heading = "Task and data")]
    pub long_range: bool,
    /// Model width
    #[arg(long, help_heading = "Model")]
    pub d_model: Option<usize>,
    /// Attention heads per layer
    #[arg(long, help_heading = "Model")]
    pub n_heads: Option<usize>,
    /// Encoder layers
    #[arg(long, help_heading = "Model")]
    pub n_layers: Option<usize>,
    /// Feed-forward hidden width
    #[arg(long, help_heading = "Model")]
    pub d_ff: Option<usize>,
    /// Dropout probability while training
    #[arg(long, allow_negative_numbers = true, help_heading = "Model")]
    pub dropout: Option<f64>,
    /// Positional scheme
    #[arg(long, value_enum, help_heading = "Model")]
    pub pos: Option<PosName>,
    /// LayerNorm placement; post drops the final LayerNorm unless --final-norm true keeps it
    #[arg(long, value_enum, help_heading = "Model")]
    pub norm: Option<Norm>,
    /// A LayerNorm after the last layer (default: with pre-norm, not with post-norm, whose last
    /// block already ends in one)
    #[arg(long, help_heading = "Model")]
    pub final_norm: Option<bool>,
    /// Feed-forward non-linearity
    #[arg(long, value_enum, help_heading = "Model")]
    pub activation: Option<Act>,
    /// Adam or AdamW
    #[arg(long, value_enum, help_heading = "Optimizer")]
    pub optimizer: Option<OptimizerKind>,
    /// Peak learning rate
    #[arg(long, allow_negative_numbers = true, help_heading = "Optimizer")]
    pub lr: Option<f64>,
    /// Warm-up updates
    #[arg(long, help_heading = "Optimizer")]
    pub warmup_steps: Option<usize>,
    /// Learning-rate decay after warm-up
    #[arg(long, value_enum, help_heading = "Optimizer")]
    pub decay: Option<Decay>,
    /// Weight decay (AdamW: decoupled, on matrices only; Adam: added to the gradient)
    #[arg(long, allow_negative_numbers = true, help_heading = "Optimizer")]
    pub weight_decay: Option<f64>,
    /// Largest global gradient norm; 0 turns clipping off, negative or NaN is refused
    #[arg(long, allow_negative_numbers = true, help_heading = "Optimizer")]
    pub grad_clip: Option<f32>,
    /// Evaluate every this many steps
    #[arg(long, help_heading = "Loop")]
    pub eval_every: Option<usize>,
    /// Held-out sequences
    #[arg(long, help_heading = "Loop")]
    pub eval_sequences: Option<usize>,
    /// Checkpoint every this many steps; 0: only at the end
    #[arg(long, help_heading = "Run folder")]
    pub checkpoint_every: Option<usize>,
    /// Also checkpoint when this many seconds have passed since the last checkpoint; 0: never
    /// by time
    #[arg(long, allow_negative_numbers = true, help_heading = "Run folder")]
    pub checkpoint_seconds: Option<f64>,
    /// Seed of every random stream
    #[arg(long, help_heading = "Loop")]
    pub seed: Option<u64>,
}

/// Ends `arg`'s help text with the default it overrides, where it has one.
fn state_default(arg: clap::Arg) -> clap::Arg {
    match (stated_default(arg.get_id().as_str()), arg.get_help()) {
        (Some(value), Some(help)) => {
            let help = format!("{help} [default: {value}]");
            arg.help(help)
        }
        _ => arg,
    }
}

/// The setting each flag of [`Overrides`] replaces, as the flag would write it, read from
/// [`TrainConfig::default`]; `None` for a flag whose default is not one value.
fn stated_default(flag: &str) -> Option<String> {
    fn name(value: impl clap::ValueEnum) -> Option<String> {
        value
            .to_possible_value()
            .map(|value| value.get_name().to_string())
    }
    let defaults = TrainConfig::default();
    let (task, model, optim) = (&defaults.task, &defaults.model, &defaults.optim);
    Some(match flag {
        "task" => name(task.kind)?,
        "tokenizer" => task.text.tokenizer.to_string(),
        "steps" => defaults.steps.to_string(),
        "batch_size" => defaults.batch_size.to_string(),
        "seq_len" => task.seq_len.to_string(),
        "vocab" => task.vocab.to_string(),
        "min_distance" => task.min_distance.to_string(),
        "digits" => task.digits.to_string(),
        "d_model" => model.d_model.to_string(),
        "n_heads" => model.n_heads.to_string(),
        "n_layers" => model.n_layers.to_string(),
        "d_ff" => model.d_ff.to_string(),
        "dropout" => model.dropout.to_string(),
        "pos" => name(DEFAULT_POS)?,
        "norm" => name(model.norm)?,
        "activation" => name(model.activation)?,
        "optimizer" => name(optim.kind)?,
        "lr" => optim.lr.to_string(),
        "warmup_steps" => optim.warmup_steps.to_string(),
        "decay" => name(optim.decay)?,
        "weight_decay" => optim.weight_decay.to_string(),
        // No clipping is written `--grad-clip 0`.
        "grad_clip" => optim.grad_clip.unwrap_or(0.0).to_string(),
        "eval_every" => defaults.eval_every.to_string(),
        "eval_sequences" => defaults.eval_sequences.to_string(),
        "checkpoint_every" => defaults.checkpoint_every.to_string(),
        "checkpoint_seconds" => defaults.checkpoint_seconds.to_string(),
        "seed" => defaults.seed.to_string(),
        _ => return None,
    })
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
        let replicas = self.device.split(',').count();
        self.check_replicas(replicas, &format!("of `{}`", self.device))?;
        if self.model.n_layers == 0 {
            return bad("n_layers is 0; the encoder needs at least 1 layer".into());
        }
        if !(self.checkpoint_seconds.is_finite() && self.checkpoint_seconds >= 0.0) {
            return bad(format!(
                "checkpoint_seconds must be finite and >= 0, got {}",
                self.checkpoint_seconds
            ));
        }
        let o = &self.optim;
        for (what, beta) in [("beta_1", o.beta_1), ("beta_2", o.beta_2)] {
            if !(0.0..1.0).contains(&beta) {
                return bad(format!("Adam's {what} must be in [0, 1), got {beta}"));
            }
        }
        if !(o.epsilon.is_finite() && o.epsilon > 0.0) {
            return bad(format!(
                "Adam's epsilon must be finite and positive, got {}",
                o.epsilon
            ));
        }
        if o.warmup_steps > self.steps {
            return bad(format!(
                "warmup_steps is {} but the run has {} steps; the learning rate would never \
                 reach its peak (--warmup-steps at most --steps)",
                o.warmup_steps, self.steps
            ));
        }
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
            return bad(format!(
                "grad_clip must be finite and positive (or 0 for no clipping), got {clip}"
            ));
        }
        if let PositionalScheme::Learned { max_len } = self.model.pos
            && max_len < self.task.model_seq_len()
        {
            return bad(format!(
                "learned positions have max_len {max_len} but sequences are {} long",
                self.task.model_seq_len()
            ));
        }
        self.task.validate()?;
        match self.task.kind.architecture() {
            Architecture::Encoder => self.encoder_config().validate()?,
            Architecture::Decoder => self.decoder_config().validate()?,
            Architecture::EncoderDecoder => self.encoder_decoder_config().validate()?,
        }
        Ok(())
    }

    /// Checks that each of `replicas` devices (`devices` says which, as "of `flex,flex`" or
    /// "to train on") gets at least one sequence of a batch.
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] naming the batch size and the devices.
    pub(crate) fn check_replicas(&self, replicas: usize, devices: &str) -> Result<(), TrainError> {
        if replicas > self.batch_size {
            return Err(TrainError::Config(format!(
                "batch_size {} is smaller than the {replicas} devices {devices}: each replica \
                 needs at least one sequence",
                self.batch_size
            )));
        }
        Ok(())
    }

    /// The decoder-only language model this run trains (`add`).
    pub fn decoder_config(&self) -> TokenDecoderConfig {
        let m = &self.model;
        TokenDecoderConfig::new(
            self.task.model_vocab(),
            m.d_model,
            m.n_heads,
            m.n_layers,
            m.d_ff,
            m.pos.clone(),
        )
        .with_dropout(m.dropout)
        .with_norm(self.norm_placement())
        .with_activation(self.activation())
        .with_final_norm(m.final_norm)
        .with_scale_embedding(m.scale_embedding)
        .with_tie_embeddings(m.tie_embeddings)
    }

    /// The encoder-decoder this run trains (`translate`): `n_layers` blocks in each stack.
    pub fn encoder_decoder_config(&self) -> EncoderDecoderConfig {
        let m = &self.model;
        EncoderDecoderConfig::new(
            self.task.source_vocab(),
            self.task.model_vocab(),
            m.d_model,
            m.n_heads,
            m.n_layers,
            m.d_ff,
            m.pos.clone(),
        )
        .with_dropout(m.dropout)
        .with_norm(self.norm_placement())
        .with_activation(self.activation())
        .with_final_norm(m.final_norm)
    }

    fn norm_placement(&self) -> NormPlacement {
        match self.model.norm {
            Norm::Post => NormPlacement::Post,
            Norm::Pre => NormPlacement::Pre,
        }
    }

    fn activation(&self) -> Activation {
        match self.model.activation {
            Act::Relu => Activation::Relu,
            Act::Gelu => Activation::Gelu,
        }
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

    /// Reads a configuration from a JSON file (as [`from_json`](Self::from_json)): a regular
    /// file of at most [`CONFIG_FILE_LIMIT`] bytes.
    ///
    /// # Errors
    ///
    /// [`TrainError::Text`] when the file cannot be read, is not a regular file or is too
    /// large, [`TrainError::Config`] naming the JSON problem.
    pub fn from_file(path: &Path) -> Result<Self, TrainError> {
        // A regular file of a sensible size only: a FIFO would block, /dev/zero never end.
        let bytes = crate::files::read_bounded(path, CONFIG_FILE_LIMIT)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            TrainError::Config(format!("{} is not UTF-8 text: {e}", path.display()))
        })?;
        Self::from_json(&text).map_err(|e| match e {
            TrainError::Config(reason) => {
                TrainError::Config(format!("{}: {reason}", path.display()))
            }
            other => other,
        })
    }

    /// Replaces every setting that `overrides` gives.
    ///
    /// A learned position table follows the sequence length when `--seq-len`, `--long-range`,
    /// `--digits` or `--pos` is given (otherwise a configuration file may have sized it on purpose), and
    /// `--norm` sets the final LayerNorm to match (pre-norm: one, post-norm: none) unless
    /// `--final-norm` says otherwise.
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] when `--long-range` is given for another task than `context`, or
    /// a sizing flag for a task that does not read it: `--min-distance` is `context`'s,
    /// `--digits` is `add`'s, `--vocab` is for `copy`, `reverse` and `sort` (the others have
    /// their own words), and `--seq-len` for every task but `add` (whose length follows from
    /// `--digits`).
    pub fn apply(&mut self, o: &Overrides) -> Result<(), TrainError> {
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(value) = value {
                *slot = value.clone();
            }
        }
        if o.task == Some(TaskKind::Text) && self.task.kind != TaskKind::Text {
            self.text_recipe();
        }
        let (task, model, optim) = (&mut self.task, &mut self.model, &mut self.optim);
        set(&mut task.kind, &o.task);
        if o.long_range {
            let Some(long_range) = task.kind.task().long_range() else {
                return Err(TrainError::Config(format!(
                    "--long-range applies to the context task only, not to {}",
                    task.kind
                )));
            };
            task.min_distance = long_range.min_distance;
            task.seq_len = long_range.seq_len;
        }
        let kind = task.kind;
        let unused = |flag: &str, value: usize| {
            Err(TrainError::Config(format!(
                "the {kind} task does not use {flag} (given {value})"
            )))
        };
        // Each task-sizing flag, and the size it sets: refused for a task that does not read it.
        let sizes = [
            ("--seq-len", o.seq_len, Size::SeqLen),
            ("--vocab", o.vocab, Size::Vocab),
            ("--min-distance", o.min_distance, Size::MinDistance),
            ("--digits", o.digits, Size::Digits),
        ];
        for (flag, value, size) in sizes {
            if let Some(value) = value
                && !kind.task().sizes().contains(&size)
            {
                return unused(flag, value);
            }
        }
        let text_flags = [
            ("--data", o.data.is_some()),
            ("--tokenizer", o.tokenizer.is_some()),
            ("--lossy", o.lossy),
        ];
        for (flag, given) in text_flags {
            if given && kind != TaskKind::Text {
                return Err(TrainError::Config(format!(
                    "{flag} is for the text task, not {kind} (give --task text)"
                )));
            }
        }
        set(&mut task.text.data, &o.data);
        set(&mut task.text.tokenizer, &o.tokenizer);
        task.text.lossy |= o.lossy;
        set(&mut task.seq_len, &o.seq_len);
        set(&mut task.vocab, &o.vocab);
        set(&mut task.min_distance, &o.min_distance);
        set(&mut task.digits, &o.digits);

        set(&mut model.d_model, &o.d_model);
        set(&mut model.n_heads, &o.n_heads);
        set(&mut model.n_layers, &o.n_layers);
        set(&mut model.d_ff, &o.d_ff);
        set(&mut model.dropout, &o.dropout);
        if let Some(pos) = o.pos {
            model.pos = pos.scheme(task.model_seq_len());
        }
        if let PositionalScheme::Learned { max_len } = &mut model.pos
            && (o.seq_len.is_some() || o.long_range || o.pos.is_some() || o.digits.is_some())
        {
            *max_len = task.model_seq_len();
        }
        if let Some(norm) = o.norm {
            model.norm = norm;
            model.final_norm = norm == Norm::Pre;
        }
        set(&mut model.final_norm, &o.final_norm);
        set(&mut model.activation, &o.activation);

        set(&mut optim.kind, &o.optimizer);
        set(&mut optim.lr, &o.lr);
        set(&mut optim.warmup_steps, &o.warmup_steps);
        set(&mut optim.decay, &o.decay);
        set(&mut optim.weight_decay, &o.weight_decay);
        if let Some(clip) = o.grad_clip {
            // 0 turns clipping off; a negative or NaN limit stays, for `validate` to refuse.
            optim.grad_clip = (clip != 0.0).then_some(clip);
        }

        set(&mut self.steps, &o.steps);
        set(&mut self.batch_size, &o.batch_size);
        set(&mut self.eval_every, &o.eval_every);
        set(&mut self.eval_sequences, &o.eval_sequences);
        set(&mut self.checkpoint_every, &o.checkpoint_every);
        set(&mut self.checkpoint_seconds, &o.checkpoint_seconds);
        set(&mut self.seed, &o.seed);
        set(&mut self.device, &o.device);
        Ok(())
    }

    /// The `text` task's recipe, nanoGPT's for `shakespeare_char`, set when `--task text`
    /// switches to it (flags given with it still win): sequences of 64 tokens, GELU, a head
    /// tied to the embeddings and no embedding scaling (GPT-2's choices), and AdamW (β₂ 0.99,
    /// ε 1e-8, weight decay 0.1 on matrices only) with 100 warm-up steps and a cosine decay to
    /// a tenth of the peak.
    pub fn text_recipe(&mut self) {
        let (task, model, optim) = (&mut self.task, &mut self.model, &mut self.optim);
        task.kind = TaskKind::Text;
        task.seq_len = 64;
        if let PositionalScheme::Learned { max_len } = &mut model.pos {
            *max_len = task.seq_len;
        }
        model.activation = Act::Gelu;
        model.tie_embeddings = true;
        model.scale_embedding = false;
        optim.kind = OptimizerKind::Adamw;
        optim.beta_2 = 0.99;
        optim.epsilon = 1e-8;
        optim.weight_decay = 0.1;
        optim.warmup_steps = 100;
        optim.decay = Decay::Cosine;
        optim.final_fraction = 0.1;
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

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        overrides: Overrides,
    }

    fn applied(base: &TrainConfig, args: &[&str]) -> Result<TrainConfig, TrainError> {
        let flags = <Flags as clap::Parser>::try_parse_from(
            std::iter::once("attn-train").chain(args.iter().copied()),
        )
        .expect("flags parse");
        let mut config = base.clone();
        config.apply(&flags.overrides)?;
        Ok(config)
    }

    fn json(config: &TrainConfig) -> serde_json::Value {
        serde_json::to_value(config).expect("plain data")
    }

    #[test]
    fn each_flag_given_its_stated_default_changes_nothing() {
        let defaults = TrainConfig::default();
        let mut unstated = Vec::new();
        let mut checked = 0;
        let command = <Flags as clap::CommandFactory>::command();
        for arg in command.get_arguments() {
            let long = arg.get_long().expect("every override is a long flag");
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let Some(value) = help
                .rsplit_once("[default: ")
                .and_then(|(_, rest)| rest.strip_suffix(']'))
            else {
                unstated.push(long);
                continue;
            };
            let flag = format!("--{long}");
            // A task's own flags are checked on that task: the others refuse them.
            let mut base = defaults.clone();
            match long {
                "min-distance" => base.task.kind = TaskKind::Context,
                "tokenizer" => base.text_recipe(),
                "digits" => {
                    base.task.kind = TaskKind::Add;
                    base.model.pos = PosName::Learned.scheme(base.task.model_seq_len());
                }
                _ => {}
            }
            let config = applied(&base, &[&flag, value]).expect("applies");
            assert_eq!(json(&config), json(&base), "{flag} {value}");
            checked += 1;
        }
        assert_eq!(
            unstated,
            ["data", "lossy", "device", "long-range", "final-norm"]
        );
        assert_eq!(checked, 27);
        assert_eq!(defaults.device, crate::backend::default_backend());
    }

    #[test]
    fn help_texts_end_with_the_default_they_override() {
        let command = <Flags as clap::CommandFactory>::command();
        let help = |id: &str| {
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            arg.and_then(|a| a.get_help()).map(ToString::to_string)
        };
        let stated = [
            (
                "steps",
                "Optimizer updates; the learning-rate schedule spans them [default: 2000]",
            ),
            ("lr", "Peak learning rate [default: 0.003]"),
            ("dropout", "Dropout probability while training [default: 0]"),
            ("pos", "Positional scheme [default: learned]"),
            (
                "grad_clip",
                "Largest global gradient norm; 0 turns clipping off, negative or NaN is refused [default: 1]",
            ),
            (
                "checkpoint_seconds",
                "Also checkpoint when this many seconds have passed since the last checkpoint; 0: never by time [default: 60]",
            ),
        ];
        for (id, text) in stated {
            assert_eq!(help(id).as_deref(), Some(text), "{id}");
        }
        let device = help("device").expect("a help text");
        assert!(!device.contains("[default: "), "{device}");
    }

    #[test]
    fn flags_replace_the_settings_they_name() {
        let base = TrainConfig::default();
        let c = applied(
            &base,
            &["--d-model", "12", "--grad-clip", "0", "--seed", "9"],
        )
        .expect("applies");
        assert_eq!(c.model.d_model, 12);
        assert_eq!(c.optim.grad_clip, None);
        assert_eq!(c.seed, 9);
        assert_eq!(c.model.n_heads, base.model.n_heads);

        let c = applied(&base, &["--norm", "post"]).expect("applies");
        assert!(!c.model.final_norm);
        let c = applied(&base, &["--norm", "post", "--final-norm", "true"]).expect("applies");
        assert!(c.model.final_norm);
    }

    #[test]
    fn long_range_lengthens_the_context_task_and_its_learned_table() {
        let base = TrainConfig::default();
        let c = applied(&base, &["--task", "context", "--long-range"]).expect("applies");
        assert_eq!((c.task.seq_len, c.task.min_distance), (48, 30));
        assert_eq!(c.model.pos, PositionalScheme::learned(48));
        let err = applied(&base, &["--task", "sort", "--long-range"]).expect_err("not context");
        assert!(err.to_string().contains("--long-range"), "{err}");
    }

    #[test]
    fn flags_of_another_task_are_refused_with_their_value() {
        let base = TrainConfig::default();
        let err = applied(&base, &["--task", "sort", "--min-distance", "3"]).expect_err("sort");
        assert!(
            err.to_string().contains("--min-distance (given 3)"),
            "{err}"
        );
        let err = applied(&base, &["--task", "context", "--vocab", "20"]).expect_err("context");
        assert!(err.to_string().contains("--vocab (given 20)"), "{err}");
        applied(&base, &["--task", "context", "--min-distance", "3"]).expect("context's own");
        for (task, flag) in [
            ("add", "--vocab"),
            ("add", "--seq-len"),
            ("translate", "--vocab"),
            ("reverse", "--digits"),
            ("translate", "--digits"),
        ] {
            let err = applied(&base, &["--task", task, flag, "4"]).expect_err(flag);
            let expected = format!("the {task} task does not use {flag} (given 4)");
            assert!(err.to_string().ends_with(&expected), "{err}");
        }
        applied(&base, &["--task", "add", "--digits", "4"]).expect("add's own");
        applied(&base, &["--task", "translate", "--seq-len", "6"]).expect("translate's own");
    }

    #[test]
    fn validate_names_each_setting_that_cannot_work() {
        type Spoil = fn(&mut TrainConfig);
        let cases: [(&str, Spoil); 9] = [
            ("n_layers is 0", |c| c.model.n_layers = 0),
            (
                "grad_clip must be finite and positive (or 0 for no clipping), got -1",
                |c| c.optim.grad_clip = Some(-1.0),
            ),
            ("got NaN", |c| c.optim.grad_clip = Some(f32::NAN)),
            ("beta_1 must be in [0, 1), got 1.5", |c| {
                c.optim.beta_1 = 1.5
            }),
            ("beta_2 must be in [0, 1), got 1", |c| c.optim.beta_2 = 1.0),
            ("epsilon must be finite and positive, got -1", |c| {
                c.optim.epsilon = -1.0
            }),
            ("epsilon must be finite and positive, got 0", |c| {
                c.optim.epsilon = 0.0
            }),
            ("checkpoint_seconds must be finite and >= 0, got -2", |c| {
                c.checkpoint_seconds = -2.0
            }),
            ("vocab is 3000000000", |c| c.task.vocab = 3_000_000_000),
        ];
        for (expected, spoil) in cases {
            let mut config = TrainConfig::default();
            spoil(&mut config);
            let err = config.validate().expect_err(expected);
            assert!(err.to_string().contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn grad_clip_flag_zero_turns_clipping_off_and_negative_is_kept_for_validate() {
        let base = TrainConfig::default();
        let c = applied(&base, &["--grad-clip", "0"]).expect("applies");
        assert_eq!(c.optim.grad_clip, None);
        for value in ["-1", "NaN"] {
            let c = applied(&base, &["--grad-clip", value]).expect("applies");
            let err = c.validate().expect_err("refused");
            assert!(err.to_string().contains(value), "{value}: {err}");
        }
    }

    #[test]
    fn a_learned_table_sized_by_a_file_is_kept_unless_the_length_is_given() {
        let mut file = TrainConfig::default();
        file.model.pos = PositionalScheme::learned(40);
        let c = applied(&file, &["--d-model", "32"]).expect("applies");
        assert_eq!(c.model.pos, PositionalScheme::learned(40));
        let c = applied(&file, &["--seq-len", "20"]).expect("applies");
        assert_eq!(c.model.pos, PositionalScheme::learned(20));
    }

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
