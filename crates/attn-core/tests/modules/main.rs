//! The tests of each module that need only the crate's public API, one file per module, in
//! one test binary. Tests that reach inside a module stay at the bottom of its file.

mod backend;
mod flash;
mod heads;
mod mask;
mod native;
mod softmax;
