//! A run's text made ready: read, tokenized, and kept in the run folder when there is one
//! ([`TextData::prepare`]), or read back from the folder of a resumed run, and loaded into the
//! task's configuration ([`TaskConfig::load_text`]).
//!
//! These are the text's only steps that know the run folder ([`RunDir`]), which in turn knows
//! the run's configuration and so the text's settings; the rest of [`crate::text`] reads files
//! and tokenizes, and never names the run folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::tokens::TokenWriter;
use super::{
    LoadedText, Side, Sources, TOKENIZER_FILE, TRAIN_TOKENS, TextData, TextError, TextTokenizer,
    TokenizerChoice, Tokens, VALIDATION_TOKENS, check_length,
};
use crate::error::TrainError;
use crate::run_dir::RunDir;
use crate::tasks::{TaskConfig, TaskKind};

impl TextData {
    /// Reads `files`, builds the tokenizer `choice` names from the training split (or reads
    /// it), and encodes both splits, in chunks; with a run folder, the tokenizer and the ids
    /// are written there and the ids mapped back.
    ///
    /// # Errors
    ///
    /// [`TrainError::Text`] naming the file and what is wrong
    /// with it, or a split shorter than one window of `seq_len + 1` tokens; the run folder's
    /// errors.
    pub fn prepare(
        files: &[PathBuf],
        lossy: bool,
        choice: &TokenizerChoice,
        seq_len: usize,
        run_dir: Option<&RunDir>,
    ) -> Result<Self, TrainError> {
        let sources = Sources::open(files, lossy)?;
        let tokenizer = build_tokenizer(&sources, choice)?;
        let (train, validation) = match run_dir {
            Some(dir) => {
                let claim = |relative: &str| dir.claim(relative);
                let json = tokenizer.to_json()?;
                let path = claim(TOKENIZER_FILE)?;
                write_atomically(&path, json.as_bytes())?;
                let mut train = TokenWriter::create(&claim(TRAIN_TOKENS)?)?;
                let mut validation = TokenWriter::create(&claim(VALIDATION_TOKENS)?)?;
                encode(&sources, &tokenizer, |side, ids| match side {
                    Side::Train => train.write(ids),
                    Side::Validation => validation.write(ids),
                })?;
                check_length("training", train.written(), seq_len)?;
                check_length("validation", validation.written(), seq_len)?;
                let vocab = tokenizer.vocab_size();
                (
                    Tokens::map(&train.finish()?, vocab)?,
                    Tokens::map(&validation.finish()?, vocab)?,
                )
            }
            None => {
                let (mut train, mut validation) = (Vec::new(), Vec::new());
                encode(&sources, &tokenizer, |side, ids| {
                    match side {
                        Side::Train => train.extend_from_slice(ids),
                        Side::Validation => validation.extend_from_slice(ids),
                    }
                    Ok(())
                })?;
                (Tokens::Memory(train), Tokens::Memory(validation))
            }
        };
        check_length("training", train.len(), seq_len)?;
        check_length("validation", validation.len(), seq_len)?;
        Ok(Self {
            tokenizer,
            train,
            validation,
        })
    }
}

impl TaskConfig {
    /// Reads the `text` task's text into [`TextSettings::loaded`](super::TextSettings::loaded)
    /// and records the tokenizer's
    /// size as `vocab`; nothing for the other tasks. A fresh run reads its `--data` files (and
    /// with a folder writes its tokenizer and ids there); a resumed one (`resume`) reads the
    /// folder's copy, and the files may have changed or gone since.
    ///
    /// # Errors
    ///
    /// [`TrainError::Text`] naming the file and what is wrong with it.
    pub fn load_text(&mut self, run_dir: Option<&RunDir>, resume: bool) -> Result<(), TrainError> {
        if self.kind != TaskKind::Text || self.text.loaded.is_some() {
            return Ok(());
        }
        let data = match run_dir {
            Some(dir) if resume => TextData::open(dir.root(), self.seq_len)?,
            _ => TextData::prepare(
                &self.text.data,
                self.text.lossy,
                &self.text.tokenizer,
                self.seq_len,
                run_dir,
            )?,
        };
        let vocab = data.tokenizer.vocab_size();
        if resume && vocab != self.vocab {
            return Err(TrainError::Config(format!(
                "the run's tokenizer has {vocab} tokens but its configuration says vocab {}",
                self.vocab
            )));
        }
        self.vocab = vocab;
        self.text.loaded = Some(LoadedText(Arc::new(data)));
        Ok(())
    }
}

/// The tokenizer `choice` names: built from the training split's text, or read.
fn build_tokenizer(
    sources: &Sources,
    choice: &TokenizerChoice,
) -> Result<TextTokenizer, TextError> {
    match choice {
        TokenizerChoice::File(path) => TextTokenizer::read(path),
        TokenizerChoice::Char => {
            let mut characters = BTreeSet::new();
            for chunk in sources.chunks() {
                let chunk = chunk?;
                if chunk.side == Side::Validation {
                    break;
                }
                characters.extend(chunk.text.chars());
            }
            TextTokenizer::characters(&characters)
        }
        TokenizerChoice::Bpe(size) => {
            let mut failure = None;
            let train = sources
                .chunks()
                .map_while(|chunk| chunk.map_err(|e| failure = Some(e)).ok())
                .take_while(|chunk| chunk.side == Side::Train)
                .map(|chunk| chunk.text);
            let tokenizer = TextTokenizer::train_bpe(*size, train);
            if let Some(e) = failure {
                return Err(e);
            }
            tokenizer
        }
    }
}

/// Encodes every chunk of `sources`, passing each one's ids to `sink` with its side.
fn encode(
    sources: &Sources,
    tokenizer: &TextTokenizer,
    mut sink: impl FnMut(Side, &[u32]) -> Result<(), TextError>,
) -> Result<(), TextError> {
    for chunk in sources.chunks() {
        let chunk = chunk?;
        let ids = tokenizer.encode(&chunk.text)?;
        sink(chunk.side, &ids)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` through a temporary file in the same folder and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TextError> {
    crate::files::write_atomically(path, bytes).map_err(|(p, e)| TextError::io("writing", &p, e))
}
