//! The case catalogue: every benchmarked computation, the passes it runs, its shapes, its
//! matrix-product FLOPs, and how it prepares one run on a device.
//!
//! The attention shape is `[batch, n_heads, seq_len, d_head] = [1, 8, s, 64]`; the layer cases
//! take `[batch, seq_len, d_model] = [1, s, 512]`.
//! A case's id reads `impl/case/pass` (`attn/chunked/forward_backward`).
//!
//! FLOPs count matrix products only (two flops per multiply-add), as PyTorch and FlashAttention
//! do: attention forward is `4·batch·n_heads·seq_len²·d_head` (`q·kᵀ` and `weights·v`), and
//! forward plus backward is three times that (each product has two in the backward pass; the
//! recomputation some kernels do is not counted as useful work).

use anyhow::{Context, Result, anyhow, bail};
use attn_core::{AttentionOptions, DEFAULT_BLOCK, Strategy, try_scaled_dot_product_attention};
use attn_model::{Activation, EncoderBlockConfig, EncoderInput, NormPlacement, TokenDecoderInput};
use attn_train::TrainConfig;
use burn::nn::activation::ActivationConfig;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `batch` of every case but the training step: one sequence, as in the calibration runs.
pub const BATCH: usize = 1;
/// `n_heads` of every case but the training step.
pub const N_HEADS: usize = 8;
/// `d_head` of every case but the training step.
pub const D_HEAD: usize = 64;
/// `d_model = n_heads · d_head` of the layer cases.
pub const D_MODEL: usize = N_HEADS * D_HEAD;
/// Hidden width of the encoder block's feed-forward network (the paper's `4 · d_model`).
pub const D_FF: usize = 4 * D_MODEL;
/// Inputs are drawn from seeded generators, so every run sees the same numbers.
pub const SEED: u64 = 42;

/// Sequence lengths of the full timing set.
pub const SIZES: &[usize] = &[128, 512, 2048, 4096];
/// Sequence lengths of the short set.
pub const QUICK_SIZES: &[usize] = &[128, 512];

/// What a case differentiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Inference: no autodiff graph.
    Forward,
    /// Forward on an autodiff device, then `sum().backward()`.
    ForwardBackward,
}

impl Pass {
    /// Both passes, forward first.
    pub const ALL: [Pass; 2] = [Pass::Forward, Pass::ForwardBackward];

    /// The name in case ids and JSON lines: `forward` or `forward_backward`.
    pub fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::ForwardBackward => "forward_backward",
        }
    }
}

/// The computation a case times.
#[derive(Clone, Copy, Debug)]
pub enum Workload {
    /// `attn_core::scaled_dot_product_attention` with a forced strategy, on `[1, 8, s, 64]`.
    Attn(Strategy),
    /// `burn::tensor::module::attention` on `[1, 8, s, 64]`.
    BurnAttention,
    /// The same as [`Workload::Attn`] on one head, `[1, 1, s, 64]`: fewer heads than threads,
    /// where the native backward cuts each head's keys into tasks of their own.
    AttnOneHead(Strategy),
    /// `attn_model::MultiHeadAttention` (d_model 512, 8 heads, automatic strategy) on `[1, s, 512]`.
    AttnMha,
    /// `burn::nn::attention::MultiHeadAttention` (d_model 512, 8 heads, no dropout) on `[1, s, 512]`.
    BurnMha,
    /// `attn_model::EncoderBlock` (post-norm, ReLU, d_ff 2048, no dropout) on `[1, s, 512]`.
    AttnEncoderBlock,
    /// `burn::nn::transformer::TransformerEncoder` with one layer, set up as `AttnEncoderBlock`.
    BurnEncoderBlock,
    /// One update of `attn-train`'s loop ([`attn_train::train::update`]: forward, cross-entropy,
    /// backward, global-norm clipping, Adam) on the reverse task at one of the
    /// [`TrainShape`]s.
    Train(TrainShape),
    /// The same update data-parallel on two replicas of the device
    /// ([`attn_train::train::update_data_parallel`]): each runs half the batch, and their
    /// gradients are summed before one optimizer step. On one CPU both replicas share its
    /// cores, so this measures what the scheme costs there, not a speed-up.
    TrainTwoReplicas(TrainShape),
    /// The same update with burn's own stack at the same shape: token and learned position
    /// embeddings, `burn::nn::transformer::TransformerEncoder` (pre-norm, ReLU, no dropout), a
    /// final LayerNorm, a linear head, cross-entropy, burn's Adam with its own gradient
    /// clipping (`GradientClippingConfig::Norm`, per parameter: burn has no global-norm
    /// clipping).
    BurnTrain(TrainShape),
    /// One greedy decoding step of [`attn_model::TokenDecoder`] at GPT-2 small's shape
    /// ([`gpt2_small`]) with the key/value cache holding `seq_len` tokens: project one token,
    /// attend over the cache, logits of that token.
    DecodeCached,
    /// The same token without a cache: [`attn_model::TokenDecoder::forward`] over the whole
    /// prefix of `seq_len + 1` tokens (it returns the logits of every position).
    DecodeRecompute,
    /// One step of burn's own stack at the same shape: token and learned position embeddings,
    /// `burn::nn::transformer::TransformerEncoder` (pre-norm, GELU, causal mask) through
    /// `forward_autoregressive_inference`, whose `MhaCache` keeps every layer's projections,
    /// then a final LayerNorm and the tied head on the last token.
    BurnDecodeCached,
    /// burn's `matmul` of two `[s, s]` matrices (on flex, the `gemm` crate): the device's rate
    /// for `f32` products beside PyTorch's `torch/sgemm/forward`. Every layer and training
    /// case spends most of its time in such products.
    Sgemm,
    /// The cores' `f32` multiply-add peak ([`crate::peak`]): independent chains of fused
    /// multiply-adds on every worker thread, the ceiling of every other rate. It runs on the
    /// CPU, whatever the device; only the CPU devices list it.
    FmaPeak,
}

/// The training shapes: `attn-train`'s default run and two larger ones, all on the reverse
/// task with 16 symbols, pre-norm, learned positions, ReLU, no dropout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainShape {
    /// The README's run: `d_model` 64, 4 heads, 2 layers, `d_ff` 256, 16 tokens, batch 64.
    Toy,
    /// `d_model` 256, 8 heads, 4 layers, `d_ff` 1024, 256 tokens, batch 16.
    Mid,
    /// `d_model` 512, 8 heads, 2 layers, `d_ff` 2048, 2048 tokens, batch 1.
    Long,
}

impl TrainShape {
    /// `attn-train`'s configuration of this shape: its defaults with these sizes.
    pub fn config(self) -> TrainConfig {
        let mut config = TrainConfig::default();
        let (d_model, n_heads, n_layers, d_ff, seq_len, batch) = match self {
            TrainShape::Toy => return config,
            TrainShape::Mid => (256, 8, 4, 1024, 256, 16),
            TrainShape::Long => (512, 8, 2, 2048, 2048, 1),
        };
        config.task.seq_len = seq_len;
        config.batch_size = batch;
        let model = &mut config.model;
        (model.d_model, model.n_heads, model.n_layers, model.d_ff) =
            (d_model, n_heads, n_layers, d_ff);
        model.pos = attn_train::config::PosName::Learned.scheme(seq_len);
        config
    }

    /// Matrix-product flops of one forward pass of the update's model, counted as the layer
    /// cases count them: per layer, the four projections, the feed-forward network's two
    /// products and attention's `4·batch·seq_len²·d_model` (`q·kᵀ` and `weights·v` over every
    /// head), then the output head, `[tokens, d_model]·[d_model, n_classes]`. The embeddings
    /// are lookups, not products. The update as a whole is three times this (every product
    /// has two in the backward pass).
    pub fn forward_flops(self) -> f64 {
        let config = self.config();
        let model = &config.model;
        let (batch, seq_len) = (config.batch_size as f64, config.task.seq_len as f64);
        let tokens = batch * seq_len;
        let (d_model, d_ff) = (model.d_model as f64, model.d_ff as f64);
        let projections = 4.0 * 2.0 * tokens * d_model * d_model;
        let feed_forward = 2.0 * 2.0 * tokens * d_model * d_ff;
        let attention = 4.0 * batch * seq_len * seq_len * d_model;
        let head = 2.0 * tokens * d_model * config.task.n_classes() as f64;
        model.n_layers as f64 * (projections + feed_forward + attention) + head
    }
}

/// One benchmarked implementation; each runs for every pass of [`Case::passes`].
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// `attn` or `burn`.
    pub implementation: &'static str,
    /// The case within the implementation (`chunked`, `module_attention`, `mha`, ...).
    pub name: &'static str,
    /// What it computes.
    pub workload: Workload,
}

/// Every case, in the order a run goes through them.
pub const CASES: &[Case] = &[
    Case {
        implementation: "attn",
        name: "explicit",
        workload: Workload::Attn(Strategy::Explicit),
    },
    Case {
        implementation: "attn",
        name: "chunked",
        workload: Workload::Attn(Strategy::Chunked {
            block: DEFAULT_BLOCK,
        }),
    },
    Case {
        implementation: "attn",
        name: "fused",
        workload: Workload::Attn(Strategy::Fused),
    },
    Case {
        implementation: "attn",
        name: "native",
        workload: Workload::Attn(Strategy::Native),
    },
    Case {
        implementation: "attn",
        name: "native_one_head",
        workload: Workload::AttnOneHead(Strategy::Native),
    },
    Case {
        implementation: "attn",
        name: "auto",
        workload: Workload::Attn(Strategy::Auto),
    },
    Case {
        implementation: "burn",
        name: "module_attention",
        workload: Workload::BurnAttention,
    },
    Case {
        implementation: "attn",
        name: "mha",
        workload: Workload::AttnMha,
    },
    Case {
        implementation: "burn",
        name: "mha",
        workload: Workload::BurnMha,
    },
    Case {
        implementation: "attn",
        name: "encoder_block",
        workload: Workload::AttnEncoderBlock,
    },
    Case {
        implementation: "burn",
        name: "encoder_block",
        workload: Workload::BurnEncoderBlock,
    },
    Case {
        implementation: "attn",
        name: "train_toy",
        workload: Workload::Train(TrainShape::Toy),
    },
    Case {
        implementation: "burn",
        name: "train_toy",
        workload: Workload::BurnTrain(TrainShape::Toy),
    },
    Case {
        implementation: "attn",
        name: "train_toy_2replicas",
        workload: Workload::TrainTwoReplicas(TrainShape::Toy),
    },
    Case {
        implementation: "attn",
        name: "train_mid",
        workload: Workload::Train(TrainShape::Mid),
    },
    Case {
        implementation: "burn",
        name: "train_mid",
        workload: Workload::BurnTrain(TrainShape::Mid),
    },
    Case {
        implementation: "attn",
        name: "train_long",
        workload: Workload::Train(TrainShape::Long),
    },
    Case {
        implementation: "burn",
        name: "train_long",
        workload: Workload::BurnTrain(TrainShape::Long),
    },
    Case {
        implementation: "attn",
        name: "decode_cached",
        workload: Workload::DecodeCached,
    },
    Case {
        implementation: "attn",
        name: "decode_recompute",
        workload: Workload::DecodeRecompute,
    },
    Case {
        implementation: "burn",
        name: "decode_cached",
        workload: Workload::BurnDecodeCached,
    },
    Case {
        implementation: "burn",
        name: "sgemm",
        workload: Workload::Sgemm,
    },
    Case {
        implementation: "cpu",
        name: "fma_peak",
        workload: Workload::FmaPeak,
    },
];

/// Every case with every pass it runs.
pub fn all_cases() -> impl Iterator<Item = (Case, Pass)> {
    CASES
        .iter()
        .flat_map(|case| case.passes().iter().map(|&pass| (*case, pass)))
}

/// Whether the case `id` (`impl/case/pass`) passes the filters: some filter has every one of
/// its `/`-separated parts among the id's parts. No filters means every case.
pub fn selected(id: &str, filters: &[String]) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.split('/').all(|want| parts.contains(&want)))
}

/// One run of a case with its inputs already built; it synchronises the device before returning.
pub type Step = Box<dyn FnMut() -> Result<()>>;

impl Case {
    /// `impl/case/pass`, the id of filters, JSON lines and benchmark names.
    pub fn id(&self, pass: Pass) -> String {
        format!("{}/{}/{}", self.implementation, self.name, pass.name())
    }

    /// The case and pass of an id printed by [`Case::id`].
    ///
    /// # Errors
    /// When no case has that id.
    pub fn by_id(id: &str) -> Result<(Case, Pass)> {
        all_cases()
            .find(|(case, pass)| case.id(*pass) == id)
            .ok_or_else(|| anyhow!("unknown case `{id}`; `--list` prints them"))
    }

    /// The training shape of a training case.
    pub fn train_shape(&self) -> Option<TrainShape> {
        match self.workload {
            Workload::Train(shape)
            | Workload::TrainTwoReplicas(shape)
            | Workload::BurnTrain(shape) => Some(shape),
            _ => None,
        }
    }

    /// The passes this case runs: a training step is always forward plus backward.
    pub fn passes(&self) -> &'static [Pass] {
        match self.workload {
            Workload::Train(_) | Workload::TrainTwoReplicas(_) | Workload::BurnTrain(_) => {
                &[Pass::ForwardBackward]
            }
            Workload::DecodeCached
            | Workload::DecodeRecompute
            | Workload::BurnDecodeCached
            | Workload::Sgemm
            | Workload::FmaPeak => &[Pass::Forward],
            _ => &Pass::ALL,
        }
    }

    /// The sequence length of a case that ignores the requested sizes (a training shape's
    /// own; the multiply-add peak's 1).
    pub fn fixed_seq_len(&self) -> Option<usize> {
        match self.workload {
            Workload::FmaPeak => Some(1),
            _ => self.train_shape().map(|shape| shape.config().task.seq_len),
        }
    }

    /// `[batch, n_heads, seq_len, d_head]` of the case at `seq_len`.
    pub fn dims(&self, seq_len: usize) -> [usize; 4] {
        match self.workload {
            Workload::Train(shape)
            | Workload::TrainTwoReplicas(shape)
            | Workload::BurnTrain(shape) => {
                let config = shape.config();
                let (n_heads, d_model) = (config.model.n_heads, config.model.d_model);
                [
                    config.batch_size,
                    n_heads,
                    config.task.seq_len,
                    d_model / n_heads,
                ]
            }
            Workload::DecodeCached | Workload::DecodeRecompute | Workload::BurnDecodeCached => {
                let gpt2 = gpt2_small(seq_len);
                [BATCH, gpt2.n_heads, seq_len, gpt2.d_model / gpt2.n_heads]
            }
            // One `[s, s]` by `[s, s]` product.
            Workload::Sgemm => [1, 1, seq_len, seq_len],
            // No tensors: the size is the threads'.
            Workload::FmaPeak => [1, 1, seq_len, 0],
            Workload::AttnOneHead(_) => [BATCH, 1, seq_len, D_HEAD],
            // The layer cases' d_model is n_heads · d_head.
            _ => [BATCH, N_HEADS, seq_len, D_HEAD],
        }
    }

    /// Whether the case can run on `device`: the native kernel runs on the CPU backends only
    /// (`attn_core::native_serves`), and the multiply-add peak is listed with them; every
    /// other case runs everywhere.
    pub fn runs_on(&self, device: &Device) -> bool {
        match self.workload {
            Workload::Attn(Strategy::Native)
            | Workload::AttnOneHead(Strategy::Native)
            | Workload::FmaPeak => attn_core::native_serves(device),
            _ => true,
        }
    }

    /// Matrix-product FLOPs of one run, or `None` where they are not well defined.
    pub fn flops(&self, pass: Pass, seq_len: usize) -> Option<f64> {
        let (batch, seq_len) = (BATCH as f64, seq_len as f64);
        // q·kᵀ and weights·v: 2 products of 2·seq_len²·d_head flops per head.
        let attention = 4.0 * batch * N_HEADS as f64 * seq_len * seq_len * D_HEAD as f64;
        // The q, k, v and output projections, [seq_len, d_model]·[d_model, d_model] each.
        let projections = 4.0 * 2.0 * batch * seq_len * (D_MODEL * D_MODEL) as f64;
        // The feed-forward network, [seq_len, d_model]·[d_model, d_ff] and back.
        let feed_forward = 2.0 * 2.0 * batch * seq_len * (D_MODEL * D_FF) as f64;
        let forward = match self.workload {
            // 2·s³: a multiply and an add for each of s² outputs over s terms.
            Workload::Sgemm => 2.0 * seq_len.powi(3),
            Workload::Attn(_) | Workload::BurnAttention => attention,
            Workload::AttnOneHead(_) => attention / N_HEADS as f64,
            Workload::AttnMha | Workload::BurnMha => attention + projections,
            Workload::AttnEncoderBlock | Workload::BurnEncoderBlock => {
                attention + projections + feed_forward
            }
            Workload::Train(shape)
            | Workload::TrainTwoReplicas(shape)
            | Workload::BurnTrain(shape) => shape.forward_flops(),
            Workload::FmaPeak => return Some(crate::peak::flops(rayon::current_num_threads())),
            Workload::DecodeCached | Workload::DecodeRecompute | Workload::BurnDecodeCached => {
                return None;
            }
        };
        Some(match pass {
            Pass::Forward => forward,
            Pass::ForwardBackward => 3.0 * forward,
        })
    }

    /// A training case's update with the sizes of `config` (its shape's own in [`prepare`]),
    /// on the autodiff `device`.
    ///
    /// [`prepare`]: Case::prepare
    fn prepare_training(&self, device: &Device, config: TrainConfig) -> Result<Step> {
        match self.workload {
            Workload::BurnTrain(_) => burn_train(config, device),
            Workload::TrainTwoReplicas(_) => train(config, &[device.clone(), device.clone()]),
            _ => train(config, std::slice::from_ref(device)),
        }
    }

    /// Builds the inputs of the case on `device` (its autodiff form for forward plus backward)
    /// and returns one run of it.
    ///
    /// # Errors
    /// When a module's configuration is refused or the inputs cannot be built.
    pub fn prepare(&self, pass: Pass, device: &Device, seq_len: usize) -> Result<Step> {
        let device = match pass {
            Pass::ForwardBackward => device.clone().autodiff(),
            Pass::Forward => device.clone(),
        };
        device.seed(SEED);
        let normal = Distribution::Normal(0.0, 1.0);
        match self.workload {
            Workload::Attn(_) | Workload::BurnAttention | Workload::AttnOneHead(_) => {
                let workload = self.workload;
                let shape = self.dims(seq_len);
                let input = || Tensor::<4>::random(shape, normal, &device); // [batch, n_heads, seq_len, d_head]
                let (q, k, v) = (input(), input(), input());
                Ok(match pass {
                    Pass::Forward => Box::new(move || {
                        let context = attend(workload, q.clone(), k.clone(), v.clone())?;
                        finish(&device, context)
                    }),
                    Pass::ForwardBackward => {
                        let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
                        Box::new(move || {
                            let context = attend(workload, q.clone(), k.clone(), v.clone())?;
                            let grads = context.sum().backward();
                            let dq = q.grad(&grads).context("q has no gradient")?;
                            finish(&device, dq)
                        })
                    }
                })
            }
            Workload::Train(shape)
            | Workload::TrainTwoReplicas(shape)
            | Workload::BurnTrain(shape) => self.prepare_training(&device, shape.config()),
            Workload::DecodeCached => decode_cached(&device, seq_len),
            Workload::DecodeRecompute => decode_recompute(&device, seq_len),
            Workload::BurnDecodeCached => burn_decode_cached(&device, seq_len),
            Workload::FmaPeak => Ok(Box::new(|| {
                let sum = crate::peak::run();
                anyhow::ensure!(sum.is_finite(), "the chains summed to {sum}");
                Ok(())
            })),
            Workload::Sgemm => {
                let a = Tensor::<2>::random([seq_len, seq_len], normal, &device); // [s, s]
                let b = Tensor::<2>::random([seq_len, seq_len], normal, &device); // [s, s]
                Ok(Box::new(move || {
                    finish(&device, a.clone().matmul(b.clone()))
                }))
            }
            Workload::AttnMha
            | Workload::BurnMha
            | Workload::AttnEncoderBlock
            | Workload::BurnEncoderBlock => {
                let layer = layer(self.workload, &device)?;
                let x = Tensor::<3>::random([BATCH, seq_len, D_MODEL], normal, &device); // [batch, seq_len, d_model]
                Ok(match pass {
                    Pass::Forward => Box::new(move || finish(&device, layer(x.clone()))),
                    Pass::ForwardBackward => {
                        let x = x.require_grad();
                        Box::new(move || {
                            let grads = layer(x.clone()).sum().backward();
                            let dx = x.grad(&grads).context("x has no gradient")?;
                            finish(&device, dx)
                        })
                    }
                })
            }
        }
    }
}

/// One update of `attn-train`'s loop with `config`'s sizes, through the function the loop calls:
/// [`attn_train::train::update`] on one device, [`attn_train::train::update_data_parallel`] on
/// several (the first holding the model).
///
/// One fixed batch of the reverse task is reused, so the clock sees the step and not the data
/// generator (the step does the same work whatever the tokens).
fn train(config: TrainConfig, devices: &[Device]) -> Result<Step> {
    use attn_train::{loss::loss_function, model::Model, train};
    let device = devices.first().context("no device")?;
    let mut model = Some(Model::init(&config, device)?);
    let mut optim = train::optimizer(&config.optim);
    let loss_fn = loss_function(&config.task, device);
    let batch = config
        .task
        .batch(config.batch_size, &mut ChaCha8Rng::seed_from_u64(SEED));
    let (lr, grad_clip) = (config.optim.lr, config.optim.grad_clip);
    let devices = devices.to_vec();
    Ok(Box::new(move || {
        let current = model
            .take()
            .context("an earlier step failed and lost the model")?;
        let (next, loss) = match devices.as_slice() {
            [device] => {
                train::update(current, &mut optim, &loss_fn, &batch, lr, grad_clip, device)?
            }
            _ => train::update_data_parallel(
                current,
                &mut optim,
                &loss_fn,
                &batch,
                lr,
                grad_clip,
                &devices,
                true,
                &|_| {},
            )?,
        };
        model = Some(next);
        anyhow::ensure!(loss.is_finite(), "the loss is {loss}");
        Ok(())
    }))
}

/// burn's stack for [`Workload::BurnTrain`].
#[derive(burn::module::Module, Debug)]
struct BurnEncoderModel {
    embedding: burn::nn::Embedding,
    positions: burn::nn::Embedding,
    encoder: burn::nn::transformer::TransformerEncoder,
    norm: burn::nn::LayerNorm,
    head: burn::nn::Linear,
}

impl BurnEncoderModel {
    /// Logits `[batch, seq_len, n_classes]` of `tokens` `[batch, seq_len]`, the embeddings
    /// scaled by `√d_model` as `attn-train`'s model does.
    fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [_, seq_len] = tokens.dims();
        let device = tokens.device();
        let [_, d_model] = self.embedding.weight.dims();
        let ids = Tensor::<1, Int>::arange(0..seq_len as i64, &device).unsqueeze::<2>(); // [1, seq_len]
        let x =
            self.embedding.forward(tokens) * (d_model as f64).sqrt() + self.positions.forward(ids); // [batch, seq_len, d_model]
        let h = self.encoder.forward(TransformerEncoderInput::new(x)); // [batch, seq_len, d_model]
        self.head.forward(self.norm.forward(h)) // [batch, seq_len, n_classes]
    }
}

/// One update of burn's stack with `config`'s sizes ([`Workload::BurnTrain`]), with
/// `attn-train`'s learning rate, Adam constants and clipping bound.
fn burn_train(config: TrainConfig, device: &Device) -> Result<Step> {
    use burn::grad_clipping::GradientClippingConfig;
    use burn::nn::{EmbeddingConfig, LayerNormConfig, LinearConfig};
    let (m, task) = (&config.model, &config.task);
    let (batch_size, seq_len) = (config.batch_size, task.seq_len);
    let mut model = Some(BurnEncoderModel {
        embedding: EmbeddingConfig::new(task.model_vocab(), m.d_model).init(device),
        positions: EmbeddingConfig::new(seq_len, m.d_model).init(device),
        encoder: TransformerEncoderConfig::new(m.d_model, m.d_ff, m.n_heads, m.n_layers)
            .with_dropout(0.0)
            .with_norm_first(true)
            .with_activation(ActivationConfig::Relu)
            .init(device),
        norm: LayerNormConfig::new(m.d_model).init(device),
        head: LinearConfig::new(m.d_model, task.n_classes()).init(device),
    });
    let o = &config.optim;
    let mut optim = AdamConfig::new()
        .with_beta_1(o.beta_1)
        .with_beta_2(o.beta_2)
        .with_epsilon(o.epsilon)
        .with_grad_clipping(o.grad_clip.map(GradientClippingConfig::Norm))
        .init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let batch = task.batch(batch_size, &mut ChaCha8Rng::seed_from_u64(SEED));
    let tokens = batch.tokens_tensor(device); // [batch, seq_len]
    let targets = batch.targets_tensor(device).reshape([batch_size * seq_len]); // [batch · seq_len]
    let lr = o.lr;
    let device = device.clone();
    Ok(Box::new(move || {
        let current = model
            .take()
            .context("an earlier step failed and lost the model")?;
        let logits = current.forward(tokens.clone()); // [batch, seq_len, n_classes]
        let [_, _, n_classes] = logits.dims();
        let logits = logits.reshape([batch_size * seq_len, n_classes]); // [batch · seq_len, n_classes]
        let loss = loss_fn.forward(logits, targets.clone());
        let value: f32 = loss.clone().into_scalar();
        let grads = GradientsParams::from_grads(loss.backward(), &current);
        model = Some(optim.step(lr, current, grads));
        anyhow::ensure!(value.is_finite(), "the loss is {value}");
        finish(&device, Tensor::<1>::from_floats([value], &device))
    }))
}

/// Tokens a decoding case can take past its context before its cache is rebuilt.
const DECODE_HEADROOM: usize = 256;

/// GPT-2 small's shape for a context of `seq_len` tokens: 12 layers of 12 heads, `d_model`
/// 768, `d_ff` 3072, vocab 50257, learned positions, pre-norm, GELU, tied head, a final
/// LayerNorm, no dropout, no embedding scale; the automatic attention strategy.
pub fn gpt2_small(seq_len: usize) -> attn_model::TokenDecoderConfig {
    attn_model::TokenDecoderConfig::new(
        50257,
        768,
        12,
        12,
        3072,
        attn_model::PositionalScheme::Learned {
            max_len: seq_len + DECODE_HEADROOM + 1,
        },
    )
    .with_dropout(0.0)
    .with_norm(NormPlacement::Pre)
    .with_activation(Activation::Gelu)
    .with_scale_embedding(false)
    .with_tie_embeddings(true)
}

/// `n` seeded token ids below `vocab`, as `[1, n]`.
fn seeded_tokens(n: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let ids: Vec<i64> = (0..n).map(|_| rng.random_range(0..vocab) as i64).collect();
    Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), device) // [batch, n]
}

/// One cached greedy step at a context of `seq_len` tokens: the prompt is prefilled once, and
/// the cache is rebuilt (outside the step's usual work) only when its headroom runs out.
fn decode_cached(device: &Device, seq_len: usize) -> Result<Step> {
    let config = gpt2_small(seq_len);
    let model = config.init(device)?;
    let prompt = seeded_tokens(seq_len, config.vocab, device);
    let capacity = seq_len + DECODE_HEADROOM;
    let prefill = move |model: &attn_model::TokenDecoder| -> Result<attn_model::KvCache> {
        let mut cache = model.new_cache(BATCH, capacity, None)?;
        model.try_forward(TokenDecoderInput::new(prompt.clone()).with_cache(&mut cache))?;
        Ok(cache)
    };
    let mut cache = prefill(&model)?;
    let token = seeded_tokens(1, config.vocab, device);
    let device = device.clone();
    Ok(Box::new(move || {
        if cache.filled() == capacity {
            cache = prefill(&model)?;
        }
        let logits = model
            .try_forward(TokenDecoderInput::new(token.clone()).with_cache(&mut cache))?
            .logits; // [batch, 1, vocab]
        finish(&device, logits.argmax(2).float())
    }))
}

/// The same token recomputed from scratch: the whole prefix of `seq_len + 1` tokens.
fn decode_recompute(device: &Device, seq_len: usize) -> Result<Step> {
    let config = gpt2_small(seq_len);
    let model = config.init(device)?;
    let tokens = seeded_tokens(seq_len + 1, config.vocab, device);
    let device = device.clone();
    Ok(Box::new(move || {
        let logits = model
            .try_forward(TokenDecoderInput::new(tokens.clone()))?
            .logits; // [batch, seq_len + 1, vocab]
        let last = logits.narrow(1, seq_len, 1); // [batch, 1, vocab]
        finish(&device, last.argmax(2).float())
    }))
}

/// burn's own modules at GPT-2 small's shape ([`Workload::BurnDecodeCached`]).
struct BurnGpt2 {
    embedding: burn::nn::Embedding,
    positions: burn::nn::Embedding,
    encoder: burn::nn::transformer::TransformerEncoder,
    norm: burn::nn::LayerNorm,
    /// The sequence the steps extend, `[batch, capacity]`.
    tokens: Tensor<2, Int>,
    device: Device,
}

impl BurnGpt2 {
    /// One call of the stack over the first `n` tokens: the last token's logits,
    /// `[batch, 1, vocab]`. burn's cache projects only the newest token, but its attention
    /// takes every cached query, so each call attends `n` queries to `n` keys.
    fn logits(
        &self,
        n: usize,
        cache: &mut burn::nn::transformer::TransformerEncoderAutoregressiveCache,
    ) -> Tensor<3> {
        use burn::nn::attention::generate_autoregressive_mask;
        let tokens = self.tokens.clone().narrow(1, 0, n); // [batch, n]
        let ids = Tensor::<1, Int>::arange(0..n as i64, &self.device).unsqueeze::<2>(); // [1, n]
        let x = self.embedding.forward(tokens) + self.positions.forward(ids); // [batch, n, d_model]
        let mask = generate_autoregressive_mask(BATCH, n, &self.device); // [batch, n, n]
        let input = TransformerEncoderInput::new(x).mask_attn(mask);
        let h = self.encoder.forward_autoregressive_inference(input, cache); // [batch, n, d_model]
        let last = self.norm.forward(h.narrow(1, n - 1, 1)); // [batch, 1, d_model]
        let table = self.embedding.weight.val(); // [vocab, d_model]
        let [batch, _, d_model] = last.dims();
        // Two-dimensional, so that flex multiplies by the transposed view without copying it.
        let logits = last.reshape([batch, d_model]).matmul(table.transpose()); // [batch, vocab]
        logits.unsqueeze_dim::<3>(1) // [batch, 1, vocab]
    }

    /// A cache holding the first `seq_len` tokens.
    fn prefill(
        &self,
        seq_len: usize,
    ) -> burn::nn::transformer::TransformerEncoderAutoregressiveCache {
        let mut cache = self.encoder.new_autoregressive_cache();
        self.logits(seq_len, &mut cache);
        cache
    }
}

/// burn's stack at GPT-2 small's shape, one autoregressive step at `seq_len` cached tokens.
fn burn_decode_cached(device: &Device, seq_len: usize) -> Result<Step> {
    use burn::nn::{EmbeddingConfig, LayerNormConfig};
    let gpt2 = gpt2_small(seq_len);
    let (d_model, vocab) = (gpt2.d_model, gpt2.vocab);
    let capacity = seq_len + DECODE_HEADROOM;
    let model = BurnGpt2 {
        embedding: EmbeddingConfig::new(vocab, d_model).init(device),
        positions: EmbeddingConfig::new(capacity, d_model).init(device),
        encoder: TransformerEncoderConfig::new(d_model, gpt2.d_ff, gpt2.n_heads, gpt2.n_layers)
            .with_dropout(0.0)
            .with_norm_first(true)
            .with_activation(ActivationConfig::Gelu)
            .init(device),
        norm: LayerNormConfig::new(d_model).init(device),
        tokens: seeded_tokens(capacity, vocab, device),
        device: device.clone(),
    };
    let mut cache = model.prefill(seq_len);
    let mut filled = seq_len;
    Ok(Box::new(move || {
        if filled == capacity {
            cache = model.prefill(seq_len);
            filled = seq_len;
        }
        filled += 1;
        let logits = model.logits(filled, &mut cache); // [batch, 1, vocab]
        finish(&model.device, logits.argmax(2).float())
    }))
}

/// A layer from `[batch, seq_len, d_model]` to `[batch, seq_len, d_model]`.
type Layer = Box<dyn Fn(Tensor<3>) -> Tensor<3>>;

/// The module of a layer workload, initialised on `device`; no dropout anywhere, post-norm and
/// ReLU in both encoder blocks, so forward and backward do the same work in every implementation.
fn layer(workload: Workload, device: &Device) -> Result<Layer> {
    Ok(match workload {
        Workload::AttnMha => {
            let mha = attn_model::MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_dropout(0.0)
                .init(device)?;
            Box::new(move |x| mha.forward(attn_model::MhaInput::self_attention(x)).output)
        }
        Workload::BurnMha => {
            let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_dropout(0.0)
                .init(device);
            Box::new(move |x| mha.forward(MhaInput::self_attn(x)).context)
        }
        Workload::AttnEncoderBlock => {
            let block = EncoderBlockConfig::new(D_MODEL, N_HEADS, D_FF)
                .with_dropout(0.0)
                .with_norm(NormPlacement::Post)
                .with_activation(Activation::Relu)
                .init(device)?;
            Box::new(move |x| block.forward(EncoderInput::new(x)).output)
        }
        Workload::BurnEncoderBlock => {
            let encoder = TransformerEncoderConfig::new(D_MODEL, D_FF, N_HEADS, 1)
                .with_dropout(0.0)
                .with_norm_first(false)
                .with_activation(ActivationConfig::Relu)
                .init(device);
            Box::new(move |x| encoder.forward(TransformerEncoderInput::new(x)))
        }
        _ => bail!("{workload:?} is not a layer"),
    })
}

/// The attention context `[batch, n_heads, seq_len, d_head]` of an attention workload; a strategy
/// that cannot serve the device or the pass is an error, which the case's line reports.
fn attend(workload: Workload, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Result<Tensor<4>> {
    Ok(match workload {
        Workload::Attn(strategy) | Workload::AttnOneHead(strategy) => {
            let options = AttentionOptions::new().with_strategy(strategy);
            try_scaled_dot_product_attention(q, k, v, &options)
                .with_context(|| format!("attention with {strategy:?}"))?
                .context
        }
        Workload::BurnAttention => {
            burn_attention(q, k, v, None, None, AttentionModuleOptions::default())
        }
        _ => bail!("{workload:?} is not an attention kernel"),
    })
}

/// Waits for the device to finish the run's work (lazy backends would otherwise stop the clock
/// early), then lets the result go.
///
/// The result is summed and the sum read back first: a lazy backend that fuses operations
/// could otherwise skip work whose output nobody reads. The sum reads the output once, which
/// is small next to the attention that made it.
///
/// # Errors
/// When reading the result back or synchronising the device fails (a lazy backend reports a
/// failed allocation only here).
pub fn finish<const D: usize>(device: &Device, result: Tensor<D>) -> Result<()> {
    let total = result
        .sum()
        .try_into_data()
        .map_err(|e| anyhow!("reading the result back failed: {e:?}"))?;
    device
        .sync()
        .map_err(|e| anyhow!("device sync failed: {e:?}"))?;
    drop(total);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::TestDevice;

    #[test]
    fn ids_are_unique_and_find_their_case() {
        let ids: Vec<String> = all_cases().map(|(case, pass)| case.id(pass)).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "duplicate ids in {ids:?}");
        for id in &ids {
            let (case, pass) = Case::by_id(id).expect("every listed id is found");
            assert_eq!(&case.id(pass), id);
        }
        assert!(Case::by_id("attn/nothing/forward").is_err());
        // Eleven cases with both passes; seven training, three decoding, one sgemm and one
        // multiply-add peak case with one.
        assert_eq!(ids.len(), 34);
    }

    #[test]
    fn filters_match_every_part_of_some_filter() {
        let filters = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let id = "attn/chunked/forward_backward";
        assert!(selected(id, &[]));
        assert!(selected(id, &filters(&["chunked"])));
        assert!(selected(id, &filters(&["burn", "attn/forward_backward"])));
        assert!(!selected(id, &filters(&["chunked/forward"])));
        assert!(!selected(id, &filters(&["burn", "mha"])));
    }

    #[test]
    fn flops_count_the_matrix_products() {
        let (attention, _) = Case::by_id("attn/explicit/forward").expect("listed");
        // 4 · batch 1 · 8 heads · 5² · 64.
        assert_eq!(attention.flops(Pass::Forward, 5), Some(51_200.0));
        assert_eq!(attention.flops(Pass::ForwardBackward, 5), Some(153_600.0));
        let (one_head, _) = Case::by_id("attn/native_one_head/forward").expect("listed");
        assert_eq!(one_head.dims(5), [1, 1, 5, 64]);
        assert_eq!(one_head.flops(Pass::Forward, 5), Some(6_400.0));
        let (mha, _) = Case::by_id("burn/mha/forward").expect("listed");
        // Attention plus four [5, 512]·[512, 512] projections.
        assert_eq!(
            mha.flops(Pass::Forward, 5),
            Some(51_200.0 + 8.0 * 5.0 * 512.0 * 512.0)
        );
        let (block, _) = Case::by_id("attn/encoder_block/forward").expect("listed");
        assert_eq!(
            block.flops(Pass::Forward, 5),
            Some(51_200.0 + 8.0 * 5.0 * 512.0 * 512.0 + 4.0 * 5.0 * 512.0 * 2048.0)
        );
        let (train, pass) = Case::by_id("attn/train_toy/forward_backward").expect("listed");
        // The toy update: 64 sequences of 16 tokens, d_model 64, d_ff 256, two layers.
        let n_classes = TrainConfig::default().task.n_classes() as f64;
        let layer =
            8.0 * 1024.0 * 64.0 * 64.0 + 4.0 * 1024.0 * 64.0 * 256.0 + 4.0 * 64.0 * 256.0 * 64.0;
        let head = 2.0 * 1024.0 * 64.0 * n_classes;
        assert_eq!(train.flops(pass, 5), Some(3.0 * (2.0 * layer + head)));
        let (decode, pass) = Case::by_id("attn/decode_cached/forward").expect("listed");
        assert_eq!(decode.flops(pass, 5), None);
        let (sgemm, pass) = Case::by_id("burn/sgemm/forward").expect("listed");
        assert_eq!(sgemm.flops(pass, 5), Some(250.0));
    }

    #[test]
    fn the_training_cases_keep_their_shapes() {
        let (train, _) = Case::by_id("attn/train_toy/forward_backward").expect("listed");
        let config = TrainConfig::default();
        assert_eq!(train.fixed_seq_len(), Some(config.task.seq_len));
        assert_eq!(train.dims(999)[2], config.task.seq_len);
        assert_eq!(train.passes(), &[Pass::ForwardBackward]);
        for (id, dims, layers) in [
            ("attn/train_mid/forward_backward", [16, 8, 256, 32], 4),
            ("burn/train_long/forward_backward", [1, 8, 2048, 64], 2),
        ] {
            let (case, _) = Case::by_id(id).expect("listed");
            assert_eq!(case.dims(7), dims, "{id}");
            let config = case.train_shape().expect("a training case").config();
            assert_eq!(config.model.n_layers, layers, "{id}");
            assert_eq!(config.model.d_ff, 4 * config.model.d_model, "{id}");
            config.validate().expect("a valid configuration");
        }
        let (chunked, _) = Case::by_id("attn/chunked/forward").expect("listed");
        assert_eq!(chunked.fixed_seq_len(), None);
        assert_eq!(chunked.dims(7), [1, 8, 7, 64]);
    }

    #[test]
    fn every_case_prepares_and_runs_on_every_test_device() {
        for TestDevice { name, device } in attn_testing::devices() {
            let cases = all_cases().filter(|(case, _)| case.runs_on(&device));
            for (case, pass) in cases {
                let seq_len = case.fixed_seq_len().unwrap_or(7);
                // The larger training shapes run the same code at the toy shape's sizes with
                // their layer counts (their own sizes are checked by
                // `the_training_cases_keep_their_shapes`): a test build would take minutes.
                let prepared = match case.train_shape() {
                    Some(shape) if shape != TrainShape::Toy => {
                        let mut config = TrainShape::Toy.config();
                        config.model.n_layers = shape.config().model.n_layers;
                        case.prepare_training(&device.clone().autodiff(), config)
                    }
                    _ => case.prepare(pass, &device, seq_len),
                };
                let mut step =
                    prepared.unwrap_or_else(|e| panic!("{} on {name}: {e:#}", case.id(pass)));
                for _ in 0..2 {
                    step().unwrap_or_else(|e| panic!("{} on {name}: {e:#}", case.id(pass)));
                }
            }
        }
    }
}
