//! PyTorch's layers in this crate's modules: `nn.Linear`, `nn.LayerNorm`,
//! `nn.MultiheadAttention` (its packed projection split), `nn.TransformerEncoderLayer` and
//! `nn.TransformerDecoderLayer`, looked up in a [`StateDict`] by PyTorch's names, checked
//! against the module's shapes and transposed into burn's layout.

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};

use super::StateDict;
use crate::attention::MultiHeadAttention;
use crate::decoder::DecoderBlock;
use crate::encoder::{Encoder, EncoderBlock};
use crate::error::ModelError;
use crate::norm::{LayerNorm, Norm};

/// A PyTorch `nn.Linear`'s parameters, in PyTorch's layout.
#[derive(Clone, Debug)]
pub struct TorchLinear {
    /// `[d_output, d_input]`.
    pub weight: Tensor<2>,
    /// `[d_output]`, or `None` for `bias=False`.
    pub bias: Option<Tensor<1>>,
}

/// A PyTorch `nn.LayerNorm`'s parameters.
#[derive(Clone, Debug)]
pub struct TorchLayerNorm {
    /// `γ`, `[d_model]`.
    pub weight: Tensor<1>,
    /// `β`, `[d_model]`, or `None` for `bias=False`.
    pub bias: Option<Tensor<1>>,
}

/// A PyTorch `nn.MultiheadAttention`'s parameters, with the packed input projection split.
#[derive(Clone, Debug)]
pub struct TorchMultiheadAttention {
    /// `W_Q`, `[d_model, d_model]`.
    pub q: TorchLinear,
    /// `W_K`, `[n_kv_heads · d_head, d_context]`.
    pub k: TorchLinear,
    /// `W_V`, `[n_kv_heads · d_head, d_context]`.
    pub v: TorchLinear,
    /// `W_O` (`out_proj`), `[d_model, d_model]`.
    pub out_proj: TorchLinear,
}

impl TorchMultiheadAttention {
    /// Splits PyTorch's packed `in_proj_weight` (rows: `W_Q`, then `W_K`, then `W_V`) and
    /// `in_proj_bias` into three projections.
    ///
    /// # Shapes
    /// - `in_proj_weight`: `[3 · d_model, d_model]`; `in_proj_bias`: `[3 · d_model]`
    ///
    /// # Errors
    /// [`ModelError::TensorShape`] when the weight has a row count that is not a multiple of
    /// three, or the bias does not match it.
    pub fn from_in_proj(
        in_proj_weight: Tensor<2>,
        in_proj_bias: Option<Tensor<1>>,
        out_proj: TorchLinear,
    ) -> Result<Self, ModelError> {
        let [rows, d_model] = in_proj_weight.dims();
        if rows != 3 * d_model {
            return Err(ModelError::TensorShape {
                name: "in_proj_weight".into(),
                expected: vec![3 * d_model, d_model],
                got: vec![rows, d_model],
            });
        }
        split_in_proj(
            in_proj_weight,
            in_proj_bias,
            [d_model; 3],
            out_proj,
            "in_proj_bias",
        )
    }
}

/// A PyTorch `nn.TransformerEncoderLayer`'s parameters.
#[derive(Clone, Debug)]
pub struct TorchEncoderLayer {
    /// `self_attn`.
    pub self_attn: TorchMultiheadAttention,
    /// `linear1`: `W_1`, `[d_ff, d_model]`.
    pub linear1: TorchLinear,
    /// `linear2`: `W_2`, `[d_model, d_ff]`.
    pub linear2: TorchLinear,
    /// `norm1`: the LayerNorm around self-attention.
    pub norm1: TorchLayerNorm,
    /// `norm2`: the LayerNorm around the feed-forward network.
    pub norm2: TorchLayerNorm,
}

/// A PyTorch `nn.TransformerDecoderLayer`'s parameters.
#[derive(Clone, Debug)]
pub struct TorchDecoderLayer {
    /// `self_attn`: causal self-attention.
    pub self_attn: TorchMultiheadAttention,
    /// `multihead_attn`: cross-attention over the memory.
    pub multihead_attn: TorchMultiheadAttention,
    /// `linear1`: `W_1`, `[d_ff, d_model]`.
    pub linear1: TorchLinear,
    /// `linear2`: `W_2`, `[d_model, d_ff]`.
    pub linear2: TorchLinear,
    /// `norm1`: the LayerNorm around self-attention.
    pub norm1: TorchLayerNorm,
    /// `norm2`: the LayerNorm around cross-attention.
    pub norm2: TorchLayerNorm,
    /// `norm3`: the LayerNorm around the feed-forward network.
    pub norm3: TorchLayerNorm,
}

impl MultiHeadAttention {
    /// Sets every parameter from PyTorch tensors, transposing the weights.
    ///
    /// # Errors
    /// [`ModelError::TensorShape`] naming the tensor (`q_proj.weight`, `out_proj.bias`, ...)
    /// whose shape does not fit the module, [`ModelError::MissingTensor`] for a bias the module
    /// has and the weights lack, [`ModelError::UnexpectedTensor`] for the reverse.
    pub fn load_pytorch(self, weights: TorchMultiheadAttention) -> Result<Self, ModelError> {
        load_attention(self, weights, "")
    }
}

impl EncoderBlock {
    /// Sets every parameter from a PyTorch `TransformerEncoderLayer`'s tensors.
    ///
    /// # Errors
    /// As [`MultiHeadAttention::load_pytorch`], naming tensors as PyTorch does
    /// (`self_attn.out_proj.weight`, `linear1.bias`, `norm2.weight`, ...).
    pub fn load_pytorch(mut self, weights: TorchEncoderLayer) -> Result<Self, ModelError> {
        self.attention = load_attention(self.attention, weights.self_attn, "self_attn.")?;
        self.feed_forward.expand =
            load_linear(self.feed_forward.expand, weights.linear1, "linear1")?;
        self.feed_forward.contract =
            load_linear(self.feed_forward.contract, weights.linear2, "linear2")?;
        self.norm_attn = load_norm(self.norm_attn, weights.norm1, "norm1")?;
        self.norm_ff = load_norm(self.norm_ff, weights.norm2, "norm2")?;
        Ok(self)
    }

    /// Sets every parameter from a PyTorch `TransformerEncoderLayer` `state_dict`, whose names
    /// start with `prefix` (`""` for a layer saved alone, `"layers.3."` inside a
    /// `TransformerEncoder`).
    ///
    /// # Errors
    /// [`ModelError::MissingTensor`], [`ModelError::TensorShape`] (expected and found shapes, in
    /// PyTorch's layout), [`ModelError::TensorDtype`], each naming the tensor.
    pub fn load_pytorch_state_dict(
        self,
        dict: &StateDict,
        prefix: &str,
    ) -> Result<Self, ModelError> {
        let weights = dict.encoder_layer(&self, prefix)?;
        self.load_pytorch(weights)
    }
}

impl DecoderBlock {
    /// Sets every parameter from a PyTorch `TransformerDecoderLayer`'s tensors.
    ///
    /// # Errors
    /// As [`MultiHeadAttention::load_pytorch`], naming tensors as PyTorch does
    /// (`multihead_attn.out_proj.weight`, `norm3.bias`, ...);
    /// [`ModelError::UnexpectedTensor`] for cross-attention weights given to a block without
    /// cross-attention.
    pub fn load_pytorch(mut self, weights: TorchDecoderLayer) -> Result<Self, ModelError> {
        self.self_attention = load_attention(self.self_attention, weights.self_attn, "self_attn.")?;
        self.norm_self = load_block_norm(self.norm_self, weights.norm1, "norm1")?;
        match (self.cross_attention.take(), self.norm_cross.take()) {
            (Some(cross), Some(norm)) => {
                self.cross_attention = Some(load_attention(
                    cross,
                    weights.multihead_attn,
                    "multihead_attn.",
                )?);
                self.norm_cross = Some(load_block_norm(norm, weights.norm2, "norm2")?);
            }
            _ => {
                return Err(ModelError::UnexpectedTensor {
                    name: "multihead_attn.in_proj_weight".into(),
                });
            }
        }
        self.feed_forward.expand =
            load_linear(self.feed_forward.expand, weights.linear1, "linear1")?;
        self.feed_forward.contract =
            load_linear(self.feed_forward.contract, weights.linear2, "linear2")?;
        self.norm_ff = load_block_norm(self.norm_ff, weights.norm3, "norm3")?;
        Ok(self)
    }

    /// Sets every parameter from a PyTorch `TransformerDecoderLayer` `state_dict`, whose names
    /// start with `prefix` (`""` for a layer saved alone, `"layers.3."` inside a
    /// `TransformerDecoder`).
    ///
    /// # Errors
    /// [`ModelError::MissingTensor`], [`ModelError::TensorShape`], [`ModelError::TensorDtype`],
    /// each naming the tensor; [`ModelError::UnexpectedTensor`] for a block without
    /// cross-attention.
    pub fn load_pytorch_state_dict(
        self,
        dict: &StateDict,
        prefix: &str,
    ) -> Result<Self, ModelError> {
        let weights = dict.decoder_layer(&self, prefix)?;
        self.load_pytorch(weights)
    }
}

impl Encoder {
    /// Sets every parameter from a PyTorch `nn.TransformerEncoder` `state_dict`:
    /// `{prefix}layers.{i}.…` for each block and `{prefix}norm.…` for the final LayerNorm.
    ///
    /// # Errors
    /// As [`EncoderBlock::load_pytorch_state_dict`]; [`ModelError::UnexpectedTensor`] when the
    /// dict has a final norm and the encoder does not.
    pub fn load_pytorch_state_dict(
        mut self,
        dict: &StateDict,
        prefix: &str,
    ) -> Result<Self, ModelError> {
        self.layers = std::mem::take(&mut self.layers)
            .into_iter()
            .enumerate()
            .map(|(i, layer)| layer.load_pytorch_state_dict(dict, &format!("{prefix}layers.{i}.")))
            .collect::<Result<_, _>>()?;
        let name = format!("{prefix}norm");
        self.norm_final = match self.norm_final {
            Some(norm) => {
                let device = norm.gamma.val().device();
                let d_model = norm.gamma.shape().dims::<1>()[0];
                Some(load_norm(
                    norm,
                    dict.layer_norm(&name, d_model, &device)?,
                    &name,
                )?)
            }
            None if dict.contains(&format!("{name}.weight")) => {
                return Err(ModelError::UnexpectedTensor {
                    name: format!("{name}.weight"),
                });
            }
            None => None,
        };
        Ok(self)
    }
}

impl StateDict {
    /// `{name}.weight` `[d_output, d_input]` and, when present, `{name}.bias` `[d_output]`.
    ///
    /// # Errors
    /// As [`tensor`](Self::tensor).
    pub fn linear(
        &self,
        name: &str,
        d_output: usize,
        d_input: usize,
        device: &Device,
    ) -> Result<TorchLinear, ModelError> {
        Ok(TorchLinear {
            weight: self.tensor(&format!("{name}.weight"), [d_output, d_input], device)?,
            bias: self.optional(&format!("{name}.bias"), [d_output], device)?,
        })
    }

    /// `{name}.weight` and, when present, `{name}.bias`, both `[d_model]`.
    ///
    /// # Errors
    /// As [`tensor`](Self::tensor).
    pub fn layer_norm(
        &self,
        name: &str,
        d_model: usize,
        device: &Device,
    ) -> Result<TorchLayerNorm, ModelError> {
        Ok(TorchLayerNorm {
            weight: self.tensor(&format!("{name}.weight"), [d_model], device)?,
            bias: self.optional(&format!("{name}.bias"), [d_model], device)?,
        })
    }

    /// A `TransformerEncoderLayer`'s tensors under `prefix`, shaped for `block`.
    ///
    /// # Errors
    /// As [`tensor`](Self::tensor).
    pub fn encoder_layer(
        &self,
        block: &EncoderBlock,
        prefix: &str,
    ) -> Result<TorchEncoderLayer, ModelError> {
        let device = block.norm_attn.gamma.val().device();
        let d_model = block.d_model();
        let d_ff = block.feed_forward.d_ff();
        Ok(TorchEncoderLayer {
            self_attn: self.multihead_attention(
                &block.attention,
                &format!("{prefix}self_attn"),
                &device,
            )?,
            linear1: self.linear(&format!("{prefix}linear1"), d_ff, d_model, &device)?,
            linear2: self.linear(&format!("{prefix}linear2"), d_model, d_ff, &device)?,
            norm1: self.layer_norm(&format!("{prefix}norm1"), d_model, &device)?,
            norm2: self.layer_norm(&format!("{prefix}norm2"), d_model, &device)?,
        })
    }

    /// A `TransformerDecoderLayer`'s tensors under `prefix`, shaped for `block`.
    ///
    /// # Errors
    /// As [`tensor`](Self::tensor); [`ModelError::UnexpectedTensor`] when the block has no
    /// cross-attention to take `multihead_attn`.
    pub fn decoder_layer(
        &self,
        block: &DecoderBlock,
        prefix: &str,
    ) -> Result<TorchDecoderLayer, ModelError> {
        let device = block.norm_self.gamma().lazy_device();
        let d_model = block.d_model();
        let d_ff = block.feed_forward.d_ff();
        let cross = block
            .cross_attention
            .as_ref()
            .ok_or_else(|| ModelError::UnexpectedTensor {
                name: format!("{prefix}multihead_attn.in_proj_weight"),
            })?;
        Ok(TorchDecoderLayer {
            self_attn: self.multihead_attention(
                &block.self_attention,
                &format!("{prefix}self_attn"),
                &device,
            )?,
            multihead_attn: self.multihead_attention(
                cross,
                &format!("{prefix}multihead_attn"),
                &device,
            )?,
            linear1: self.linear(&format!("{prefix}linear1"), d_ff, d_model, &device)?,
            linear2: self.linear(&format!("{prefix}linear2"), d_model, d_ff, &device)?,
            norm1: self.layer_norm(&format!("{prefix}norm1"), d_model, &device)?,
            norm2: self.layer_norm(&format!("{prefix}norm2"), d_model, &device)?,
            norm3: self.layer_norm(&format!("{prefix}norm3"), d_model, &device)?,
        })
    }

    /// An `nn.MultiheadAttention`'s tensors under `name`, shaped for `attention`: the packed
    /// `in_proj_weight`, or `q_proj_weight`, `k_proj_weight`, `v_proj_weight` when those are
    /// stored instead.
    fn multihead_attention(
        &self,
        attention: &MultiHeadAttention,
        name: &str,
        device: &Device,
    ) -> Result<TorchMultiheadAttention, ModelError> {
        let d_model = attention.d_model();
        let d_context = attention.d_context();
        let d_kv = attention.w_k.weight.shape().dims::<2>()[1];
        let rows = [d_model, d_kv, d_kv];
        let out_proj = self.linear(&format!("{name}.out_proj"), d_model, d_model, device)?;
        let bias_name = format!("{name}.in_proj_bias");
        let in_proj_bias = self.optional(&bias_name, [d_model + 2 * d_kv], device)?;
        let separate = format!("{name}.q_proj_weight");
        if self.contains(&separate) && !self.contains(&format!("{name}.in_proj_weight")) {
            let q = self.tensor(&separate, [d_model, d_model], device)?;
            let k = self.tensor(&format!("{name}.k_proj_weight"), [d_kv, d_context], device)?;
            let v = self.tensor(&format!("{name}.v_proj_weight"), [d_kv, d_context], device)?;
            let packed = Tensor::cat(vec![q, k, v], 0); // [d_model + 2 · d_kv, d_context]
            return split_in_proj(packed, in_proj_bias, rows, out_proj, &bias_name);
        }
        let in_proj = self.tensor(
            &format!("{name}.in_proj_weight"),
            [d_model + 2 * d_kv, d_context],
            device,
        )?;
        split_in_proj(in_proj, in_proj_bias, rows, out_proj, &bias_name)
    }

    fn optional<const D: usize>(
        &self,
        name: &str,
        expected: [usize; D],
        device: &Device,
    ) -> Result<Option<Tensor<D>>, ModelError> {
        if self.contains(name) {
            self.tensor(name, expected, device).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Splits packed rows `[W_Q; W_K; W_V]` (and the packed bias) into three projections.
///
/// # Shapes
/// - `weight`: `[rows_q + rows_k + rows_v, d_input]`; `bias`: `[rows_q + rows_k + rows_v]`
fn split_in_proj(
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
    [rows_q, rows_k, rows_v]: [usize; 3],
    out_proj: TorchLinear,
    bias_name: &str,
) -> Result<TorchMultiheadAttention, ModelError> {
    let total = rows_q + rows_k + rows_v;
    if let Some(b) = &bias
        && b.dims() != [total]
    {
        return Err(ModelError::TensorShape {
            name: bias_name.into(),
            expected: vec![total],
            got: b.dims().to_vec(),
        });
    }
    let starts = [0, rows_q, rows_q + rows_k];
    let part = |i: usize, rows: usize| TorchLinear {
        weight: weight.clone().narrow(0, starts[i], rows), // [rows, d_input]
        bias: bias.clone().map(|b| b.narrow(0, starts[i], rows)),
    };
    Ok(TorchMultiheadAttention {
        q: part(0, rows_q),
        k: part(1, rows_k),
        v: part(2, rows_v),
        out_proj,
    })
}

/// Loads the four projections; `prefix` names them in errors (`self_attn.` in a block).
pub(crate) fn load_attention(
    mut attention: MultiHeadAttention,
    weights: TorchMultiheadAttention,
    prefix: &str,
) -> Result<MultiHeadAttention, ModelError> {
    attention.w_q = load_linear(attention.w_q, weights.q, &format!("{prefix}q_proj"))?;
    attention.w_k = load_linear(attention.w_k, weights.k, &format!("{prefix}k_proj"))?;
    attention.w_v = load_linear(attention.w_v, weights.v, &format!("{prefix}v_proj"))?;
    attention.w_o = load_linear(
        attention.w_o,
        weights.out_proj,
        &format!("{prefix}out_proj"),
    )?;
    Ok(attention)
}

/// Sets a burn `Linear` (`[d_input, d_output]`) from PyTorch's `[d_output, d_input]`.
pub(crate) fn load_linear(
    mut linear: Linear,
    torch: TorchLinear,
    name: &str,
) -> Result<Linear, ModelError> {
    let [d_input, d_output] = linear.weight.lazy_shape().dims();
    check_torch_shape(
        &format!("{name}.weight"),
        &[d_output, d_input],
        &torch.weight.dims(),
    )?;
    // The weight stays a transposed view of its `[d_output, d_input]` rows where `ops::linear`
    // multiplies such views in place (flex: the rows read as dot products by a decoding step,
    // gemm's strides for many rows), and always in half precision; elsewhere an f32 weight is
    // copied once into burn's layout.
    let weight = torch.weight.transpose(); // [d_input, d_output]
    let in_place = crate::ops::linear_serves(&weight.device());
    let weight = if weight.dtype() == burn::tensor::DType::F32 && !in_place {
        contiguous(weight)
    } else {
        weight
    };
    linear.weight = replace(linear.weight, weight);
    linear.bias = load_optional(linear.bias, torch.bias, &format!("{name}.bias"), d_output)?;
    Ok(linear)
}

/// `t` with its values laid out in its own (row-major) order, copied once at load.
///
/// A transposed view would otherwise be copied on every call: burn's `Linear` adds leading
/// dimensions to its weight, and flex makes a strided tensor contiguous to reshape it.
fn contiguous<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    let device = t.device();
    Tensor::from_data(t.into_data(), &device)
}

/// Sets a LayerNorm's `γ` and `β`.
pub(crate) fn load_norm(
    mut norm: LayerNorm,
    torch: TorchLayerNorm,
    name: &str,
) -> Result<LayerNorm, ModelError> {
    let [d_model] = norm.gamma.lazy_shape().dims();
    check_torch_shape(&format!("{name}.weight"), &[d_model], &torch.weight.dims())?;
    norm.gamma = replace(norm.gamma, torch.weight);
    norm.beta = load_optional(norm.beta, torch.bias, &format!("{name}.bias"), d_model)?;
    Ok(norm)
}

/// Sets a decoder block's norm: a LayerNorm's `γ` and `β`, or an RMSNorm's `γ` (a stored
/// bias is then [`ModelError::UnexpectedTensor`]).
pub(crate) fn load_block_norm(
    norm: Norm,
    torch: TorchLayerNorm,
    name: &str,
) -> Result<Norm, ModelError> {
    match norm {
        Norm::Layer(norm) => Ok(Norm::Layer(load_norm(norm, torch, name)?)),
        Norm::Rms(mut norm) => {
            let [d_model] = norm.gamma.lazy_shape().dims();
            check_torch_shape(&format!("{name}.weight"), &[d_model], &torch.weight.dims())?;
            if torch.bias.is_some() {
                return Err(ModelError::UnexpectedTensor {
                    name: format!("{name}.bias"),
                });
            }
            norm.gamma = replace(norm.gamma, torch.weight);
            Ok(Norm::Rms(norm))
        }
    }
}

/// A bias the module may or may not have, from a tensor PyTorch may or may not have.
fn load_optional(
    param: Option<Param<Tensor<1>>>,
    torch: Option<Tensor<1>>,
    name: &str,
    len: usize,
) -> Result<Option<Param<Tensor<1>>>, ModelError> {
    match (param, torch) {
        (Some(param), Some(value)) => {
            check_torch_shape(name, &[len], &value.dims())?;
            Ok(Some(replace(param, value)))
        }
        (Some(_), None) => Err(ModelError::MissingTensor { name: name.into() }),
        (None, Some(_)) => Err(ModelError::UnexpectedTensor { name: name.into() }),
        (None, None) => Ok(None),
    }
}

fn check_torch_shape(name: &str, expected: &[usize], got: &[usize]) -> Result<(), ModelError> {
    if expected == got {
        Ok(())
    } else {
        Err(ModelError::TensorShape {
            name: name.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
        })
    }
}

/// A parameter with a new value on the parameter's device, keeping its id and whether it
/// trains. A parameter not yet initialised stays so until now: its random values are never
/// drawn (burn's `transform_for_load`, what its own record loading uses).
pub(crate) fn replace<const D: usize>(
    param: Param<Tensor<D>>,
    value: Tensor<D>,
) -> Param<Tensor<D>> {
    let id = param.id;
    param.transform_for_load(value.detach(), id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EncoderBlockConfig, MultiHeadAttentionConfig};
    use attn_testing::{SeededRng, assert_close_slices, data_dir, to_vec};
    use burn::tensor::TensorData;
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;

    fn state_dict_bytes(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let raw: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, s, v)| {
                (
                    n.to_string(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<(String, TensorView<'_>)> = raw
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b).expect("valid view"),
                )
            })
            .collect();
        safetensors::serialize(views, None).expect("serialises")
    }

    fn relu_post_norm_bytes() -> Vec<u8> {
        std::fs::read(data_dir().join("encoder_layer_relu_post_norm.safetensors"))
            .expect("reference file")
    }

    fn block(device: &Device) -> EncoderBlock {
        EncoderBlockConfig::new(8, 2, 16)
            .with_dropout(0.0)
            .init(device)
            .expect("valid")
    }

    #[test]
    fn weights_are_transposed_from_pytorch_layout() {
        let device = Device::flex();
        let mut rng = SeededRng::new(51);
        let mha = MultiHeadAttentionConfig::new(4, 2)
            .with_d_context(Some(3))
            .init(&device)
            .expect("valid");
        let linear = |d_out, d_in, rng: &mut SeededRng| TorchLinear {
            weight: rng.tensor([d_out, d_in], &device),
            bias: Some(rng.tensor([d_out], &device)),
        };
        let weights = TorchMultiheadAttention {
            q: linear(4, 4, &mut rng),
            k: linear(4, 3, &mut rng),
            v: linear(4, 3, &mut rng),
            out_proj: linear(4, 4, &mut rng),
        };
        let k_torch = weights.k.weight.clone();
        let mha = mha.load_pytorch(weights).expect("shapes fit");
        assert_eq!(mha.w_k.weight.val().dims(), [3, 4]);
        assert_eq!(to_vec(mha.w_k.weight.val()), to_vec(k_torch.transpose()));
    }

    #[test]
    fn in_proj_rows_split_into_query_key_value() {
        let device = Device::flex();
        let data: Vec<f32> = (0..6 * 2).map(|i| i as f32).collect();
        let in_proj = Tensor::<2>::from_data(TensorData::new(data, [6, 2]), &device);
        let bias = Tensor::<1>::from_floats([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &device);
        let out = TorchLinear {
            weight: Tensor::zeros([2, 2], &device),
            bias: None,
        };
        let split =
            TorchMultiheadAttention::from_in_proj(in_proj, Some(bias), out).expect("3 · 2 rows");
        assert_eq!(to_vec(split.k.weight), [4.0, 5.0, 6.0, 7.0]);
        assert_eq!(to_vec(split.v.bias.expect("bias")), [4.0, 5.0]);
        let bad = Tensor::<2>::zeros([5, 2], &device);
        let out = TorchLinear {
            weight: Tensor::zeros([2, 2], &device),
            bias: None,
        };
        let err = TorchMultiheadAttention::from_in_proj(bad, None, out).expect_err("5 rows");
        assert_eq!(
            err.to_string(),
            "tensor `in_proj_weight` has shape [5, 2], but the module needs [6, 2] (PyTorch layout)"
        );
    }

    #[test]
    fn reference_file_lists_pytorch_names_and_loads() {
        let device = Device::flex();
        let dict = StateDict::from_safetensors(&relu_post_norm_bytes()).expect("valid file");
        assert!(dict.contains("self_attn.in_proj_weight"));
        assert_eq!(dict.shape("linear1.weight"), Some(&[16, 8][..]));
        assert_eq!(dict.names().count(), 12);
        let loaded = block(&device)
            .load_pytorch_state_dict(&dict, "")
            .expect("loads");
        let gamma = to_vec(loaded.norm_ff.gamma.val());
        let want = to_vec(dict.tensor("norm2.weight", [8], &device).expect("present"));
        assert_close_slices(&gamma, &want, 0.0, 0.0, "norm2 is the feed-forward norm");
    }

    #[test]
    fn a_missing_tensor_is_named() {
        let device = Device::flex();
        let dict = StateDict::from_safetensors(&relu_post_norm_bytes()).expect("valid file");
        let mut kept: Vec<(&str, Vec<usize>, Vec<f32>)> = Vec::new();
        let names: Vec<String> = dict.names().map(str::to_string).collect();
        for name in &names {
            if name != "linear2.bias" {
                let shape = dict.shape(name).expect("listed").to_vec();
                let t = match shape.len() {
                    1 => to_vec(dict.tensor::<1>(name, [shape[0]], &device).expect("f32")),
                    _ => to_vec(
                        dict.tensor::<2>(name, [shape[0], shape[1]], &device)
                            .expect("f32"),
                    ),
                };
                kept.push((name.as_str(), shape, t));
            }
        }
        let dict = StateDict::from_safetensors(&state_dict_bytes(&kept)).expect("valid");
        let err = block(&device)
            .load_pytorch_state_dict(&dict, "")
            .expect_err("no linear2.bias");
        assert_eq!(
            err.to_string(),
            "tensor `linear2.bias` is missing from the state dict"
        );
    }

    #[test]
    fn a_wrong_shape_names_the_tensor_and_both_shapes() {
        let device = Device::flex();
        // A block with d_ff = 12 cannot take PyTorch's d_ff = 16 weights.
        let dict = StateDict::from_safetensors(&relu_post_norm_bytes()).expect("valid file");
        let narrow = EncoderBlockConfig::new(8, 2, 12)
            .with_dropout(0.0)
            .init(&device)
            .expect("valid");
        let err = narrow
            .load_pytorch_state_dict(&dict, "")
            .expect_err("d_ff differs");
        assert!(
            matches!(&err, ModelError::TensorShape { name, expected, got }
                if name == "linear1.weight" && expected == &[12, 8] && got == &[16, 8]),
            "{err}"
        );
    }

    #[test]
    fn a_bias_the_module_lacks_is_unexpected() {
        let device = Device::flex();
        let bytes = state_dict_bytes(&[
            ("weight", vec![2, 3], vec![0.0; 6]),
            ("bias", vec![2], vec![0.0; 2]),
        ]);
        let dict = StateDict::from_safetensors(&bytes).expect("valid");
        let torch = TorchLinear {
            weight: dict.tensor("weight", [2, 3], &device).expect("present"),
            bias: Some(dict.tensor("bias", [2], &device).expect("present")),
        };
        let linear = burn::nn::LinearConfig::new(3, 2)
            .with_bias(false)
            .init(&device);
        let err = load_linear(linear, torch, "proj").expect_err("no bias in module");
        assert!(matches!(err, ModelError::UnexpectedTensor { ref name } if name == "proj.bias"));
    }
}
