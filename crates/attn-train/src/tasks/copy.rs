//! The `copy` task: `y[i] = x[i]`. Needs no attention at all; a sanity check.

use super::symbols::SymbolTask;

/// Output each input token unchanged.
pub const COPY: SymbolTask = SymbolTask {
    name: "copy",
    target: |x| x.to_vec(),
};

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
