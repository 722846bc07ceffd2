//! A batch of examples as host vectors, its tensors, and its split into data-parallel shares.

use burn::tensor::{Device, Int, Tensor, TensorData};

/// One batch of examples, stored row-major as host vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Sequences in the batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Input token ids, `[batch, seq_len]` row-major.
    pub tokens: Vec<i64>,
    /// Target class per position, `[batch, seq_len]` row-major; [`IGNORED`](super::IGNORED)
    /// where the task scores nothing.
    pub targets: Vec<i64>,
    /// Tokens per source sequence: 0 but for the encoder-decoder task.
    pub source_len: usize,
    /// The source the encoder reads, `[batch, source_len]` row-major (encoder-decoder only).
    pub source: Vec<i64>,
}

impl Batch {
    /// The input tokens as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, seq_len]`
    pub fn tokens_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.tokens.clone(), [self.batch, self.seq_len]),
            device,
        )
    }

    /// The targets as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, seq_len]`
    pub fn targets_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.targets.clone(), [self.batch, self.seq_len]),
            device,
        )
    }

    /// The source tokens as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, source_len]`
    pub fn source_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.source.clone(), [self.batch, self.source_len]),
            device,
        )
    }

    /// The `index`-th sequence's source tokens.
    pub fn source_sequence(&self, index: usize) -> &[i64] {
        &self.source[index * self.source_len..(index + 1) * self.source_len]
    }

    /// The `index`-th sequence's tokens.
    pub fn sequence(&self, index: usize) -> &[i64] {
        &self.tokens[index * self.seq_len..(index + 1) * self.seq_len]
    }
    /// Concatenates batches of the same `seq_len`.
    pub fn concat(batches: &[Batch]) -> Option<Batch> {
        let seq_len = batches.first()?.seq_len;
        Some(Batch {
            batch: batches.iter().map(|b| b.batch).sum(),
            seq_len,
            tokens: batches
                .iter()
                .flat_map(|b| b.tokens.iter().copied())
                .collect(),
            targets: batches
                .iter()
                .flat_map(|b| b.targets.iter().copied())
                .collect(),
            source_len: batches[0].source_len,
            source: batches
                .iter()
                .flat_map(|b| b.source.iter().copied())
                .collect(),
        })
    }

    /// The rows in `parts` consecutive batches, the first `batch % parts` one row longer than
    /// the rest (so none is empty when `parts <= batch`); [`concat`](Self::concat) of them is
    /// `self`. Data-parallel training gives one to each replica.
    pub fn split(&self, parts: usize) -> Vec<Batch> {
        let parts = parts.max(1);
        let (each, longer) = (self.batch / parts, self.batch % parts);
        let mut start = 0;
        (0..parts)
            .map(|part| {
                let rows = each + usize::from(part < longer);
                let range = start..start + rows;
                start += rows;
                let take = |data: &[i64], width: usize| {
                    data[range.start * width..range.end * width].to_vec()
                };
                Batch {
                    batch: rows,
                    seq_len: self.seq_len,
                    tokens: take(&self.tokens, self.seq_len),
                    targets: take(&self.targets, self.seq_len),
                    source_len: self.source_len,
                    source: take(&self.source, self.source_len),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::Rng;
    use crate::tasks::tests::task;
    use crate::tasks::{TaskConfig, TaskKind};

    #[test]
    fn split_gives_near_equal_row_ranges_that_concatenate_back() {
        let translate = TaskConfig {
            kind: TaskKind::Translate,
            seq_len: 6,
            ..task(TaskKind::Translate)
        };
        for task in [task(TaskKind::Reverse), translate] {
            let batch = task.batch(7, &mut Rng::new(5));
            for parts in 1..=7 {
                let shards = batch.split(parts);
                let rows: Vec<usize> = shards.iter().map(|s| s.batch).collect();
                assert_eq!(rows.iter().sum::<usize>(), 7, "{parts} parts: {rows:?}");
                assert!(rows.iter().all(|&r| r == 7 / parts || r == 7 / parts + 1));
                assert!(rows.windows(2).all(|w| w[0] >= w[1]), "{rows:?}");
                assert_eq!(
                    Batch::concat(&shards).expect("at least one part"),
                    batch,
                    "{:?} in {parts} parts",
                    task.kind
                );
            }
        }
    }
}
