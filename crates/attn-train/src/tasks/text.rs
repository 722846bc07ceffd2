//! The `text` task (decoder-only): a language model on the user's own text (`--data FILE`).
//!
//! A batch row is a random window of `seq_len + 1` tokens of the training split: the first
//! `seq_len` are the input and every position is scored on the token after it, as nanoGPT's
//! `get_batch` draws. The held-out set is windows of the validation split, the last 10% of the
//! text. The loss is in nats per token.
//!
//! The data lives in [`TextSettings::loaded`], filled by [`TaskConfig::load_text`] through
//! [`crate::text::TextData::prepare`] (a fresh run) or [`crate::text::TextData::open`] (a
//! resumed one); the tokenizer's size becomes the task's `vocab`.

use rand::RngCore;

use super::{Architecture, Example, GenerationPrompt, Size, Split, Task, TaskConfig, TaskError};
pub use crate::text::TextSettings;
use crate::text::{Side, TextData};

/// Model the user's own text (decoder-only).
#[derive(Clone, Copy, Debug, Default)]
pub struct TextTask;

impl TextTask {
    /// The loaded text of `config`.
    ///
    /// # Panics
    ///
    /// When the text was not loaded: every example needs it.
    fn data(config: &TaskConfig) -> &TextData {
        &config
            .text
            .loaded
            .as_ref()
            .expect(
                "the text task's data is loaded (TaskConfig::load_text) before examples are drawn",
            )
            .0
    }
}

impl Task for TextTask {
    fn name(&self) -> &'static str {
        "text"
    }

    fn architecture(&self) -> Architecture {
        Architecture::Decoder
    }

    fn sizes(&self) -> &'static [Size] {
        &[Size::SeqLen]
    }

    fn validate(&self, config: &TaskConfig) -> Result<(), TaskError> {
        if config.text.data.is_empty() && config.text.loaded.is_none() {
            return Err(TaskError::NoText);
        }
        Ok(())
    }

    /// The tokenizer's size, recorded in `vocab` when the text is loaded.
    fn model_vocab(&self, config: &TaskConfig) -> usize {
        match &config.text.loaded {
            Some(loaded) => loaded.0.tokenizer.vocab_size(),
            None => config.vocab,
        }
    }

    fn token_name(&self, config: &TaskConfig, token: usize) -> String {
        match &config.text.loaded {
            Some(loaded) => loaded.0.tokenizer.token_name(token),
            None => format!("#{token}"),
        }
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        self.example_from(config, Split::Train, rng)
    }

    fn example_from(&self, config: &TaskConfig, split: Split, rng: &mut dyn RngCore) -> Example {
        let side = match split {
            Split::Train => Side::Train,
            Split::HeldOut => Side::Validation,
        };
        Self::data(config).example(side, config.seq_len, rng)
    }

    fn generation_prompt(
        &self,
        config: &TaskConfig,
        text: &str,
    ) -> Result<GenerationPrompt, String> {
        let Some(loaded) = &config.text.loaded else {
            return Err("the text task's tokenizer is not loaded".into());
        };
        let ids = loaded.0.tokenizer.encode(text).map_err(|e| e.to_string())?;
        if ids.is_empty() {
            return Err(format!(
                "the prompt {text:?} encodes to no token; give at least one character"
            ));
        }
        Ok(GenerationPrompt {
            source: None,
            tokens: ids.into_iter().map(i64::from).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;

    use crate::config::TrainConfig;
    use crate::tasks::TaskKind;
    use crate::train::{RunOptions, run_on};

    /// A text of `words` words drawn uniformly from four three-letter words with ten distinct
    /// letters, each followed by a space. After a space the next word is a fair draw among four
    /// (ln 4 nats); every other character follows from the one before it (0 nats). One position
    /// in four follows a space, so the text's entropy is ln(4) / 4 = 0.347 nats per character,
    /// and a model that sees one character back can reach it.
    fn animals(words: usize, seed: u64) -> String {
        const WORDS: [&str; 4] = ["cat ", "dog ", "emu ", "pig "];
        let mut state = seed;
        (0..words)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                WORDS[(state >> 33) as usize % 4]
            })
            .collect()
    }

    #[test]
    fn the_held_out_loss_comes_within_three_hundredths_of_a_nat_of_the_texts_entropy() {
        let entropy = 4f64.ln() / 4.0;
        let path =
            std::env::temp_dir().join(format!("attn-text-entropy-{}.txt", std::process::id()));
        std::fs::write(&path, animals(6000, 11)).expect("writes");
        let _turn = crate::train::tests::TRAINING
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = TrainConfig::default();
            config.text_recipe();
            config.task.seq_len = 16;
            config.model.pos = crate::config::PosName::Learned.scheme(16);
            config.task.text.data = vec![path.clone()];
            config.model.d_model = 32;
            config.model.n_heads = 2;
            config.model.n_layers = 1;
            config.model.d_ff = 64;
            config.optim.lr = 1e-2;
            config.optim.warmup_steps = 10;
            config.steps = 150;
            config.batch_size = 16;
            config.eval_every = 150;
            config.eval_sequences = 256;
            config.checkpoint_seconds = 0.0;
            config.device = d.name.to_string();
            assert_eq!(config.task.kind, TaskKind::Text);
            let options = RunOptions {
                skip_plots: true,
                ..RunOptions::default()
            };
            let summary = run_on(&config, d.device.clone(), &options).expect("trains");
            let loss = summary.final_metrics.loss;
            eprintln!(
                "{}: held-out loss {loss:.4} nats per character, entropy {entropy:.4}",
                d.name
            );
            // Below the entropy only by the sampling noise of 256 windows.
            assert!(
                (loss - entropy).abs() < 0.03,
                "{}: held-out loss {loss} against an entropy of {entropy}",
                d.name
            );
        });
        std::fs::remove_file(path).ok();
    }
}
