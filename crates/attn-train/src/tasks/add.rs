//! The `add` task (decoder-only): the prompt `123+045=` of two `digits`-digit operands,
//! zero-padded, and the answer's `digits + 1` digits written least significant first, `8610`
//! for 168.
//!
//! Written that way, each answer digit depends on two prompt digits and the carry of the digit
//! generated just before it, which a small model learns in a few hundred steps; most
//! significant first, the first digit would need every carry at once.
//! A batch row is the whole text but its last token, the targets the text shifted by one, and
//! only the answer is scored (causal language-model loss on the answer tokens).

use rand::{Rng as _, RngCore};

use super::{Architecture, Example, GenerationPrompt, IGNORED, Size, Task, TaskConfig, TaskError};

/// Tokens of the `add` task: [`IGNORED`] (never in a text), the digits `0..=9` as `1..=10`,
/// then `+` and `=`.
const ADD_TOKENS: [&str; 13] = [
    "_", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "=",
];
/// The `add` task's `+`.
const PLUS: i64 = 11;
/// The `add` task's `=`.
const EQUALS: i64 = 12;

/// Generate the sum of two numbers, digit by digit (decoder-only).
#[derive(Clone, Copy, Debug, Default)]
pub struct AddTask;

impl Task for AddTask {
    fn name(&self) -> &'static str {
        "add"
    }

    fn architecture(&self) -> Architecture {
        Architecture::Decoder
    }

    fn sizes(&self) -> &'static [Size] {
        &[Size::Digits]
    }

    fn validate(&self, config: &TaskConfig) -> Result<(), TaskError> {
        if !(1..=9).contains(&config.digits) {
            return Err(TaskError::DigitsOutOfRange {
                digits: config.digits,
            });
        }
        Ok(())
    }

    fn model_vocab(&self, _config: &TaskConfig) -> usize {
        ADD_TOKENS.len()
    }

    fn ignored_class(&self) -> Option<usize> {
        Some(IGNORED)
    }

    fn model_seq_len(&self, config: &TaskConfig) -> usize {
        self.prompt_len(config) + self.answer_len(config) - 1
    }

    fn prompt_len(&self, config: &TaskConfig) -> usize {
        2 * config.digits + 2
    }

    fn answer_len(&self, config: &TaskConfig) -> usize {
        config.digits + 1
    }

    fn token_name(&self, _config: &TaskConfig, token: usize) -> String {
        ADD_TOKENS
            .get(token)
            .map_or_else(|| format!("#{token}"), |t| t.to_string())
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        let max = 10_u64.pow(config.digits as u32);
        let (a, b) = (rng.random_range(0..max), rng.random_range(0..max));
        let (tokens, targets) = add_row(config, &config.add_text(a, b));
        Example::encoded(tokens, targets)
    }

    fn held_out_key<'a>(&self, config: &TaskConfig, example: &'a Example) -> Option<&'a [i64]> {
        Some(&example.tokens[..self.prompt_len(config)])
    }

    fn generation_prompt(
        &self,
        config: &TaskConfig,
        text: &str,
    ) -> Result<GenerationPrompt, String> {
        Ok(GenerationPrompt {
            source: None,
            tokens: config.add_prompt(text)?,
        })
    }

    fn read_answer(&self, config: &TaskConfig, answer: &[i64]) -> Option<u64> {
        config.read_add_answer(answer)
    }
}

impl TaskConfig {
    /// The `add` text of `a + b`: the prompt `a+b=` with both operands zero-padded to
    /// `digits`, then the sum's `digits + 1` digits least significant first.
    pub fn add_text(&self, a: u64, b: u64) -> Vec<i64> {
        let digit = |d: u64| d as i64 + 1;
        let number = |n: u64, width: usize| -> Vec<i64> {
            (0..width)
                .rev()
                .map(|i| digit(n / 10_u64.pow(i as u32) % 10))
                .collect()
        };
        let mut text = number(a, self.digits);
        text.push(PLUS);
        text.extend(number(b, self.digits));
        text.push(EQUALS);
        let sum = a + b;
        text.extend((0..=self.digits).map(|i| digit(sum / 10_u64.pow(i as u32) % 10)));
        text
    }

    /// The `add` prompt for the text `a+b` or `a+b=` (operands of at most `digits` digits),
    /// zero-padded as in training.
    ///
    /// # Errors
    ///
    /// A message naming the expected form.
    pub fn add_prompt(&self, text: &str) -> Result<Vec<i64>, String> {
        let bad = || {
            format!(
                "the add prompt is two numbers of at most {} digits, like {}+{}=; got {text:?}",
                self.digits,
                "1".repeat(self.digits),
                "2".repeat(self.digits)
            )
        };
        let text = text.trim();
        let text = text.strip_suffix('=').unwrap_or(text);
        let (a, b) = text.split_once('+').ok_or_else(bad)?;
        let operand = |s: &str| {
            let s = s.trim();
            let fits = !s.is_empty() && s.len() <= self.digits;
            if fits && s.bytes().all(|c| c.is_ascii_digit()) {
                s.parse::<u64>().map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        let mut prompt = self.add_text(operand(a)?, operand(b)?);
        prompt.truncate(self.prompt_len());
        Ok(prompt)
    }

    /// Reads an `add` answer, least significant digit first, back as a number.
    pub fn read_add_answer(&self, answer: &[i64]) -> Option<u64> {
        answer.iter().rev().try_fold(0_u64, |n, &t| {
            let d = u64::try_from(t - 1).ok().filter(|d| *d < 10)?;
            Some(n * 10 + d)
        })
    }
}

/// One `add` text as a batch row: the text but its last token, and the next token at each
/// position where it is an answer digit ([`IGNORED`] inside the prompt).
fn add_row(config: &TaskConfig, text: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let len = text.len() - 1;
    let x = text[..len].to_vec();
    let y = (0..len)
        .map(|i| {
            if i + 1 >= config.prompt_len() {
                text[i + 1]
            } else {
                IGNORED as i64
            }
        })
        .collect();
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::Rng;
    use crate::tasks::tests::{add, names};

    #[test]
    fn add_text_is_the_padded_prompt_then_the_sum_backwards() {
        let task = add(3);
        assert_eq!(names(&task, &task.add_text(123, 45)), "123+045=8610");
        assert_eq!(names(&task, &task.add_text(999, 999)), "999+999=8991");
        assert_eq!(
            task.add_prompt("123+45="),
            Ok(task.add_text(123, 45)[..8].to_vec())
        );
        assert_eq!(
            task.add_prompt(" 7+8 "),
            Ok(task.add_text(7, 8)[..8].to_vec())
        );
        assert!(task.add_prompt("1234+5=").is_err());
        assert!(task.add_prompt("12-5=").is_err());
        assert_eq!(
            task.read_add_answer(&task.add_text(123, 45)[8..]),
            Some(168)
        );
    }

    #[test]
    fn add_rows_score_only_the_answer_shifted_by_one() {
        let task = add(2);
        assert_eq!(
            (task.prompt_len(), task.answer_len(), task.model_seq_len()),
            (6, 3, 8)
        );
        let mut rng = Rng::new(5);
        let batch = task.batch(40, &mut rng);
        assert_eq!(batch.seq_len, 8);
        for b in 0..batch.batch {
            let x = batch.sequence(b);
            let y = &batch.targets[b * 8..(b + 1) * 8];
            let number = |digits: &[i64]| digits.iter().fold(0, |n, &t| n * 10 + (t - 1) as u64);
            let (a, c) = (number(&x[0..2]), number(&x[3..5]));
            assert_eq!((x[2], x[5]), (PLUS, EQUALS), "{}", names(&task, x));
            let text = task.add_text(a, c);
            assert_eq!(x, &text[..8]);
            assert!(y[..5].iter().all(|&t| t == IGNORED as i64), "{y:?}");
            assert_eq!(&y[5..], &text[6..]);
            assert_eq!(task.read_add_answer(&y[5..]), Some(a + c));
        }
    }
}
