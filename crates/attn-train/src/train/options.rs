//! How to run, beyond the configuration itself: [`RunOptions`], which every step of a run
//! reads.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// How to run, beyond the configuration itself.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Folder for `metrics.csv`, `config.json`, checkpoints and plots; `None` writes nothing
    /// (and so can neither checkpoint nor resume).
    pub out: Option<PathBuf>,
    /// Continue from the newest checkpoint in `out` instead of starting afresh.
    pub resume: bool,
    /// Stop after this many steps (checkpointing there) although the schedule spans
    /// `config.steps`: an interrupted run, to be resumed later.
    pub stop_at: Option<usize>,
    /// Show a progress bar on stderr (plain lines at each evaluation when stderr is not a
    /// terminal).
    pub progress: bool,
    /// Skip the PNG plots (they take a moment; tests do not need them).
    pub skip_plots: bool,
    /// A fresh run may reuse a folder that is not empty, removing the files its manifest lists
    /// (an earlier run's) and nothing else.
    pub overwrite: bool,
    /// Raised (by a signal handler, say) to stop the run: the step under way finishes, a
    /// checkpoint is written, and the run returns with
    /// [`RunSummary::interrupted`](super::RunSummary::interrupted) set.
    pub interrupt: Option<Arc<AtomicBool>>,
}
