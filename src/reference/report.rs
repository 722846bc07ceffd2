//! What every checker shares: the attention strategies each case runs along, and the
//! [`CaseReport`] that one run of a case yields.

use attn_core::Strategy;
use attn_reference::Closeness;
use serde::Serialize;

/// Every attention strategy, each checked on its own.
pub const STRATEGIES: [Strategy; 5] = [
    Strategy::Explicit,
    Strategy::Chunked { block: 64 },
    Strategy::Fused,
    Strategy::Native,
    Strategy::Auto,
];

/// The outcome of one case on one backend with one strategy.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CaseReport {
    /// The file the case came from.
    pub file: String,
    /// The case's name.
    pub case: String,
    /// The backend it ran on.
    pub backend: String,
    /// The computation path (an attention strategy, or `module` for layers).
    pub strategy: String,
    /// The largest absolute difference over every compared tensor.
    pub max_abs_err: f32,
    /// Whether every compared value was within `ATOL + RTOL · |expected|`.
    pub pass: bool,
}

impl CaseReport {
    /// The report of `case` of `file`, run on `backend` along `strategy`.
    pub(super) fn new(
        file: &str,
        case: &str,
        backend: &str,
        strategy: &str,
        closeness: &Closeness,
    ) -> Self {
        Self {
            file: file.to_string(),
            case: case.to_string(),
            backend: backend.to_string(),
            strategy: strategy.to_string(),
            max_abs_err: closeness.max_abs_err(),
            pass: closeness.is_within(),
        }
    }
}
