//! `safe_softmax` on scores in the thousands and on rows where every key is masked.

use attn_core::safe_softmax;
use attn_testing::{assert_close_slices, for_each_device, to_vec};
use burn::tensor::Tensor;

#[test]
fn softmax_of_large_and_masked_rows_is_finite() {
    for_each_device(|d| {
        let scores = Tensor::<2>::from_floats(
            [
                [1000.0, 999.0, -1000.0],
                [f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY],
                [0.0, f32::NEG_INFINITY, 0.0],
            ],
            &d.device,
        );
        let w = to_vec(safe_softmax(scores));
        let e = 1.0 / (1.0 + (-1.0f32).exp());
        assert_close_slices(
            &w,
            &[e, 1.0 - e, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5],
            1e-6,
            1e-6,
            "softmax",
        );
    });
}
