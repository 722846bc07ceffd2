//! The `sort` task: `y = sort(x)` (ascending). Needs both content and position.

use rand::RngCore;

use super::{Architecture, Example, Size, Task, TaskConfig, TaskError, symbols};

/// Output the sequence sorted ascending.
#[derive(Clone, Copy, Debug, Default)]
pub struct SortTask;

impl Task for SortTask {
    fn name(&self) -> &'static str {
        "sort"
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
        let mut y = x.clone();
        y.sort_unstable();
        Example::encoded(x, y)
    }
}

#[cfg(test)]
mod tests {
    use crate::random::Rng;
    use crate::tasks::TaskKind;
    use crate::tasks::tests::task;

    #[test]
    fn sort_targets_are_sorted_and_a_permutation() {
        let (x, y) = task(TaskKind::Sort).example(&mut Rng::new(2));
        assert!(y.windows(2).all(|w| w[0] <= w[1]));
        let mut xs = x.clone();
        xs.sort_unstable();
        assert_eq!(xs, y);
    }
}
