//! Scaled dot-product attention against PyTorch's reference vectors, against the plain formula
//! (`attn_core::formula::attention`), against finite differences, and against the properties
//! the math promises, on every strategy and backend.

use attn_core::backend::BackendKind;
use attn_core::{
    AttentionError, AttentionOptions, CausalAlignment, DECODE_MAX_QUERIES, DECODE_MIN_KEYS,
    NATIVE_TRAINING_MIN_KEYS, Route, Strategy, causal_mask, formula, native_attention,
    native_attention_backward, native_serves, padding_mask, padding_mask_from_lengths,
    repeat_kv_heads, scaled_dot_product_attention, try_scaled_dot_product_attention,
};
use attn_testing::{
    ATOL, RTOL, RefTensor, SeededRng, TestDevice, assert_close, assert_close_slices,
    assert_tensors_close, for_each_device, load_reference, to_vec,
};
use burn::tensor::{Bool, Device, Tensor, TensorData};
use serde::Deserialize;

#[derive(Deserialize)]
struct SdpaFile {
    cases: Vec<SdpaCase>,
}

#[derive(Deserialize)]
struct SdpaCase {
    name: String,
    q: RefTensor,
    k: RefTensor,
    v: RefTensor,
    out: RefTensor,
    weights: RefTensor,
    masked: Option<RefTensor>,
    bias: Option<RefTensor>,
    causal: Option<String>,
    scale: Option<f64>,
    grad_out: Option<RefTensor>,
    grad_q: Option<RefTensor>,
    grad_k: Option<RefTensor>,
    grad_v: Option<RefTensor>,
}

impl SdpaCase {
    fn options(&self, device: &Device) -> AttentionOptions {
        let mut options = AttentionOptions::new();
        if let Some(m) = &self.masked {
            options = options.with_mask(m.bool_tensor(device));
        }
        if let Some(b) = &self.bias {
            options = options.with_bias(b.tensor(device));
        }
        if let Some(c) = &self.causal {
            options = options.with_causal(match c.as_str() {
                "top_left" => CausalAlignment::TopLeft,
                "bottom_right" => CausalAlignment::BottomRight,
                other => panic!("unknown causal alignment {other}"),
            });
        }
        if let Some(s) = self.scale {
            options = options.with_scale(s);
        }
        options
    }
}

/// Keys per block of the chunked strategy below: the 7 reference keys span three blocks.
const REFERENCE_BLOCK: usize = 3;

/// Every strategy, with a chunk small enough that the 7 reference keys span three blocks.
const STRATEGIES: [Strategy; 5] = [
    Strategy::Explicit,
    Strategy::Chunked {
        block: REFERENCE_BLOCK,
    },
    Strategy::Fused,
    Strategy::Native,
    Strategy::Auto,
];

/// The route a forced strategy takes on `device` (`None` for `Auto`, whose route depends on
/// more than the device).
fn forced_route(strategy: Strategy, device: &Device) -> Option<Route> {
    match strategy {
        Strategy::Explicit => Some(Route::Explicit),
        // Every test backend (flex, ndarray, wgpu) runs chunked as its tensor-operation blocks.
        Strategy::Chunked { block } => Some(Route::ChunkedBlocks { block }),
        Strategy::Fused => Some(Route::Fused),
        Strategy::Native if native_serves(device) => Some(Route::NativeOperation),
        // The test problems are float32 with small heads: the GPU kernels take them all.
        Strategy::Native if on_cube(device) => Some(Route::CubeOperation),
        Strategy::Native => Some(Route::NativeHost),
        Strategy::Auto => None,
    }
}

/// Whether `device` is a CubeCL backend's (wgpu in the tests), where the native strategy runs
/// the GPU kernels.
fn on_cube(device: &Device) -> bool {
    BackendKind::of(device) == BackendKind::Cube
}

/// The number of blocks of `block` keys that `seq_len_kv` keys span.
fn blocks_spanned(seq_len_kv: usize, block: usize) -> usize {
    seq_len_kv.div_ceil(block)
}

#[test]
fn every_reference_case_matches_pytorch_on_every_strategy() {
    let file: SdpaFile = load_reference("sdpa.json");
    assert!(file.cases.len() >= 8, "reference file lost cases");
    for_each_device(|d| {
        for case in &file.cases {
            let formula = formula_context(
                case.q.tensor(&d.device),
                case.k.tensor(&d.device),
                case.v.tensor(&d.device),
                &case.options(&d.device),
            );
            for strategy in STRATEGIES {
                let what = format!("{} / {} / {}", d.name, case.name, strategy.name());
                let options = case.options(&d.device).with_strategy(strategy);
                let k = case.k.tensor::<4>(&d.device);
                assert_eq!(blocks_spanned(k.dims()[2], REFERENCE_BLOCK), 3, "{what}");
                let out = scaled_dot_product_attention(
                    case.q.tensor(&d.device),
                    k,
                    case.v.tensor(&d.device),
                    &options,
                );
                if let Some(route) = forced_route(strategy, &d.device) {
                    assert_eq!(out.route, route, "{what}");
                }
                assert_close(
                    out.context.clone(),
                    &case.out,
                    ATOL,
                    RTOL,
                    &format!("{what}: context"),
                );
                assert_tensors_close(
                    out.context,
                    formula.clone(),
                    ATOL,
                    RTOL,
                    &format!("{what}: context against the formula"),
                );
            }
            let out = scaled_dot_product_attention(
                case.q.tensor(&d.device),
                case.k.tensor(&d.device),
                case.v.tensor(&d.device),
                &case.options(&d.device).with_need_weights(true),
            );
            let weights = out.weights.expect("weights were asked for");
            assert_close(
                weights,
                &case.weights,
                ATOL,
                RTOL,
                &format!("{} / {}: weights", d.name, case.name),
            );
        }
    });
}

/// The additive mask of `formula::attention` for the call `options` describes, and which
/// keys it masks: the caller's mask and causality become `−∞`, the bias is added.
///
/// # Shapes
/// - returns: both `[batch, n_heads, seq_len_q, seq_len_kv]`; the mask is `None` when the call
///   masks and biases nothing
fn formula_mask(
    shape: [usize; 4],
    options: &AttentionOptions,
    device: &Device,
) -> (Option<Tensor<4>>, Tensor<4, Bool>) {
    let [_, _, seq_len_q, seq_len_kv] = shape;
    let causal = options.causal.map(|alignment| {
        causal_mask(seq_len_q, seq_len_kv, alignment, device)
            .reshape([1, 1, seq_len_q, seq_len_kv]) // [1, 1, seq_len_q, seq_len_kv]
            .expand(shape)
    });
    let caller = options.mask.clone().map(|mask| mask.expand(shape));
    let masked = match (caller, causal) {
        (Some(caller), Some(causal)) => caller.bool_or(causal),
        (Some(mask), None) | (None, Some(mask)) => mask,
        (None, None) => Tensor::<4, Bool>::full(shape, false, device),
    };
    if options.mask.is_none() && options.causal.is_none() && options.bias.is_none() {
        return (None, masked);
    }
    let additive = Tensor::<4>::zeros(shape, device).mask_fill(masked.clone(), f32::NEG_INFINITY);
    let additive = match &options.bias {
        Some(bias) => additive + bias.clone(),
        None => additive,
    };
    (Some(additive), masked)
}

/// `formula::attention` on the call that `q`, `k`, `v` and `options` describe (mask, bias,
/// causality, scale; grouped key/value heads repeated), as the strategies answer it: a row
/// whose keys are all masked is NaN in the formula (`0/0`) and zeros in the strategies, so
/// such rows, after checking that they and no others hold NaN, are set to zero.
///
/// # Shapes
/// As [`scaled_dot_product_attention`]; returns the context
/// `[batch, n_heads, seq_len_q, d_value]`.
fn formula_context(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> Tensor<4> {
    let [batch, n_heads, seq_len_q, d_head] = q.dims();
    let [_, _, seq_len_kv, d_value] = v.dims();
    let device = q.device();
    let (mask, masked) = formula_mask([batch, n_heads, seq_len_q, seq_len_kv], options, &device);
    let scale = options.scale.unwrap_or(1.0 / (d_head as f64).sqrt());
    let k = repeat_kv_heads(k, n_heads); // [batch, n_heads, seq_len_kv, d_head]
    let v = repeat_kv_heads(v, n_heads); // [batch, n_heads, seq_len_kv, d_value]
    let context = formula::attention(q, k, v, mask, scale); // [batch, n_heads, seq_len_q, d_value]
    let masked = masked
        .into_data()
        .convert::<bool>()
        .try_to_vec::<bool>()
        .expect("bool data");
    let mut values = to_vec(context);
    let rows = values.chunks_mut(d_value).zip(masked.chunks(seq_len_kv));
    for (row, (values, keys)) in rows.enumerate() {
        if keys.iter().all(|&m| m) {
            assert!(
                values.iter().all(|x| x.is_nan()),
                "row {row} of the formula masks every key and holds {values:?}, not NaN"
            );
            values.fill(0.0);
        }
    }
    let shape = [batch, n_heads, seq_len_q, d_value];
    Tensor::from_data(TensorData::new(values, shape), &device)
}

#[test]
fn the_formula_matches_pytorch_on_every_reference_case() {
    // The formula alone, against PyTorch: what every strategy is compared with is itself right.
    let file: SdpaFile = load_reference("sdpa.json");
    assert!(file.cases.len() >= 8, "reference file lost cases");
    for_each_device(|d| {
        for case in &file.cases {
            let options = case.options(&d.device);
            let context = formula_context(
                case.q.tensor(&d.device),
                case.k.tensor(&d.device),
                case.v.tensor(&d.device),
                &options,
            );
            let what = format!("{} / {}: the formula", d.name, case.name);
            assert_close(context, &case.out, ATOL, RTOL, &what);
        }
    });
}

#[test]
fn the_formula_gives_nan_exactly_where_every_key_is_masked() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(61);
        let q = rng.tensor([3, 3, 5, 4], &d.device);
        let k = rng.tensor([3, 3, 7, 4], &d.device);
        let v = rng.tensor([3, 3, 7, 6], &d.device);
        // Query 2 of head 1 of batch 0 sees no key: row 1 · 5 + 2 of the 45 rows of queries.
        let hidden_row = 5 + 2;
        let mut mask = vec![0.0f32; 3 * 3 * 5 * 7];
        mask[hidden_row * 7..(hidden_row + 1) * 7].fill(f32::NEG_INFINITY);
        let mask = Tensor::<4>::from_data(TensorData::new(mask, [3, 3, 5, 7]), &d.device);
        let context = to_vec(formula::attention(q, k, v, Some(mask), 0.5));
        for (index, x) in context.iter().enumerate() {
            let row = index / 6;
            assert_eq!(
                x.is_nan(),
                row == hidden_row,
                "{}: value {index} is {x}",
                d.name
            );
        }
    });
}

/// The strategies checked against the formula on seeded inputs: every one, the chunked with a
/// block that splits 7 keys into three.
const AGAINST_THE_FORMULA: [Strategy; 5] = [
    Strategy::Explicit,
    Strategy::Chunked { block: 3 },
    Strategy::Fused,
    Strategy::Native,
    Strategy::Auto,
];

#[test]
fn every_strategy_equals_the_formula_with_and_without_masks_on_odd_sizes() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(67);
        let device = &d.device;
        // batch 3, n_heads 3, seq_len_q 5, seq_len_kv 7, d_head 4, d_value 6.
        let q = rng.tensor([3, 3, 5, 4], device);
        let k = rng.tensor([3, 3, 7, 4], device);
        let v = rng.tensor([3, 3, 7, 6], device);
        let padding = padding_mask_from_lengths(&[7, 4, 1], 7, device).expect("lengths fit");
        let cases = [
            ("no mask", AttentionOptions::new()),
            (
                "padding",
                AttentionOptions::new().with_mask(padding_mask(padding.clone())),
            ),
            (
                "a mask per head and query",
                AttentionOptions::new().with_mask(rng.bool_tensor([3, 3, 5, 7], 0.4, device)),
            ),
            (
                "top-left causal with a bias",
                AttentionOptions::new()
                    .with_causal(CausalAlignment::TopLeft)
                    .with_bias(rng.tensor([1, 3, 5, 7], device)),
            ),
            (
                "bottom-right causal with padding and scale 0.3",
                AttentionOptions::new()
                    .with_causal(CausalAlignment::BottomRight)
                    .with_mask(padding_mask(padding))
                    .with_scale(0.3),
            ),
        ];
        for (name, options) in cases {
            let formula = formula_context(q.clone(), k.clone(), v.clone(), &options);
            for strategy in AGAINST_THE_FORMULA {
                let out = scaled_dot_product_attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &options.clone().with_strategy(strategy),
                );
                let what = format!(
                    "{} / {name} / {}: against the formula",
                    d.name,
                    strategy.name()
                );
                if let Some(route) = forced_route(strategy, device) {
                    assert_eq!(out.route, route, "{what}");
                }
                assert_tensors_close(out.context, formula.clone(), ATOL, RTOL, &what);
            }
        }
    });
}

#[test]
fn every_strategy_equals_the_formula_on_a_decoding_step_with_grouped_heads() {
    // One query against 70 keys and one key/value head for three query heads: on the CPU
    // backends the native and automatic strategies take the decode pass.
    for_each_device(|d| {
        let mut rng = SeededRng::new(71);
        let device = &d.device;
        let q = rng.tensor([3, 3, 1, 4], device);
        let k = rng.tensor([3, 1, 70, 4], device);
        let v = rng.tensor([3, 1, 70, 6], device);
        let padding = padding_mask_from_lengths(&[70, 33, 5], 70, device).expect("lengths fit");
        let options = AttentionOptions::new()
            .with_mask(padding_mask(padding))
            .with_bias(rng.tensor([1, 3, 1, 70], device))
            .with_causal(CausalAlignment::BottomRight);
        let formula = formula_context(q.clone(), k.clone(), v.clone(), &options);
        for strategy in AGAINST_THE_FORMULA {
            let out = scaled_dot_product_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                &options.clone().with_strategy(strategy),
            );
            let what = format!(
                "{} / decoding / {}: against the formula",
                d.name,
                strategy.name()
            );
            let decode = matches!(strategy, Strategy::Native | Strategy::Auto);
            if decode && native_serves(device) {
                assert_eq!(out.route, Route::NativeDecode, "{what}");
            }
            assert_tensors_close(out.context, formula.clone(), ATOL, RTOL, &what);
        }
    });
}

#[test]
fn every_differentiable_strategy_has_the_formulas_gradients() {
    // The formula differentiated by burn's autodiff against each strategy's own backward:
    // explicit through autodiff, chunked and native through their block-by-block backwards.
    for_each_device(|d| {
        let mut rng = SeededRng::new(73);
        let device = &d.device;
        let autodiff = device.clone().autodiff();
        let q = rng.tensor([3, 3, 5, 4], device);
        let k = rng.tensor([3, 3, 7, 4], device);
        let v = rng.tensor([3, 3, 7, 6], device);
        let g = rng.tensor([3, 3, 5, 6], device);
        let padding = padding_mask_from_lengths(&[7, 4, 1], 7, &autodiff).expect("lengths fit");
        let options = AttentionOptions::new()
            .with_mask(padding_mask(padding))
            .with_bias(rng.tensor([1, 3, 5, 7], &autodiff))
            .with_causal(CausalAlignment::TopLeft);
        // Lengths of at least 1 and top-left causality leave every query key 0: no row is
        // fully masked, so the formula's gradients are finite.
        let (mask, _) = formula_mask([3, 3, 5, 7], &options, &autodiff);
        let on = |t: &Tensor<4>| t.clone().to_device(&autodiff).autodiff().require_grad();
        let (qa, ka, va) = (on(&q), on(&k), on(&v));
        let context = formula::attention(qa.clone(), ka.clone(), va.clone(), mask, 0.5);
        let grads = (context * g.clone().to_device(&autodiff).autodiff())
            .sum()
            .backward();
        let expected = [&qa, &ka, &va].map(|t| t.grad(&grads).expect("in the graph"));
        for strategy in [
            Strategy::Explicit,
            Strategy::Chunked { block: 3 },
            Strategy::Native,
            Strategy::Auto,
        ] {
            let what = format!(
                "{} / {}: gradients against the formula",
                d.name,
                strategy.name()
            );
            let options = options.clone().with_strategy(strategy);
            let grads = gradients(d, q.clone(), k.clone(), v.clone(), g.clone(), &options);
            for ((got, want), name) in grads.into_iter().zip(expected.clone()).zip(["q", "k", "v"])
            {
                assert_tensors_close(got, want, ATOL, RTOL, &format!("{what}: grad_{name}"));
            }
        }
    });
}

/// Gradients of `sum(out * grad_out)` with respect to q, k and v.
fn gradients(
    d: &TestDevice,
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    grad_out: Tensor<4>,
    options: &AttentionOptions,
) -> [Tensor<4>; 3] {
    routed_gradients(d, q, k, v, grad_out, options).1
}

/// [`gradients`], with the route the forward took.
fn routed_gradients(
    d: &TestDevice,
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    grad_out: Tensor<4>,
    options: &AttentionOptions,
) -> (Route, [Tensor<4>; 3]) {
    let device = d.device.clone().autodiff();
    let q = q.to_device(&device).autodiff().require_grad();
    let k = k.to_device(&device).autodiff().require_grad();
    let v = v.to_device(&device).autodiff().require_grad();
    let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), options);
    let loss = (out.context * grad_out.to_device(&device).autodiff()).sum();
    let grads = loss.backward();
    let grads = [&q, &k, &v].map(|t| t.grad(&grads).expect("input requires grad"));
    (out.route, grads)
}

#[test]
fn reference_gradients_match_pytorch_on_every_strategy() {
    let file: SdpaFile = load_reference("sdpa.json");
    let with_grads: Vec<_> = file.cases.iter().filter(|c| c.grad_out.is_some()).collect();
    assert_eq!(with_grads.len(), 3, "three reference cases carry gradients");
    for_each_device(|d| {
        for case in &with_grads {
            for strategy in STRATEGIES {
                let what = format!("{} / {} / {}", d.name, case.name, strategy.name());
                let grad_out = case.grad_out.as_ref().expect("filtered").tensor(&d.device);
                let (q, k, v) = (
                    case.q.tensor(&d.device),
                    case.k.tensor(&d.device),
                    case.v.tensor(&d.device),
                );
                // The native CPU kernel's functions are called directly here, its backward pass
                // computing the gradients from the forward's log-sum-exp; on the GPU the
                // strategy trains through its kernels as one autodiff operation.
                let [gq, gk, gv] = if strategy == Strategy::Native && !on_cube(&d.device) {
                    native_gradients(q, k, v, grad_out, &case.options(&d.device))
                } else {
                    let autodiff = d.device.clone().autodiff();
                    let options = case.options(&autodiff).with_strategy(strategy);
                    let (route, grads) = routed_gradients(d, q, k, v, grad_out, &options);
                    // Chunked trains through its own block-by-block backward, over three blocks.
                    if let Some(expected) = forced_route(strategy, &d.device) {
                        assert_eq!(route, expected, "{what}");
                    }
                    grads
                };
                let expected = [&case.grad_q, &case.grad_k, &case.grad_v];
                for ((got, want), name) in
                    [gq, gk, gv].into_iter().zip(expected).zip(["q", "k", "v"])
                {
                    let want = want.as_ref().expect("case carries gradients");
                    assert_close(got, want, ATOL, RTOL, &format!("{what}: grad_{name}"));
                }
            }
        }
    });
}

/// `x`, `[batch, heads, rows, width]`, as heads split off a projection hold it: the values
/// laid out `[batch, rows, heads, width]`, seen with the middle axes swapped (a strided view;
/// flex's native kernels read it in place).
fn token_major(x: Tensor<4>) -> Tensor<4> {
    let device = x.device();
    let values = x.swap_dims(1, 2).into_data(); // [batch, rows, heads, width], row-major
    Tensor::<4>::from_data(values, &device).swap_dims(1, 2) // [batch, heads, rows, width], strided
}

#[test]
fn reference_gradients_match_pytorch_through_the_native_operation_on_token_major_views() {
    let file: SdpaFile = load_reference("sdpa.json");
    for_each_device(|d| {
        if !native_serves(&d.device) {
            return;
        }
        for case in file.cases.iter().filter(|c| c.grad_out.is_some()) {
            let what = format!("{} / {} / token-major", d.name, case.name);
            let device = d.device.clone().autodiff();
            let options = case.options(&device).with_strategy(Strategy::Native);
            let [q, k, v] = [&case.q, &case.k, &case.v].map(|t| {
                token_major(t.tensor::<4>(&d.device).to_device(&device).autodiff()).require_grad()
            });
            let grad_out = case
                .grad_out
                .as_ref()
                .expect("filtered")
                .tensor::<4>(&d.device);
            let grad_out = grad_out.to_device(&device).autodiff();
            let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options);
            assert_eq!(out.route, Route::NativeOperation, "{what}");
            assert_close(
                out.context.clone(),
                &case.out,
                ATOL,
                RTOL,
                &format!("{what}: context"),
            );
            // Through the heads' merge, as in multi-head attention: the gradient of the
            // context reaches the operation token-major too.
            let merged = out.context.swap_dims(1, 2) * grad_out.swap_dims(1, 2);
            let grads = merged.sum().backward();
            let expected = [&case.grad_q, &case.grad_k, &case.grad_v];
            for ((t, want), name) in [q, k, v].iter().zip(expected).zip(["q", "k", "v"]) {
                let got = t.grad(&grads).expect("input requires grad");
                let want = want.as_ref().expect("case carries gradients");
                assert_close(got, want, ATOL, RTOL, &format!("{what}: grad_{name}"));
            }
        }
    });
}

/// The gradients of `sum(out * grad_out)` from the native kernel's own backward pass.
fn native_gradients(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    grad_out: Tensor<4>,
    options: &AttentionOptions,
) -> [Tensor<4>; 3] {
    let forward = native_attention(q.clone(), k.clone(), v.clone(), options).expect("valid case");
    let grads =
        native_attention_backward(q, k, v, &forward, grad_out, options).expect("valid case");
    [grads.dq, grads.dk, grads.dv]
}

#[test]
fn gradients_agree_with_finite_differences() {
    // A tiny case with a mask, a bias and top-left causality; every element of q, k and v is
    // nudged both ways and the change of L = sum(out * g) compared with the analytic gradient.
    for_each_device(|d| {
        let mut rng = SeededRng::new(11);
        let device = &d.device;
        let q = rng.tensor([1, 2, 3, 2], device);
        let k = rng.tensor([1, 2, 4, 2], device);
        let v = rng.tensor([1, 2, 4, 3], device);
        let g = rng.tensor([1, 2, 3, 3], device);
        let bias = rng.tensor([1, 2, 3, 4], device);
        let mask = Tensor::<4, Bool>::from_data(
            burn::tensor::TensorData::new(vec![false, false, true, false], [1, 1, 1, 4]),
            device,
        );
        for strategy in [
            Strategy::Explicit,
            Strategy::Chunked { block: 3 },
            Strategy::Native,
        ] {
            let options = |dev: &Device| {
                AttentionOptions::new()
                    .with_mask(mask.clone().to_device(dev))
                    .with_bias(bias.clone().to_device(dev))
                    .with_causal(CausalAlignment::TopLeft)
                    .with_strategy(strategy)
            };
            let analytic = if strategy == Strategy::Native && !on_cube(device) {
                native_gradients(q.clone(), k.clone(), v.clone(), g.clone(), &options(device))
            } else {
                gradients(
                    d,
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    g.clone(),
                    &options(&d.device.clone().autodiff()),
                )
            };
            let loss = |q: Tensor<4>, k: Tensor<4>, v: Tensor<4>| -> f64 {
                let out = scaled_dot_product_attention(q, k, v, &options(device)).context;
                to_vec(out)
                    .iter()
                    .zip(to_vec(g.clone()))
                    .map(|(o, g)| f64::from(o * g))
                    .sum()
            };
            let inputs = [q.clone(), k.clone(), v.clone()];
            for (which, grad) in analytic.into_iter().enumerate() {
                let base = to_vec(inputs[which].clone());
                let shape = inputs[which].dims();
                let eps = 1e-2f32;
                let numeric: Vec<f32> = (0..base.len())
                    .map(|i| {
                        let nudged = |delta: f32| {
                            let mut data = base.clone();
                            data[i] += delta;
                            let t = Tensor::<4>::from_data(
                                burn::tensor::TensorData::new(data, shape),
                                device,
                            );
                            let mut args = inputs.clone();
                            args[which] = t;
                            let [q, k, v] = args;
                            loss(q, k, v)
                        };
                        ((nudged(eps) - nudged(-eps)) / (2.0 * f64::from(eps))) as f32
                    })
                    .collect();
                assert_close_slices(
                    &to_vec(grad),
                    &numeric,
                    2e-3,
                    1e-2,
                    &format!(
                        "{} / {}: d L / d {}",
                        d.name,
                        strategy.name(),
                        ["q", "k", "v"][which]
                    ),
                );
            }
        }
    });
}

/// A random attention problem: shapes, grouped-query heads, mask, bias and causality all drawn
/// from the seed.
struct Problem {
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: AttentionOptions,
    mask: Option<Tensor<4, Bool>>,
}

fn random_problem(rng: &mut SeededRng, device: &Device) -> Problem {
    let batch = rng.range(1, 3);
    let n_kv_heads = rng.range(1, 2);
    let n_heads = n_kv_heads * rng.range(1, 3);
    let seq_len_q = rng.range(1, 9);
    let seq_len_kv = rng.range(1, 11);
    let d_head = rng.range(1, 6);
    let d_value = rng.range(1, 5);
    let q = rng
        .tensor([batch, n_heads, seq_len_q, d_head], device)
        .mul_scalar(3.0);
    let k = rng
        .tensor([batch, n_kv_heads, seq_len_kv, d_head], device)
        .mul_scalar(3.0);
    let v = rng.tensor([batch, n_kv_heads, seq_len_kv, d_value], device);
    let mut options = AttentionOptions::new();
    let mut mask = None;
    if rng.bernoulli(0.6) {
        // Sometimes a full mask, sometimes one that broadcasts over heads and queries.
        let m = if rng.bernoulli(0.5) {
            rng.bool_tensor([batch, n_heads, seq_len_q, seq_len_kv], 0.4, device)
        } else {
            rng.bool_tensor([batch, 1, 1, seq_len_kv], 0.3, device)
        };
        mask = Some(m.clone());
        options = options.with_mask(m);
    }
    if rng.bernoulli(0.4) {
        options = options.with_bias(rng.tensor([1, n_heads, seq_len_q, seq_len_kv], device));
    }
    if rng.bernoulli(0.5) {
        options = options.with_causal(if rng.bernoulli(0.5) {
            CausalAlignment::TopLeft
        } else {
            CausalAlignment::BottomRight
        });
    }
    if rng.bernoulli(0.3) {
        options = options.with_scale(0.1 + f64::from(rng.unit().abs()));
    }
    Problem {
        q,
        k,
        v,
        options,
        mask,
    }
}

#[test]
fn every_strategy_equals_explicit_and_the_formula_on_random_problems() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(2024);
        for trial in 0..25 {
            let p = random_problem(&mut rng, &d.device);
            let run = |strategy| {
                scaled_dot_product_attention(
                    p.q.clone(),
                    p.k.clone(),
                    p.v.clone(),
                    &p.options.clone().with_strategy(strategy),
                )
                .context
            };
            let explicit = run(Strategy::Explicit);
            let formula = formula_context(p.q.clone(), p.k.clone(), p.v.clone(), &p.options);
            assert_tensors_close(
                explicit.clone(),
                formula.clone(),
                ATOL,
                RTOL,
                &format!("{} trial {trial}: explicit vs the formula", d.name),
            );
            let block = rng.range(1, 4);
            for strategy in [
                Strategy::Chunked { block },
                Strategy::Fused,
                Strategy::Native,
                Strategy::Auto,
            ] {
                let context = run(strategy);
                let what = format!("{} trial {trial}: {}", d.name, strategy.name());
                assert_tensors_close(
                    context.clone(),
                    explicit.clone(),
                    ATOL,
                    RTOL,
                    &format!("{what} vs explicit"),
                );
                assert_tensors_close(
                    context,
                    formula.clone(),
                    ATOL,
                    RTOL,
                    &format!("{what} vs the formula"),
                );
            }
        }
    });
}

#[test]
fn weight_rows_sum_to_one_and_masked_keys_get_exactly_zero() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(99);
        for trial in 0..20 {
            let p = random_problem(&mut rng, &d.device);
            let options = p
                .options
                .clone()
                .with_causal(CausalAlignment::TopLeft)
                .with_need_weights(true);
            let weights = scaled_dot_product_attention(p.q, p.k, p.v, &options)
                .weights
                .expect("weights were asked for");
            let [batch, n_heads, seq_len_q, seq_len_kv] = weights.dims();
            let w = to_vec(weights);
            let masked: Vec<bool> = match &p.mask {
                Some(m) => m
                    .clone()
                    .expand([batch, n_heads, seq_len_q, seq_len_kv])
                    .into_data()
                    .convert::<bool>()
                    .try_to_vec::<bool>()
                    .expect("bool data"),
                None => vec![false; w.len()],
            };
            for (row_index, row) in w.chunks(seq_len_kv).enumerate() {
                let i = row_index % seq_len_q;
                let hidden = |j: usize| masked[row_index * seq_len_kv + j] || j > i;
                let open = (0..seq_len_kv).filter(|&j| !hidden(j)).count();
                for (j, &wij) in row.iter().enumerate() {
                    if hidden(j) {
                        assert_eq!(
                            wij, 0.0,
                            "{} trial {trial}: masked key {j} of row {row_index} got {wij}",
                            d.name
                        );
                    }
                }
                let sum: f32 = row.iter().sum();
                let want = if open == 0 { 0.0 } else { 1.0 };
                assert!(
                    (sum - want).abs() < 1e-5,
                    "{} trial {trial}: row {row_index} sums to {sum}, expected {want}",
                    d.name
                );
            }
        }
    });
}

#[test]
fn chunked_and_native_gradients_equal_explicit_gradients_on_random_problems() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(7);
        for trial in 0..8 {
            let p = random_problem(&mut rng, &d.device);
            let [_, n_heads, seq_len_q, _] = p.q.dims();
            let d_value = p.v.dims()[3];
            let g = rng.tensor([p.q.dims()[0], n_heads, seq_len_q, d_value], &d.device);
            let autodiff = d.device.clone().autodiff();
            let reattach = |o: &AttentionOptions, s| {
                let mut o = o.clone().with_strategy(s);
                o.mask = o.mask.map(|m| m.to_device(&autodiff));
                o.bias = o.bias.map(|b| b.to_device(&autodiff));
                o
            };
            let explicit = gradients(
                d,
                p.q.clone(),
                p.k.clone(),
                p.v.clone(),
                g.clone(),
                &reattach(&p.options, Strategy::Explicit),
            );
            // Chunked runs as its tensor-operation blocks and native on its kernels, each
            // with its own backward.
            for strategy in [Strategy::Chunked { block: 2 }, Strategy::Native] {
                let (route, grads) = routed_gradients(
                    d,
                    p.q.clone(),
                    p.k.clone(),
                    p.v.clone(),
                    g.clone(),
                    &reattach(&p.options, strategy),
                );
                let what = format!("{} trial {trial} {}", d.name, strategy.name());
                assert_eq!(Some(route), forced_route(strategy, &d.device), "{what}");
                for ((c, e), name) in grads.into_iter().zip(explicit.clone()).zip(["q", "k", "v"]) {
                    assert_tensors_close(c, e, ATOL, RTOL, &format!("{what}: grad_{name}"));
                }
            }
        }
    });
}

#[test]
fn fully_masked_rows_have_zero_output_and_finite_gradients() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(5);
        let q = rng.tensor([2, 3, 5, 4], &d.device);
        let k = rng.tensor([2, 3, 7, 4], &d.device);
        let v = rng.tensor([2, 3, 7, 6], &d.device);
        let g = rng.tensor([2, 3, 5, 6], &d.device);
        let everything = Tensor::<4, Bool>::full([2, 3, 5, 7], true, &d.device);
        for strategy in [
            Strategy::Explicit,
            Strategy::Chunked { block: 2 },
            Strategy::Fused,
            Strategy::Native,
        ] {
            let options = AttentionOptions::new()
                .with_mask(everything.clone())
                .with_strategy(strategy);
            let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options);
            assert!(
                to_vec(out.context).iter().all(|&x| x == 0.0),
                "{} / {}",
                d.name,
                strategy.name()
            );
            let autodiff = d.device.clone().autodiff();
            let options = AttentionOptions::new()
                .with_mask(everything.clone().to_device(&autodiff))
                .with_strategy(strategy);
            for grad in gradients(d, q.clone(), k.clone(), v.clone(), g.clone(), &options) {
                assert!(
                    to_vec(grad).iter().all(|x| x.is_finite() && *x == 0.0),
                    "{} / {}: gradient",
                    d.name,
                    strategy.name()
                );
            }
        }
    });
}

#[test]
fn scores_in_the_thousands_stay_finite() {
    for_each_device(|d| {
        let q = Tensor::<4>::from_floats([[[[100.0, -100.0], [-100.0, 100.0]]]], &d.device);
        let k = Tensor::<4>::from_floats(
            [[[[100.0, -100.0], [-100.0, 100.0], [50.0, 50.0]]]],
            &d.device,
        );
        let v = Tensor::<4>::from_floats([[[[1.0], [2.0], [3.0]]]], &d.device);
        for strategy in [
            Strategy::Explicit,
            Strategy::Chunked { block: 2 },
            Strategy::Fused,
            Strategy::Native,
        ] {
            let out = scaled_dot_product_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                &AttentionOptions::new().with_strategy(strategy),
            );
            // scores are ±14142 and 0: each query picks its own key.
            assert_close_slices(
                &to_vec(out.context),
                &[1.0, 2.0],
                1e-5,
                0.0,
                strategy.name(),
            );
        }
    });
}

#[test]
fn dropout_zeroes_and_rescales_weights_only_when_training() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(8);
        let q = rng.tensor([2, 2, 16, 4], &d.device);
        let k = rng.tensor([2, 2, 16, 4], &d.device);
        let v = rng.tensor([2, 2, 16, 4], &d.device);
        let plain = AttentionOptions::new().with_need_weights(true);
        let dropped = plain.clone().with_dropout(0.5);

        // Inference: dropout is ignored.
        let a = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &plain)
            .weights
            .expect("weights");
        let b = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &dropped)
            .weights
            .expect("weights");
        assert_tensors_close(b, a.clone(), 0.0, 0.0, "dropout in inference");

        // Training: about half the weights vanish, the others double.
        let autodiff = d.device.clone().autodiff();
        d.device.seed(3);
        let (q, k, v) = (
            q.to_device(&autodiff).autodiff(),
            k.to_device(&autodiff).autodiff(),
            v.to_device(&autodiff).autodiff(),
        );
        let t = scaled_dot_product_attention(q, k, v, &dropped)
            .weights
            .expect("weights");
        let (t, a) = (to_vec(t), to_vec(a));
        let zeros = t.iter().filter(|&&x| x == 0.0).count();
        let fraction = zeros as f64 / t.len() as f64;
        assert!(
            (0.4..0.6).contains(&fraction),
            "{}: dropped fraction {fraction}",
            d.name
        );
        for (x, y) in t.iter().zip(&a) {
            assert!(
                *x == 0.0 || (x - 2.0 * y).abs() < 1e-5,
                "{}: kept weight {x} is not 2 × {y}",
                d.name
            );
        }
    });
}

#[test]
fn shapes_that_cannot_work_are_errors_naming_the_numbers() {
    let device = Device::flex();
    let t = |shape: [usize; 4]| Tensor::<4>::zeros(shape, &device);
    let err = |q, k, v, o: &AttentionOptions| {
        try_scaled_dot_product_attention(q, k, v, o).expect_err("shapes cannot work")
    };
    let plain = AttentionOptions::new();
    assert_eq!(
        err(t([1, 2, 3, 4]), t([1, 2, 5, 6]), t([1, 2, 5, 6]), &plain),
        AttentionError::HeadDimMismatch {
            d_head_q: 4,
            d_head_k: 6
        }
    );
    assert_eq!(
        err(t([1, 4, 3, 4]), t([1, 3, 5, 4]), t([1, 3, 5, 4]), &plain),
        AttentionError::KvHeadsDoNotDivide {
            n_heads: 4,
            n_kv_heads: 3
        }
    );
    let bad_mask = plain
        .clone()
        .with_mask(Tensor::<4, Bool>::full([1, 1, 2, 5], false, &device));
    let e = err(t([1, 2, 3, 4]), t([1, 2, 5, 4]), t([1, 2, 5, 4]), &bad_mask);
    assert_eq!(
        e,
        AttentionError::DoesNotBroadcast {
            what: "mask",
            got: [1, 1, 2, 5],
            expected: [1, 2, 3, 5]
        }
    );
    assert!(e.to_string().contains("[1, 1, 2, 5]"), "{e}");
    let fused_weights = plain
        .clone()
        .with_strategy(Strategy::Fused)
        .with_need_weights(true);
    assert!(matches!(
        err(
            t([1, 2, 3, 4]),
            t([1, 2, 5, 4]),
            t([1, 2, 5, 4]),
            &fused_weights
        ),
        AttentionError::StrategyCannot {
            strategy: "fused",
            ..
        }
    ));
    assert_eq!(
        err(
            t([1, 2, 3, 4]),
            t([1, 2, 5, 4]),
            t([1, 2, 5, 4]),
            &plain.clone().with_dropout(1.0)
        ),
        AttentionError::InvalidDropout { dropout: 1.0 }
    );
}

#[test]
fn a_bias_that_needs_gradients_gets_them_from_every_differentiable_strategy() {
    // Chunked and native train through FlashAttentionOps, whose node's fourth parent is a
    // tracked bias (its gradient block by block in tensor operations); the gradients of the
    // bias, of whatever shape it broadcasts from, and of q, k and v equal explicit's.
    for_each_device(|d| {
        let mut rng = SeededRng::new(19);
        let autodiff = d.device.clone().autodiff();
        let q = rng.tensor([2, 4, 70, 8], &d.device);
        let k = rng.tensor([2, 2, 80, 8], &d.device);
        let v = rng.tensor([2, 2, 80, 4], &d.device);
        let g = rng.tensor([2, 4, 70, 4], &d.device);
        let mask = rng.bool_tensor([2, 1, 1, 80], 0.2, &d.device);
        for bias_shape in [[1, 4, 70, 80], [2, 4, 1, 80], [1, 1, 70, 80], [2, 4, 70, 1]] {
            let bias = rng.tensor(bias_shape, &d.device);
            let run = |strategy| {
                let on = |t: &Tensor<4>| t.clone().to_device(&autodiff).autodiff().require_grad();
                let (q, k, v, bias) = (on(&q), on(&k), on(&v), on(&bias));
                let options = AttentionOptions::new()
                    .with_bias(bias.clone())
                    .with_mask(mask.clone().to_device(&autodiff))
                    .with_causal(CausalAlignment::TopLeft)
                    .with_strategy(strategy);
                let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options);
                let g = g.clone().to_device(&autodiff).autodiff();
                let grads = (out.context * g).sum().backward();
                let grad = |t: &Tensor<4>| t.grad(&grads).expect("in the graph");
                (out.route, [grad(&bias), grad(&q), grad(&k), grad(&v)])
            };
            let (_, explicit) = run(Strategy::Explicit);
            for strategy in [
                Strategy::Chunked { block: 32 },
                Strategy::Native,
                Strategy::Auto,
            ] {
                let what = format!("{}: bias {bias_shape:?}, {}", d.name, strategy.name());
                let (route, grads) = run(strategy);
                // 80 keys: Auto trains as native does.
                let expected = forced_route(strategy, &d.device)
                    .or(forced_route(Strategy::Native, &d.device))
                    .expect("a forced route");
                assert_eq!(route, expected, "{what}");
                for ((got, want), name) in grads
                    .into_iter()
                    .zip(explicit.clone())
                    .zip(["bias", "q", "k", "v"])
                {
                    assert_eq!(got.dims(), want.dims(), "{what}: grad_{name}");
                    assert_tensors_close(got, want, ATOL, RTOL, &format!("{what}: grad_{name}"));
                }
            }
        }
    });
}

/// `q`, `k`, `v` and a bias for 9 queries and 70 keys: three blocks of 32 keys.
fn three_block_problem(rng: &mut SeededRng, device: &Device) -> [Tensor<4>; 4] {
    [
        rng.tensor([1, 2, 9, 8], device),
        rng.tensor([1, 2, 70, 8], device),
        rng.tensor([1, 2, 70, 5], device),
        rng.tensor([1, 2, 9, 70], device),
    ]
}

#[test]
fn chunked_spans_three_blocks_of_its_tensor_operations_on_every_backend() {
    const BLOCK: usize = 32;
    for_each_device(|d| {
        let mut rng = SeededRng::new(41);
        let [q, k, v, bias] = three_block_problem(&mut rng, &d.device);
        assert_eq!(blocks_spanned(k.dims()[2], BLOCK), 3);
        let options = |device: &Device, strategy| {
            AttentionOptions::new()
                .with_bias(bias.clone().to_device(device))
                .with_causal(CausalAlignment::TopLeft)
                .with_strategy(strategy)
        };
        let chunked = Strategy::Chunked { block: BLOCK };

        // Inference: the tensor-operation blocks, not the native kernel.
        let run = |strategy| {
            scaled_dot_product_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                &options(&d.device, strategy),
            )
        };
        let out = run(chunked);
        assert_eq!(
            out.route,
            Route::ChunkedBlocks { block: BLOCK },
            "{}",
            d.name
        );
        let what = format!("{}: chunked over three blocks vs explicit", d.name);
        assert_tensors_close(
            out.context,
            run(Strategy::Explicit).context,
            ATOL,
            RTOL,
            &what,
        );

        // Training: the same blocks and their block-by-block backward, as one graph node.
        let autodiff = d.device.clone().autodiff();
        let g = rng.tensor([1, 2, 9, 5], &d.device);
        let train = |strategy| {
            routed_gradients(
                d,
                q.clone(),
                k.clone(),
                v.clone(),
                g.clone(),
                &options(&autodiff, strategy),
            )
        };
        let (route, grads) = train(chunked);
        assert_eq!(
            route,
            Route::ChunkedBlocks { block: BLOCK },
            "{} training",
            d.name
        );
        let (explicit_route, explicit) = train(Strategy::Explicit);
        assert_eq!(explicit_route, Route::Explicit);
        for ((got, want), name) in grads.into_iter().zip(explicit).zip(["q", "k", "v"]) {
            let what = format!(
                "{}: chunked grad_{name} over three blocks vs explicit",
                d.name
            );
            assert_tensors_close(got, want, ATOL, RTOL, &what);
        }
    });
}

#[test]
fn chunked_with_a_bias_that_needs_gradients_stays_one_operation() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(43);
        let [q, k, v, bias] = three_block_problem(&mut rng, &d.device);
        let autodiff = d.device.clone().autodiff();
        let bias = bias.to_device(&autodiff).autodiff().require_grad();
        let q = q.to_device(&autodiff).autodiff().require_grad();
        let (k, v) = (k.to_device(&autodiff), v.to_device(&autodiff));
        let options = AttentionOptions::new()
            .with_bias(bias)
            .with_strategy(Strategy::Chunked { block: 32 });
        let out = scaled_dot_product_attention(q, k, v, &options);
        assert_eq!(out.route, Route::ChunkedBlocks { block: 32 }, "{}", d.name);
        assert!(out.context.is_tracked());
    });
}

#[test]
fn native_runs_the_native_kernel_as_one_operation_on_the_cpu_backends() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(47);
        let [q, k, v, _] = three_block_problem(&mut rng, &d.device);
        // 9 queries against 70 keys: inference on the CPU backends takes the decode pass.
        const { assert!(9 <= DECODE_MAX_QUERIES && 70 >= DECODE_MIN_KEYS) };
        let expected = if native_serves(&d.device) {
            Route::NativeDecode
        } else {
            forced_route(Strategy::Native, &d.device).expect("a forced strategy")
        };
        let native = AttentionOptions::new().with_strategy(Strategy::Native);
        let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &native);
        assert_eq!(out.route, expected, "{}", d.name);
        if expected == Route::NativeDecode {
            let autodiff = d.device.clone().autodiff();
            let on = |t: &Tensor<4>| t.clone().to_device(&autodiff).autodiff().require_grad();
            let out = scaled_dot_product_attention(on(&q), on(&k), on(&v), &native);
            assert_eq!(out.route, Route::NativeOperation, "{} training", d.name);
            assert!(out.context.is_tracked());
        }
    });
}

#[test]
fn auto_routes_as_its_documentation_says() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(53);
        let autodiff = d.device.clone().autodiff();
        let mut route = |seq_len_kv: usize, train: bool, options: AttentionOptions| {
            let device = if train { &autodiff } else { &d.device };
            let on = |t: Tensor<4>| {
                let t = t.to_device(device);
                if train {
                    t.autodiff().require_grad()
                } else {
                    t
                }
            };
            let q = on(rng.tensor([1, 2, 5, 8], &d.device));
            let k = on(rng.tensor([1, 2, seq_len_kv, 8], &d.device));
            let v = on(rng.tensor([1, 2, seq_len_kv, 4], &d.device));
            scaled_dot_product_attention(q, k, v, &options).route
        };
        let plain = AttentionOptions::new;
        let cpu = native_serves(&d.device);
        let inference = if cpu {
            Route::NativeOperation
        } else {
            Route::Fused
        };
        assert_eq!(route(9, false, plain()), inference, "{}: inference", d.name);
        let weights = plain().with_need_weights(true);
        assert_eq!(
            route(9, false, weights),
            Route::Explicit,
            "{}: weights",
            d.name
        );
        let short = NATIVE_TRAINING_MIN_KEYS - 1;
        assert_eq!(
            route(short, true, plain()),
            Route::Explicit,
            "{}: short training",
            d.name
        );
        let long = if cpu {
            Route::NativeOperation
        } else if on_cube(&d.device) {
            Route::CubeOperation
        } else {
            Route::Explicit
        };
        let at = NATIVE_TRAINING_MIN_KEYS;
        assert_eq!(route(at, true, plain()), long, "{}: long training", d.name);
        let dropout = plain().with_dropout(0.1);
        assert_eq!(
            route(at, true, dropout),
            Route::Explicit,
            "{}: dropout",
            d.name
        );
    });
}

#[test]
fn auto_and_native_take_the_decode_pass_for_few_queries_against_many_keys() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(59);
        let autodiff = d.device.clone().autodiff();
        let cpu = native_serves(&d.device);
        for strategy in [Strategy::Auto, Strategy::Native] {
            let mut run = |seq_len_q: usize, seq_len_kv: usize, train: bool| {
                let device = if train { &autodiff } else { &d.device };
                let on = |t: Tensor<4>| {
                    let t = t.to_device(device);
                    if train {
                        t.autodiff().require_grad()
                    } else {
                        t
                    }
                };
                // Grouped heads, a padding mask, a bias and bottom-right causality, as a
                // decoder's cached step passes them.
                let q = on(rng.tensor([2, 6, seq_len_q, 8], &d.device));
                let k = on(rng.tensor([2, 2, seq_len_kv, 8], &d.device));
                let v = on(rng.tensor([2, 2, seq_len_kv, 5], &d.device));
                let padding = rng.bool_tensor([2, 1, 1, seq_len_kv], 0.2, device);
                let bias = rng.tensor([1, 6, seq_len_q, seq_len_kv], device);
                let options = AttentionOptions::new()
                    .with_mask(padding)
                    .with_bias(bias)
                    .with_causal(CausalAlignment::BottomRight);
                let out = scaled_dot_product_attention(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &options.clone().with_strategy(strategy),
                );
                let explicit = scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    &options.with_strategy(Strategy::Explicit),
                );
                let what = format!(
                    "{} {}: {seq_len_q} queries, {seq_len_kv} keys, train {train}",
                    d.name,
                    strategy.name()
                );
                assert_tensors_close(out.context, explicit.context, ATOL, RTOL, &what);
                (out.route, what)
            };
            let (few, many) = (DECODE_MAX_QUERIES, DECODE_MIN_KEYS);
            for (seq_len_q, seq_len_kv) in [(1, many), (few, many), (3, 3 * many + 5)] {
                let (route, what) = run(seq_len_q, seq_len_kv, false);
                let expected = match (cpu, strategy) {
                    (true, _) => Route::NativeDecode,
                    (false, Strategy::Auto) => Route::Fused,
                    (false, _) => forced_route(strategy, &d.device).expect("forced"),
                };
                assert_eq!(route, expected, "{what}");
            }
            // Too many queries, too few keys, or training: not the decode pass.
            for (seq_len_q, seq_len_kv, train) in [
                (few + 1, many, false),
                (1, many - 1, false),
                (1, many, true),
            ] {
                // Off the CPU and CubeCL backends the native strategy runs on the host, which
                // autodiff cannot record: asked to train there, it says so.
                if train && !cpu && !on_cube(&d.device) && matches!(strategy, Strategy::Native) {
                    let mut rng = SeededRng::new(60);
                    let on = |t: Tensor<4>| t.to_device(&autodiff).autodiff().require_grad();
                    let q = on(rng.tensor([1, 2, seq_len_q, 8], &d.device));
                    let k = on(rng.tensor([1, 2, seq_len_kv, 8], &d.device));
                    let v = on(rng.tensor([1, 2, seq_len_kv, 5], &d.device));
                    let options = AttentionOptions::new().with_strategy(Strategy::Native);
                    let err = try_scaled_dot_product_attention(q, k, v, &options)
                        .expect_err("the native strategy cannot be recorded off the CPU");
                    assert!(
                        matches!(
                            err,
                            AttentionError::StrategyCannot {
                                strategy: "native",
                                ..
                            }
                        ),
                        "{}: {err}",
                        d.name
                    );
                    continue;
                }
                let (route, what) = run(seq_len_q, seq_len_kv, train);
                assert_ne!(route, Route::NativeDecode, "{what}");
                if cpu && !train {
                    assert_eq!(route, Route::NativeOperation, "{what}");
                }
            }
        }
    });
}
