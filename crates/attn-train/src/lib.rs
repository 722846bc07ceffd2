//! Training for the `attn` workspace: synthetic sequence tasks, the training loop, checkpoints,
//! metrics and plots, and the choice of backend.
//!
//! This is the only crate of the workspace that picks a device, reads the clock, prints, or
//! touches files. The `attn-train` binary is a thin command line over [`train::run`].

#![warn(missing_docs)]

pub mod backend;
