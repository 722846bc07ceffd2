//! Outputs and per-head weights against PyTorch 2.15 (`nn.MultiheadAttention`,
//! `nn.TransformerEncoderLayer`), with parameters set from the JSON reference tensors and from the
//! `state_dict`s PyTorch saved as safetensors, on every compiled-in backend.
//!
//! `cargo test -p attn-model --test pytorch_reference`

use attn_model::{
    Activation, EncoderBlock, EncoderBlockConfig, EncoderInput, MhaInput, MultiHeadAttentionConfig,
    NeedWeights, NormPlacement, StateDict, TorchEncoderLayer, TorchLayerNorm, TorchLinear,
    TorchMultiheadAttention,
};
use attn_testing::reference::encoder_layer::Activation as RefActivation;
use attn_testing::{
    ATOL, AttentionWeights, EncoderLayerCase, EncoderLayerFile, MhaFile, RTOL, RefTensor,
    TestDevice, assert_close, data_dir, for_each_device, reference_file,
};
use burn::tensor::Device;

fn linear(weight: &RefTensor, bias: &RefTensor, device: &Device) -> TorchLinear {
    TorchLinear {
        weight: weight.tensor(device),
        bias: Some(bias.tensor(device)),
    }
}

fn attention(w: &AttentionWeights, device: &Device) -> TorchMultiheadAttention {
    TorchMultiheadAttention {
        q: linear(&w.w_q, &w.b_q, device),
        k: linear(&w.w_k, &w.b_k, device),
        v: linear(&w.w_v, &w.b_v, device),
        out_proj: linear(&w.w_o, &w.b_o, device),
    }
}

fn layer_norm(gamma: &RefTensor, beta: &RefTensor, device: &Device) -> TorchLayerNorm {
    TorchLayerNorm {
        weight: gamma.tensor(device),
        bias: Some(beta.tensor(device)),
    }
}

#[test]
fn multi_head_attention_matches_pytorch_outputs_and_per_head_weights() {
    let file: MhaFile = reference_file();
    assert_eq!(file.cases.len(), 2, "self- and cross-attention");
    for_each_device(|d| {
        for case in &file.cases {
            let device = &d.device;
            let weights = attention(&case.attention, device);
            let mha = MultiHeadAttentionConfig::new(case.d_model, case.n_heads)
                .init(device)
                .expect("valid config")
                .load_pytorch(weights)
                .expect("shapes fit");
            let query = case.query.tensor::<3>(device);
            let input = if case.is_self_attention() {
                MhaInput::self_attention(query)
            } else {
                MhaInput::cross_attention(query, case.context.tensor(device))
            };
            let padding = case.key_padding_masked.bool_tensor(device);
            let out = mha.forward(
                input
                    .with_padding(padding)
                    .with_weights(NeedWeights::PerHead),
            );
            let what = format!("{} on {}", case.name, d.name);
            assert_close(
                out.output,
                &case.out,
                ATOL,
                RTOL,
                &format!("{what}: output"),
            );
            assert_close(
                out.weights.expect("asked for weights"),
                case.weights_per_head
                    .as_ref()
                    .expect("every case has weights"),
                ATOL,
                RTOL,
                &format!("{what}: weights"),
            );
        }
    });
}

fn block_config(case: &EncoderLayerCase) -> EncoderBlockConfig {
    let activation = match case.activation {
        RefActivation::Relu => Activation::Relu,
        RefActivation::Gelu => Activation::Gelu,
    };
    let norm = if case.norm_first {
        NormPlacement::Pre
    } else {
        NormPlacement::Post
    };
    EncoderBlockConfig::new(case.d_model, case.n_heads, case.d_ff)
        .with_dropout(0.0)
        .with_activation(activation)
        .with_norm(norm)
        .with_layer_norm_eps(case.layer_norm_eps)
}

fn check_block(block: &EncoderBlock, case: &EncoderLayerCase, d: &TestDevice, source: &str) {
    let x = case.input.tensor::<3>(&d.device);
    let padding = case.key_padding_masked.bool_tensor(&d.device);
    let out = block
        .forward(EncoderInput::new(x).with_padding(padding))
        .output;
    let what = format!("{} from {source} on {}", case.name, d.name);
    assert_close(out, &case.out, ATOL, RTOL, &what);
}

#[test]
fn encoder_blocks_match_pytorch_from_json_weights() {
    let file: EncoderLayerFile = reference_file();
    assert_eq!(file.cases.len(), 4, "relu/gelu x post/pre norm");
    for_each_device(|d| {
        for case in &file.cases {
            let device = &d.device;
            let weights = TorchEncoderLayer {
                self_attn: attention(&case.self_attn, device),
                linear1: linear(&case.w_ff1, &case.b_ff1, device),
                linear2: linear(&case.w_ff2, &case.b_ff2, device),
                norm1: layer_norm(&case.norm1_gamma, &case.norm1_beta, device),
                norm2: layer_norm(&case.norm2_gamma, &case.norm2_beta, device),
            };
            let block = block_config(case)
                .init(device)
                .expect("valid config")
                .load_pytorch(weights)
                .expect("shapes fit");
            check_block(&block, case, d, "JSON");
        }
    });
}

#[test]
fn encoder_blocks_match_pytorch_from_safetensors_state_dicts() {
    let file: EncoderLayerFile = reference_file();
    for_each_device(|d| {
        for case in &file.cases {
            let path = data_dir().join(case.safetensors_file());
            let dict = StateDict::from_safetensors_file(&path).expect("valid safetensors");
            let block = block_config(case)
                .init(&d.device)
                .expect("valid config")
                .load_pytorch_state_dict(&dict, "")
                .expect("every tensor present with its shape");
            check_block(&block, case, d, "safetensors");
        }
    });
}

#[test]
fn a_state_dict_loads_into_every_layer_of_an_encoder_under_its_prefix() {
    // nn.TransformerEncoder names its layers `layers.{i}.`: build such a dict from two
    // reference layers and check each block reproduces its own PyTorch output.
    let file: EncoderLayerFile = reference_file();
    let device = Device::flex();
    let cases = [&file.cases[0], &file.cases[2]];
    let mut raw: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let bytes =
            std::fs::read(data_dir().join(case.safetensors_file())).expect("reference file");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid");
        for (name, view) in st.iter() {
            raw.push((
                format!("layers.{i}.{name}"),
                view.shape().to_vec(),
                view.data().to_vec(),
            ));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = raw
        .iter()
        .map(|(n, s, b)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .expect("valid view");
            (n.clone(), view)
        })
        .collect();
    let dict =
        StateDict::from_safetensors(&safetensors::serialize(views, None).expect("serialises"))
            .expect("valid");
    // Both cases are post-norm; they differ in activation, so build each block on its own and
    // load through the encoder path for the first (ReLU) layer.
    let relu = block_config(cases[0]);
    let encoder = attn_model::EncoderConfig::new(2, relu)
        .init(&device)
        .expect("valid")
        .load_pytorch_state_dict(&dict, "")
        .expect("both layers present");
    assert_eq!(encoder.n_layers(), 2);
    let layer = |prefix: &str| {
        block_config(cases[0])
            .init(&device)
            .expect("valid")
            .load_pytorch_state_dict(&dict, prefix)
            .expect("layer present")
    };
    let x = cases[0].input.tensor::<3>(&device);
    let padding = cases[0].key_padding_masked.bool_tensor(&device);
    let by_hand = layer("layers.1.")
        .forward(
            EncoderInput::new(
                layer("layers.0.")
                    .forward(EncoderInput::new(x.clone()).with_padding(padding.clone()))
                    .output,
            )
            .with_padding(padding.clone()),
        )
        .output;
    attn_testing::assert_tensors_close(
        encoder
            .forward(EncoderInput::new(x).with_padding(padding))
            .output,
        by_hand,
        0.0,
        0.0,
        "layer order",
    );
    let gelu = block_config(cases[1])
        .init(&device)
        .expect("valid")
        .load_pytorch_state_dict(&dict, "layers.1.")
        .expect("second layer present");
    let d = TestDevice {
        name: "flex",
        device: device.clone(),
    };
    check_block(&gelu, cases[1], &d, "layers.1. prefix");
    // A prefix with nothing under it names the first missing tensor.
    let err = block_config(cases[0])
        .init(&device)
        .expect("valid")
        .load_pytorch_state_dict(&dict, "layers.2.")
        .expect_err("no third layer");
    assert_eq!(
        err.to_string(),
        "tensor `layers.2.self_attn.out_proj.weight` is missing from the state dict"
    );
}
