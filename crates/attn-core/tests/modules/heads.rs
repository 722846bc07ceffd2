//! Splitting and merging heads, and sharing key/value heads among query heads.

use attn_core::{AttentionError, merge_heads, repeat_kv_heads, split_heads, try_split_heads};
use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
use burn::tensor::Tensor;

#[test]
fn split_then_merge_is_identity_and_heads_are_contiguous_slices() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(3);
        let x = rng.tensor([3, 5, 12], &d.device);
        let heads = split_heads(x.clone(), 3);
        assert_eq!(heads.dims(), [3, 3, 5, 4]);
        // Head 1 of batch 2, position 4 is features 4..8 of that token.
        let head = to_vec(heads.clone().slice([2..3, 1..2, 4..5, 0..4]));
        let direct = to_vec(x.clone().slice([2..3, 4..5, 4..8]));
        assert_eq!(head, direct);
        assert_close_slices(&to_vec(merge_heads(heads)), &to_vec(x), 0.0, 0.0, "merge");
    });
}

#[test]
fn split_heads_rejects_a_width_that_does_not_divide() {
    let x = Tensor::<3>::zeros([1, 2, 10], &burn::tensor::Device::flex());
    assert_eq!(
        try_split_heads(x, 3).expect_err("2 heads of width 10 do not split into 3"),
        AttentionError::HeadsDoNotDivide {
            d_model: 10,
            n_heads: 3
        }
    );
}

#[test]
fn repeat_kv_heads_groups_consecutive_query_heads() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(4);
        let kv = rng.tensor([2, 2, 3, 4], &d.device);
        let rep = repeat_kv_heads(kv.clone(), 6);
        assert_eq!(rep.dims(), [2, 6, 3, 4]);
        for h in 0..6 {
            let got = to_vec(rep.clone().slice([0..2, h..h + 1, 0..3, 0..4]));
            let want = to_vec(kv.clone().slice([0..2, h / 3..h / 3 + 1, 0..3, 0..4]));
            assert_eq!(got, want, "query head {h}");
        }
    });
}
