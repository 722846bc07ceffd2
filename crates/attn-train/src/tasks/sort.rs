//! The `sort` task: `y = sort(x)` (ascending). Needs both content and position.

use super::symbols::SymbolTask;

/// Output the sequence sorted ascending.
pub const SORT: SymbolTask = SymbolTask {
    name: "sort",
    target: |x| {
        let mut y = x.to_vec();
        y.sort_unstable();
        y
    },
};

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
