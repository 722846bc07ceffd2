//! The `copy` task: `y[i] = x[i]`. Needs no attention at all; a sanity check.

use rand::RngCore;

use super::{Architecture, Example, Size, Task, TaskConfig, TaskError, symbols};

/// Output each input token unchanged.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyTask;

impl Task for CopyTask {
    fn name(&self) -> &'static str {
        "copy"
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
        Example::encoded(x.clone(), x)
    }
}

#[cfg(test)]
mod tests {
    use crate::random::Rng;
    use crate::tasks::TaskKind;
    use crate::tasks::tests::task;

    #[test]
    fn copy_targets_equal_tokens() {
        let (x, y) = task(TaskKind::Copy).example(&mut Rng::new(3));
        assert_eq!(x, y);
    }
}
