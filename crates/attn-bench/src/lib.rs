//! Attention benchmarks of the `attn` workspace: this workspace's strategies and layers beside
//! burn's `module::attention`, `nn::MultiHeadAttention` and `nn::transformer::TransformerEncoder`.
//!
//! The library is what the `attn-bench` program and the criterion benchmark
//! (`benches/attention.rs`) share: the one case catalogue ([`cases`]), how a case is timed
//! ([`timing`]), the JSON line ([`record`]) and the machine every line names ([`machine`]).
//! The program adds peak memory in child processes, the report tables and the plot.
//!
//! ```text
//! cargo run --release -p attn-bench -- --json
//! ```

#![warn(missing_docs)]

pub mod cases;
pub mod hf;
pub mod machine;
pub mod peak;
pub mod record;
pub mod timing;
