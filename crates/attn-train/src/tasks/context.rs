//! The `context` task, the "apple" problem. A sentence of filler words holds one ambiguous word
//! (`apple`) and one cue word, either about fruit (`eat`, `juice`, ...) or about the company
//! (`shares`, `iphone`, ...), at a random distance from it. The ambiguous word's class (fruit
//! or company) is decided by the cue alone, so the model must attend from `apple` to the cue.
//! Only the ambiguous word is scored; every other position carries [`IGNORED`].
//! `min_distance` of 30 or more gives the long-range setting.

use rand::{Rng as _, RngCore};

use super::{
    Architecture, CuePositions, Example, IGNORED, LongRange, Size, Task, TaskConfig, TaskError,
};

/// The ambiguous word of the `context` task.
const AMBIGUOUS: &str = "apple";
/// Cue words that make `apple` the fruit.
const FRUIT_CUES: [&str; 5] = ["eat", "juice", "pie", "ripe", "orchard"];
/// Cue words that make `apple` the company.
const COMPANY_CUES: [&str; 5] = ["shares", "iphone", "ceo", "stock", "launch"];
/// Words that say nothing about `apple`.
const FILLERS: [&str; 30] = [
    "the", "a", "of", "and", "to", "in", "is", "it", "was", "for", "on", "with", "as", "at", "by",
    "from", "they", "we", "said", "new", "big", "day", "time", "red", "today", "about", "more",
    "very", "some", "all",
];
/// Class names of the `context` task, indexed by class.
const CONTEXT_CLASSES: [&str; 3] = ["-", "fruit", "company"];

/// Classify an ambiguous word by a cue elsewhere in the sequence.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContextTask;

impl Task for ContextTask {
    fn name(&self) -> &'static str {
        "context"
    }

    fn architecture(&self) -> Architecture {
        Architecture::Encoder
    }

    fn sizes(&self) -> &'static [Size] {
        &[Size::SeqLen, Size::MinDistance]
    }

    fn validate(&self, config: &TaskConfig) -> Result<(), TaskError> {
        if config.min_distance == 0 || config.min_distance >= config.seq_len {
            return Err(TaskError::DistanceDoesNotFit {
                min_distance: config.min_distance,
                seq_len: config.seq_len,
            });
        }
        Ok(())
    }

    fn model_vocab(&self, _config: &TaskConfig) -> usize {
        1 + FRUIT_CUES.len() + COMPANY_CUES.len() + FILLERS.len()
    }

    fn n_classes(&self, _config: &TaskConfig) -> usize {
        CONTEXT_CLASSES.len()
    }

    fn ignored_class(&self) -> Option<usize> {
        Some(IGNORED)
    }

    fn token_name(&self, _config: &TaskConfig, token: usize) -> String {
        context_word(token).map_or_else(|| format!("#{token}"), String::from)
    }

    fn class_name(&self, class: usize) -> String {
        CONTEXT_CLASSES
            .get(class)
            .map_or_else(|| format!("#{class}"), |c| c.to_string())
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        let (tokens, targets) = context_example(config, rng);
        Example::encoded(tokens, targets)
    }

    fn long_range(&self) -> Option<LongRange> {
        Some(LongRange {
            min_distance: 30,
            seq_len: 48,
        })
    }

    fn has_cue(&self) -> bool {
        true
    }

    fn cue_positions(&self, tokens: &[i64]) -> Option<CuePositions> {
        let word = tokens.iter().position(|&t| t == context_token(AMBIGUOUS))?;
        let cue = tokens.iter().position(|&t| is_cue(t))?;
        Some(CuePositions { word, cue })
    }
}

/// The apple problem: filler words, one `apple`, one cue at distance >= `min_distance`.
fn context_example(config: &TaskConfig, rng: &mut dyn RngCore) -> (Vec<i64>, Vec<i64>) {
    let seq_len = config.seq_len;
    let far_enough = |p: usize, q: usize| p.abs_diff(q) >= config.min_distance;
    // Rejection sampling keeps (apple, cue) uniform over all pairs that are far enough.
    let (apple, cue) = loop {
        let (p, q) = (rng.random_range(0..seq_len), rng.random_range(0..seq_len));
        if far_enough(p, q) {
            break (p, q);
        }
    };
    let fruit = rng.random_bool(0.5);
    let cues = if fruit { &FRUIT_CUES } else { &COMPANY_CUES };
    let cue_word = cues[rng.random_range(0..cues.len())];

    let filler_base = 1 + FRUIT_CUES.len() + COMPANY_CUES.len();
    let mut tokens: Vec<i64> = (0..seq_len)
        .map(|_| (filler_base + rng.random_range(0..FILLERS.len())) as i64)
        .collect();
    tokens[apple] = context_token(AMBIGUOUS);
    tokens[cue] = context_token(cue_word);

    let mut targets = vec![IGNORED as i64; seq_len];
    targets[apple] = if fruit { 1 } else { 2 };
    (tokens, targets)
}

/// Whether a `context` token id is one of the cue words.
fn is_cue(token: i64) -> bool {
    usize::try_from(token)
        .ok()
        .and_then(context_word)
        .is_some_and(|w| FRUIT_CUES.contains(&w) || COMPANY_CUES.contains(&w))
}

/// The word of a `context` token id.
fn context_word(token: usize) -> Option<&'static str> {
    std::iter::once(AMBIGUOUS)
        .chain(FRUIT_CUES)
        .chain(COMPANY_CUES)
        .chain(FILLERS)
        .nth(token)
}

/// The token id of a `context` word.
fn context_token(word: &str) -> i64 {
    let id = std::iter::once(AMBIGUOUS)
        .chain(FRUIT_CUES)
        .chain(COMPANY_CUES)
        .chain(FILLERS)
        .position(|w| w == word)
        .expect("only called with words from the word lists");
    id as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::Rng;
    use crate::tasks::TaskKind;

    #[test]
    fn context_scores_only_apple_and_its_label_follows_the_cue() {
        let task = TaskConfig {
            kind: TaskKind::Context,
            seq_len: 40,
            vocab: 0,
            min_distance: 30,
            digits: 3,
            ..TaskConfig::default()
        };
        task.validate().expect("30 < 40");
        let apple = context_token(AMBIGUOUS);
        let mut rng = Rng::new(4);
        let mut senses = [0usize; 3];
        for _ in 0..200 {
            let (x, y) = task.example(&mut rng);
            let p = x.iter().position(|&t| t == apple).expect("one apple");
            assert_eq!(x.iter().filter(|&&t| t == apple).count(), 1);
            let cue = x.iter().position(|&t| is_cue(t)).expect("one cue");
            assert_eq!(x.iter().filter(|&&t| is_cue(t)).count(), 1);
            assert!(p.abs_diff(cue) >= 30, "apple at {p}, cue at {cue}");
            let cue_word = context_word(x[cue] as usize).expect("a word");
            let expected = if FRUIT_CUES.contains(&cue_word) { 1 } else { 2 };
            assert_eq!(y[p], expected);
            assert_eq!(y.iter().filter(|&&c| c != IGNORED as i64).count(), 1);
            assert_eq!(
                task.cue_positions(&x),
                Some(CuePositions { word: p, cue }),
                "{x:?}"
            );
            senses[y[p] as usize] += 1;
        }
        assert!(senses[1] > 60 && senses[2] > 60, "{senses:?}");
    }

    #[test]
    fn cue_positions_name_the_scored_word_and_its_cue() {
        let task = TaskConfig {
            kind: TaskKind::Context,
            seq_len: 9,
            vocab: 0,
            min_distance: 2,
            digits: 3,
            ..TaskConfig::default()
        };
        let words = ["the", "ripe", "a", "of", "apple", "to", "in", "is", "it"];
        let tokens: Vec<i64> = words.iter().map(|w| context_token(w)).collect();
        assert_eq!(
            task.cue_positions(&tokens),
            Some(CuePositions { word: 4, cue: 1 })
        );
        assert_eq!(task.cue_positions(&tokens[2..]), None, "no cue left");
        let reverse = TaskConfig {
            kind: TaskKind::Reverse,
            ..task
        };
        assert_eq!(reverse.cue_positions(&tokens), None);
    }

    #[test]
    fn token_names_read_as_words_for_context() {
        let t = TaskConfig {
            kind: TaskKind::Context,
            ..TaskConfig::default()
        };
        assert_eq!(t.token_name(0), "apple");
        assert_eq!(t.token_name(context_token("stock")), "stock");
        assert_eq!(t.model_vocab(), 41);
        assert_eq!(t.class_name(2), "company");
    }
}
