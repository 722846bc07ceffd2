//! The `reverse` task: `y[i] = x[seq_len - 1 - i]`. Each position must find its mirror
//! position, which attention can only do if it knows where tokens are: without positional
//! information the encoder is permutation-equivariant and this task stays near chance.

use super::symbols::SymbolTask;

/// Output the sequence reversed.
pub const REVERSE: SymbolTask = SymbolTask {
    name: "reverse",
    target: |x| x.iter().rev().copied().collect(),
};

#[cfg(test)]
mod tests {
    use crate::random::Rng;
    use crate::tasks::TaskKind;
    use crate::tasks::tests::task;

    #[test]
    fn reverse_targets_are_the_tokens_backwards() {
        let (x, y) = task(TaskKind::Reverse).example(&mut Rng::new(1));
        assert_eq!(x.len(), 7);
        for i in 0..7 {
            assert_eq!(y[i], x[6 - i]);
        }
        assert!(x.iter().all(|&t| (0..5).contains(&t)));
    }
}
