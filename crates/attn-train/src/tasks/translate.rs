//! The `translate` task (encoder-decoder): the source is `seq_len` digit words
//! (`three one four`), the target the same digits written backwards (`4 1 3`), after a start
//! token `<s>`. Backwards, target token `i` must read source word `seq_len - 1 - i`, an
//! alignment that only cross-attention can make: its weights form the anti-diagonal.

use rand::{Rng as _, RngCore};

use super::{Architecture, Example, GenerationPrompt, Size, Task, TaskConfig};

/// Source words of the `translate` task: word `d` is the digit `d`.
const DIGIT_WORDS: [&str; 10] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];
/// The `translate` task's start token; the digit `d` is target token `d + 1`.
const START: i64 = 0;

/// Write digit words as digits, backwards (encoder-decoder).
#[derive(Clone, Copy, Debug, Default)]
pub struct TranslateTask;

impl Task for TranslateTask {
    fn name(&self) -> &'static str {
        "translate"
    }

    fn architecture(&self) -> Architecture {
        Architecture::EncoderDecoder
    }

    fn sizes(&self) -> &'static [Size] {
        &[Size::SeqLen]
    }

    fn model_vocab(&self, _config: &TaskConfig) -> usize {
        1 + DIGIT_WORDS.len()
    }

    fn source_vocab(&self, _config: &TaskConfig) -> usize {
        DIGIT_WORDS.len()
    }

    fn prompt_len(&self, _config: &TaskConfig) -> usize {
        1
    }

    fn answer_len(&self, config: &TaskConfig) -> usize {
        config.seq_len
    }

    fn token_name(&self, _config: &TaskConfig, token: usize) -> String {
        if token == START as usize {
            "<s>".to_string()
        } else if token <= DIGIT_WORDS.len() {
            (token - 1).to_string()
        } else {
            format!("#{token}")
        }
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        translate_example(config, rng)
    }

    fn held_out_key<'a>(&self, _config: &TaskConfig, example: &'a Example) -> Option<&'a [i64]> {
        Some(&example.source)
    }

    fn generation_prompt(
        &self,
        config: &TaskConfig,
        text: &str,
    ) -> Result<GenerationPrompt, String> {
        let source = config.translate_source(text)?;
        if source.len() != config.seq_len {
            return Err(format!(
                "the run learned to translate {} digit words at a time; the prompt has {}",
                config.seq_len,
                source.len()
            ));
        }
        Ok(GenerationPrompt {
            source: Some(source),
            tokens: vec![config.start_token()],
        })
    }
}

impl TaskConfig {
    /// A readable name for a source token (`translate`'s digit words).
    pub fn source_token_name(&self, token: i64) -> String {
        usize::try_from(token)
            .ok()
            .and_then(|t| DIGIT_WORDS.get(t))
            .map_or_else(|| format!("#{token}"), |w| w.to_string())
    }

    /// The `translate` source for digit words separated by spaces.
    ///
    /// # Errors
    ///
    /// A message naming the first word that is not a digit word.
    pub fn translate_source(&self, text: &str) -> Result<Vec<i64>, String> {
        text.split_whitespace()
            .map(|word| {
                DIGIT_WORDS
                    .iter()
                    .position(|w| w.eq_ignore_ascii_case(word))
                    .map(|d| d as i64)
                    .ok_or_else(|| {
                        format!(
                            "{word:?} is not a digit word; the translate prompt is words from {}",
                            DIGIT_WORDS.join(" ")
                        )
                    })
            })
            .collect()
    }

    /// The `translate` start token, the prompt of every generation.
    pub fn start_token(&self) -> i64 {
        START
    }
}

/// One `translate` example: the source, the target input and the targets, each `seq_len`
/// long. The targets are the source's digits backwards; the target input is `<s>` and the
/// targets but the last.
fn translate_example(config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
    let source: Vec<i64> = (0..config.seq_len)
        .map(|_| rng.random_range(0..DIGIT_WORDS.len() as i64))
        .collect();
    let targets: Vec<i64> = source.iter().rev().map(|d| d + 1).collect();
    let mut input = vec![START];
    input.extend(&targets[..config.seq_len - 1]);
    Example {
        source,
        tokens: input,
        targets,
    }
}

#[cfg(test)]
mod tests {
    use crate::random::Rng;
    use crate::tasks::{TaskConfig, TaskKind};

    #[test]
    fn translate_targets_are_the_source_digits_backwards_after_a_start_token() {
        let task = TaskConfig {
            kind: TaskKind::Translate,
            seq_len: 4,
            ..TaskConfig::default()
        };
        let batch = task.batch(5, &mut Rng::new(7));
        assert_eq!((batch.source_len, batch.seq_len), (4, 4));
        for b in 0..5 {
            let (source, x) = (batch.source_sequence(b), batch.sequence(b));
            let y = &batch.targets[b * 4..(b + 1) * 4];
            for i in 0..4 {
                assert_eq!(y[i], source[3 - i] + 1);
                assert_eq!(task.token_name(y[i]), source[3 - i].to_string());
            }
            assert_eq!(x[0], task.start_token());
            assert_eq!(&x[1..], &y[..3]);
        }
        let words = task
            .translate_source("three one Four")
            .expect("digit words");
        assert_eq!(words, [3, 1, 4]);
        assert_eq!(task.source_token_name(4), "four");
        assert!(task.translate_source("three eleven").is_err());
    }
}
