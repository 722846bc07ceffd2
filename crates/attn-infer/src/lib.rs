//! Inference over the models a user holds: a Hugging Face model folder or a trained run folder
//! becomes text, a conversation, or a page of its attention.
//!
//! - [`source`]: what a `MODEL` argument names, a run folder or a model folder, told apart by
//!   their contents;
//! - [`folder`]: a model folder of any family that writes text ([`attn_model::hf::AutoModel`])
//!   with its tokenizer, generation defaults and chat template: generation, and a chat whose
//!   history stays in the key/value cache;
//! - [`render`]: the chat template rendered in a child process, bounded in memory and time;
//! - [`run`]: generation from a trained run's newest checkpoint;
//! - [`view`]: the attention explorer, one HTML page of a run's or a model folder's heads.
//!
//! Training is `attn-train`'s; this crate reads the run folders it writes. The `attn` program
//! (`attn-cli`) parses arguments and prints; everything it does is here or in `attn-train`.

#![warn(missing_docs)]

pub mod folder;
pub mod render;
pub mod run;
pub mod source;
pub mod view;
