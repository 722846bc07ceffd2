//! The run's own random numbers: a SplitMix64 generator whose whole state is one `u64`, so a
//! checkpoint can store it and a resumed run draws exactly the numbers an unbroken run would.
//!
//! Every stream of a run (model initialisation, dropout at each step, training batches, the
//! held-out set) is derived from the run's seed with [`derive_seed`], so the streams do not
//! overlap and none depends on how many numbers another one drew.

use serde::{Deserialize, Serialize};

/// Named streams derived from a run's seed.
pub mod stream {
    /// Initial weights of the model.
    pub const INIT: u64 = 1;
    /// Training batches.
    pub const TRAIN: u64 = 2;
    /// The held-out evaluation set.
    pub const EVAL: u64 = 3;
    /// Dropout masks; the step number is mixed in on top.
    pub const DROPOUT: u64 = 4;
}

/// A seed for stream `stream` of a run seeded with `seed`, well mixed so nearby seeds and
/// streams give unrelated numbers.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    let mut rng = Rng::new(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next_u64()
}

/// SplitMix64 (Steele, Lea and Flood 2014): small, fast, and the same numbers on every platform.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (Lemire's multiply-shift; the bias is below `n / 2^64`).
    ///
    /// # Panics
    ///
    /// Panics when `n` is zero: there is no integer to draw.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0): empty range");
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(derive_seed(7, stream::TRAIN), derive_seed(7, stream::EVAL));
        assert_ne!(derive_seed(7, stream::TRAIN), derive_seed(8, stream::TRAIN));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(3);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[rng.below(5)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut rng = Rng::new(11);
        rng.next_u64();
        let json = serde_json::to_string(&rng).expect("plain struct serialises");
        let mut back: Rng = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back.next_u64(), rng.next_u64());
    }
}
