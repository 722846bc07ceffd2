//! The held-out split of the generating tasks: a hash of each prompt decides its side, so a
//! held-out prompt never appears in a training batch.

/// One prompt in this many is held out from training (`add` and `translate`).
pub const HELD_OUT_ONE_IN: u64 = 50;

/// Which side of the held-out split examples come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Training batches: never a held-out prompt.
    Train,
    /// The held-out set: only held-out prompts (the encoder tasks draw from all sequences).
    HeldOut,
}

/// The side of the held-out split a prompt (`add`) or source (`translate`) falls on.
pub fn split_of(prompt: &[i64]) -> Split {
    // FNV-1a over the tokens, then a SplitMix64 finaliser so that neighbouring prompts
    // fall on either side independently.
    let mut h = prompt.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &t| {
        (h ^ t as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    if h.is_multiple_of(HELD_OUT_ONE_IN) {
        Split::HeldOut
    } else {
        Split::Train
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::random::Rng;
    use crate::tasks::tests::add;
    use crate::tasks::{Batch, TaskConfig, TaskKind};

    #[test]
    fn held_out_prompts_never_appear_in_training_batches() {
        for task in [
            add(2),
            TaskConfig {
                kind: TaskKind::Translate,
                seq_len: 3,
                ..TaskConfig::default()
            },
        ] {
            let mut rng = Rng::new(6);
            let held_out = task.batch_from(Split::HeldOut, 300, &mut rng);
            let train = task.batch(3000, &mut rng);
            let prompt = |b: &Batch, i: usize| match task.kind {
                TaskKind::Add => b.sequence(i)[..task.prompt_len()].to_vec(),
                _ => b.source_sequence(i).to_vec(),
            };
            let held: HashSet<Vec<i64>> = (0..300).map(|i| prompt(&held_out, i)).collect();
            let trained: HashSet<Vec<i64>> = (0..3000).map(|i| prompt(&train, i)).collect();
            assert!(held.is_disjoint(&trained), "{}", task.kind);
            // One in 50 of 10⁴ prompts (2-digit addition) or 10³ sources (3 digit words).
            assert!(
                held.len() >= 10 && trained.len() > 900,
                "{} {}",
                held.len(),
                trained.len()
            );
            assert!(held.iter().all(|p| task.split_of(p) == Split::HeldOut));
        }
    }
}
