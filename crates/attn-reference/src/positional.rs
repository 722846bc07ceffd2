//! `positional.json`: the sinusoidal table, a rotary embedding in both pairings, and ALiBi
//! slopes for several head counts, straight from the papers' formulas.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{RefTensor, ReferenceFile, Tolerance};

/// The tolerance the positional schemes are held to: each value is one formula evaluated and
/// rounded once, so tighter than [`Tolerance::FLOAT32`], and absolute because the values lie
/// in `[-1, 1]` (tables, rotations of unit inputs) or are small slopes.
pub const TOLERANCE: Tolerance = Tolerance::absolute(1e-6);

/// The whole file; each scheme is optional, so a file may pin down any of them.
#[derive(Clone, Debug, Deserialize)]
pub struct PositionalFile {
    /// The sinusoidal table.
    pub sinusoidal: Option<Sinusoidal>,
    /// A rotary embedding of one head.
    pub rope: Option<Rope>,
    /// ALiBi head slopes.
    pub alibi: Option<Alibi>,
}

impl ReferenceFile for PositionalFile {
    const PATH: &'static str = "positional.json";
}

/// `PE(pos, 2i) = sin(pos / 10000^(2i/d_model))`, `PE(pos, 2i+1) = cos(..)` (Vaswani et al.
/// 2017, section 3.5).
#[derive(Clone, Debug, Deserialize)]
pub struct Sinusoidal {
    /// Width of the table.
    pub d_model: usize,
    /// Positions in the table.
    pub len: usize,
    /// The table `[len, d_model]`.
    pub pe: RefTensor,
}

/// Rotary embedding with `θ = 10000` of `len` positions of one head, the position of each row
/// its index.
#[derive(Clone, Debug, Deserialize)]
pub struct Rope {
    /// Width of the head, `d_head`.
    pub head_dim: usize,
    /// Positions.
    pub len: usize,
    /// The input `[len, d_head]`.
    pub x: RefTensor,
    /// Pairs `(2j, 2j+1)` rotated, as in GPT-J: `[len, d_head]`.
    pub interleaved: RefTensor,
    /// Pairs `(j, j + d_head/2)` rotated, as in GPT-NeoX and Llama: `[len, d_head]`.
    pub half_split: RefTensor,
}

/// ALiBi head slopes (Press et al. 2022), including the rule for head counts that are not
/// powers of two.
#[derive(Clone, Debug, Deserialize)]
pub struct Alibi {
    /// Head count to its slopes, head 0 first.
    pub slopes: BTreeMap<usize, Vec<f64>>,
}
