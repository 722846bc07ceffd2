//! The `reverse` task: `y[i] = x[seq_len - 1 - i]`. Each position must find its mirror
//! position, which attention can only do if it knows where tokens are: without positional
//! information the encoder is permutation-equivariant and this task stays near chance.

use rand::RngCore;

use super::{Architecture, Example, Size, Task, TaskConfig, TaskError, symbols};

/// Output the sequence reversed.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReverseTask;

impl Task for ReverseTask {
    fn name(&self) -> &'static str {
        "reverse"
    }

    fn architecture(&self) -> Architecture {
        Architecture::Encoder
    }

    fn sizes(&self) -> &'static [Size] {
        symbols::SIZES
    }

    fn validate(&self, config: &TaskConfig) -> Result<(), TaskError> {
        symbols::validate_vocab(config)
    }

    fn model_vocab(&self, config: &TaskConfig) -> usize {
        config.vocab
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        let x = symbols::random_symbols(config, rng);
        let y = x.iter().rev().copied().collect();
        Example::encoded(x, y)
    }
}

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
