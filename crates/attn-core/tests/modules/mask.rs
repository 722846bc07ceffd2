//! The masks of `mask.rs`: causal in both alignments, padding, the sliding window, and the
//! keep/mask conversions.

use attn_core::{
    AttentionError, CausalAlignment, causal_mask, keep_to_mask, mask_to_keep, padding_mask,
    padding_mask_from_lengths, window_mask,
};
use attn_testing::for_each_device;
use burn::tensor::{Bool, Device, Tensor, TensorData};

fn bools<const D: usize>(t: Tensor<D, Bool>) -> Vec<bool> {
    t.into_data()
        .convert::<bool>()
        .try_to_vec::<bool>()
        .expect("bool data")
}

#[test]
fn causal_alignments_differ_only_when_lengths_differ() {
    for_each_device(|d| {
        let top = bools(causal_mask(2, 4, CausalAlignment::TopLeft, &d.device));
        assert_eq!(top, [false, true, true, true, false, false, true, true]);
        let bottom = bools(causal_mask(2, 4, CausalAlignment::BottomRight, &d.device));
        assert_eq!(
            bottom,
            [false, false, false, true, false, false, false, false]
        );
        let square_top = bools(causal_mask(3, 3, CausalAlignment::TopLeft, &d.device));
        let square_bottom = bools(causal_mask(3, 3, CausalAlignment::BottomRight, &d.device));
        assert_eq!(square_top, square_bottom);
    });
}

#[test]
fn padding_from_lengths_marks_the_tail() {
    for_each_device(|d| {
        let m = padding_mask_from_lengths(&[3, 1], 3, &d.device).expect("lengths fit");
        assert_eq!(bools(m.clone()), [false, false, false, false, true, true]);
        assert_eq!(padding_mask(m).dims(), [2, 1, 1, 3]);
    });
}

#[test]
fn padding_longer_than_the_sequence_is_an_error_naming_it() {
    let err = padding_mask_from_lengths(&[2, 9], 4, &Device::flex())
        .expect_err("length 9 does not fit in 4");
    assert_eq!(
        err,
        AttentionError::LengthTooLong {
            index: 1,
            length: 9,
            seq_len: 4
        }
    );
    assert!(err.to_string().contains("length 9"));
}

#[test]
fn window_and_causal_masks_leave_each_query_its_last_window_keys() {
    for_each_device(|d| {
        let (seq_len, window) = (5, 3);
        let window_only = bools(window_mask(seq_len, window, &d.device));
        let both = bools(window_mask(seq_len, window, &d.device).bool_or(causal_mask(
            seq_len,
            seq_len,
            CausalAlignment::TopLeft,
            &d.device,
        )));
        for i in 0..seq_len {
            for j in 0..seq_len {
                assert_eq!(window_only[i * seq_len + j], j + window <= i, "({i}, {j})");
                let seen = j <= i && i - j < window;
                assert_eq!(both[i * seq_len + j], !seen, "query {i}, key {j}");
            }
        }
        // A window as long as the sequence masks nothing.
        assert!(
            bools(window_mask(seq_len, seq_len, &d.device))
                .iter()
                .all(|m| !m)
        );
    });
}

#[test]
fn keep_and_mask_are_complements() {
    for_each_device(|d| {
        let keep = Tensor::<1, Bool>::from_data(TensorData::from([true, false]), &d.device);
        assert_eq!(bools(keep_to_mask(keep.clone())), [false, true]);
        assert_eq!(bools(mask_to_keep(keep_to_mask(keep))), [true, false]);
    });
}
