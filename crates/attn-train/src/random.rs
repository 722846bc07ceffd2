//! The run's random numbers: one seeded generator, ChaCha8 ([`rand_chacha::ChaCha8Rng`]), whose
//! whole state (key, stream, position) serialises into a checkpoint, so a resumed run draws
//! exactly the numbers an unbroken run would.
//!
//! ChaCha is a keyed function of `(key, stream, position)`: the run's seed is the key, each use
//! of random numbers has its own stream ([`Stream`]), and the position counts the 32-bit words
//! drawn from it. So the streams never overlap, none depends on how many numbers another one
//! drew, and two seeds give unrelated numbers however close they are (`s` and `s ^ 1` too):
//!
//! ```text
//! key        seed as 8 little-endian bytes, then 24 zero bytes
//! init       the first u64 of stream 1                     reseeds the backend before init
//! batches    stream 2, drawn in order                      its state is in each checkpoint
//! held-out   stream 3, drawn in order
//! dropout    the u64 at word 2 · step of stream 4          reseeds the backend at each step
//! ```

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The uses of random numbers in a run, each a ChaCha stream of the run's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The model's initial weights.
    Init = 1,
    /// Training batches.
    Train = 2,
    /// The held-out evaluation set.
    Eval = 3,
    /// Dropout masks, one position per step.
    Dropout = 4,
}

/// The generator of a run: ChaCha8 keyed by the seed. It implements [`rand::RngCore`], so every
/// method of [`rand::Rng`] draws from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// Stream 0 of the key `seed`: a generator for one seed outside a run's streams (examples,
    /// benchmarks, tests).
    pub fn new(seed: u64) -> Self {
        Self::keyed(seed, 0)
    }

    /// The stream of a run seeded with `seed` for one use.
    pub fn stream(seed: u64, stream: Stream) -> Self {
        Self::keyed(seed, stream as u64)
    }

    fn keyed(seed: u64, stream: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        rng.set_stream(stream);
        Self(rng)
    }
}

impl RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst);
    }
}

/// The backend's seed for the initial weights of a run seeded with `seed`.
pub fn init_seed(seed: u64) -> u64 {
    Rng::stream(seed, Stream::Init).next_u64()
}

/// The backend's seed for the dropout masks of update `step` (0-based): the 64 bits at word
/// `2 · step` of the dropout stream, a function of `(seed, step)` alone, whatever ran before.
pub fn dropout_seed(seed: u64, step: usize) -> u64 {
    let mut rng = Rng::stream(seed, Stream::Dropout);
    rng.0.set_word_pos(2 * step as u128);
    rng.next_u64()
}

/// The backend's seed for the dropout masks of share `share` of update `step` in
/// data-parallel training ([`crate::train::update_data_parallel`]): the first share's is
/// [`dropout_seed`], the others' the words after it, at `2 · (step · 2^32 + share)` of the same
/// stream, so no two (step, share) pairs share a seed in a run of fewer than 2³² steps.
pub fn share_dropout_seed(seed: u64, step: usize, share: usize) -> u64 {
    if share == 0 {
        return dropout_seed(seed, step);
    }
    let mut rng = Rng::stream(seed, Stream::Dropout);
    rng.0
        .set_word_pos(2 * (((step as u128) << 32) + share as u128));
    rng.next_u64()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::Rng as _;

    use super::*;

    fn draws(mut rng: Rng) -> Vec<u64> {
        (0..5).map(|_| rng.next_u64()).collect()
    }

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        assert_eq!(draws(Rng::new(7)), draws(Rng::new(7)));
        let train = draws(Rng::stream(7, Stream::Train));
        assert_ne!(train, draws(Rng::stream(7, Stream::Eval)));
        assert_ne!(train, draws(Rng::stream(8, Stream::Train)));
        assert_ne!(train, draws(Rng::stream(6, Stream::Train)));
        assert_ne!(train, draws(Rng::new(7)));
    }

    #[test]
    fn dropout_seeds_are_a_function_of_seed_and_step_and_never_collide() {
        assert_eq!(dropout_seed(5, 3), dropout_seed(5, 3));
        // `seed ^ step` would make (s, 1) and (s ^ 1, 0) the same.
        assert_ne!(dropout_seed(4, 1), dropout_seed(5, 0));
        let mut seen = HashSet::new();
        for seed in 0..16 {
            assert!(seen.insert(init_seed(seed)));
            for step in 0..300 {
                assert!(
                    seen.insert(dropout_seed(seed, step)),
                    "seed {seed}, step {step} repeats an earlier seed"
                );
            }
        }
    }

    #[test]
    fn random_range_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(3);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[rng.random_range(0..5)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut rng = Rng::stream(11, Stream::Train);
        for _ in 0..37 {
            rng.next_u32();
        }
        let json = serde_json::to_string(&rng).expect("ChaCha's state serialises");
        let mut back: Rng = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, rng);
        assert_eq!(back.next_u64(), rng.next_u64());
    }
}
