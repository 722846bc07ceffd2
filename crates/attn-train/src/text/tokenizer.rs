//! The text task's tokenizers, all three as Hugging Face `tokenizers` values, so that a run
//! folder's `tokenizer.json` is one file any of them reads back:
//!
//! ```text
//! char     one token per character of the training split, and <unk> (id 0) for the rest
//! bpe:N    byte-level BPE (GPT-2's scheme) of N tokens, trained on the training split
//! FILE     an existing tokenizer.json
//! ```
//!
//! The character tokenizer is `tokenizers`' word-level model over single characters: a
//! pre-tokenizer cutting the text into pieces of one character, the characters sorted by code
//! point as the vocabulary, and a decoder that joins tokens without spaces.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::fixed_length::FixedLength;
use tokenizers::{AddedToken, Tokenizer};

use super::TextError;

/// The unknown character's token: id 0 of the character tokenizer.
pub const UNKNOWN: &str = "<unk>";

/// The largest `tokenizer.json` read (Llama 3's is 9 MB).
pub const TOKENIZER_MAX_BYTES: u64 = 64 << 20;

/// The most tokens a trained BPE may have: ids are `u32` in the token files, `i32` on the
/// backends.
pub const MAX_BPE_VOCAB: usize = 1 << 20;

/// Which tokenizer a text run uses: its name in configuration files and on the command line
/// (`char`, `bpe:N`, or the path of a `tokenizer.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenizerChoice {
    /// One token per character of the training split.
    #[default]
    Char,
    /// A byte-level BPE of this many tokens, trained on the training split.
    Bpe(usize),
    /// An existing `tokenizer.json`.
    File(PathBuf),
}

impl FromStr for TokenizerChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "char" {
            return Ok(Self::Char);
        }
        if let Some(size) = text.strip_prefix("bpe:") {
            let size: usize = size
                .parse()
                .map_err(|_| format!("bpe:N needs a whole number of tokens, got {text:?}"))?;
            // 256 byte tokens, then at least one merge.
            if !(257..=MAX_BPE_VOCAB).contains(&size) {
                return Err(format!(
                    "bpe:{size}: a byte-level BPE has 256 byte tokens and then its merges, so N \
                     must be in 257..={MAX_BPE_VOCAB}"
                ));
            }
            return Ok(Self::Bpe(size));
        }
        if text.ends_with(".json") {
            return Ok(Self::File(PathBuf::from(text)));
        }
        Err(format!(
            "unknown tokenizer {text:?}: give char, bpe:N (N tokens) or the path of a \
             tokenizer.json"
        ))
    }
}

impl fmt::Display for TokenizerChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Char => f.write_str("char"),
            Self::Bpe(size) => write!(f, "bpe:{size}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Serialize for TokenizerChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TokenizerChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Reads a `tokenizer.json` into `tokenizers`' own type: a regular file of at most
/// [`TOKENIZER_MAX_BYTES`], checked first for what `tokenizers` 0.22 panics on instead of
/// refusing (JSON that does not parse inside its `decoder`, a `FixedLength` pre-tokenizer of
/// length 0, which panics on the first text it cuts).
///
/// # Errors
///
/// [`TextError::NotAFile`], [`TextError::TooLarge`] or [`TextError::Io`] for the file,
/// [`TextError::BadTokenizer`] naming it when it is not a tokenizer `tokenizers` can use.
pub fn read_tokenizer(path: &Path) -> Result<Tokenizer, TextError> {
    let bytes = crate::files::read_bounded(path, TOKENIZER_MAX_BYTES)?;
    let bad = |reason: String| TextError::BadTokenizer {
        path: path.to_path_buf(),
        reason,
    };
    serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|e| bad(e.to_string()))?;
    let inner = Tokenizer::from_bytes(&bytes).map_err(|e| bad(e.to_string()))?;
    let pre_tokenizer =
        serde_json::to_value(inner.get_pre_tokenizer()).map_err(|e| bad(e.to_string()))?;
    if let Some(found) = zero_length_pieces(&pre_tokenizer) {
        return Err(bad(format!(
            "its pre_tokenizer {found} cuts pieces of 0 characters; the length must be at least 1"
        )));
    }
    Ok(inner)
}

/// A `FixedLength` pre-tokenizer of length 0 within `pre_tokenizer` (a `Sequence` nests
/// others), as JSON.
fn zero_length_pieces(pre_tokenizer: &serde_json::Value) -> Option<String> {
    match pre_tokenizer {
        serde_json::Value::Object(map) => {
            if map.get("type").and_then(|t| t.as_str()) == Some("FixedLength")
                && map.get("length").and_then(|l| l.as_u64()) == Some(0)
            {
                return Some(pre_tokenizer.to_string());
            }
            map.values().find_map(zero_length_pieces)
        }
        serde_json::Value::Array(items) => items.iter().find_map(zero_length_pieces),
        _ => None,
    }
}

/// A text run's tokenizer: text to token ids and back.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
}

impl fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl TextTokenizer {
    /// The character tokenizer of `characters` (each once), with [`UNKNOWN`] as id 0 and the
    /// characters after it in code-point order.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] when `tokenizers` refuses the vocabulary.
    pub fn characters(characters: &BTreeSet<char>) -> Result<Self, TextError> {
        let vocab = std::iter::once(UNKNOWN.to_string())
            .chain(characters.iter().map(char::to_string))
            .zip(0u32..)
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token(UNKNOWN.to_string())
            .build()
            .map_err(TextError::tokenizer)?;
        let mut inner = Tokenizer::new(model);
        inner.with_pre_tokenizer(Some(FixedLength::new(1)));
        inner.with_decoder(Some(Fuse::new()));
        Ok(Self { inner })
    }

    /// A byte-level BPE of `size` tokens, trained on `chunks` of the training text.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] when training fails.
    pub fn train_bpe<I>(size: usize, chunks: I) -> Result<Self, TextError>
    where
        I: Iterator<Item = String> + Send,
    {
        let trainer = BpeTrainerBuilder::new()
            .vocab_size(size)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(Vec::<AddedToken>::new())
            .build();
        let mut inner = Tokenizer::new(BPE::default());
        inner.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let mut trainer = TrainerWrapper::from(trainer);
        inner
            .train(&mut trainer, chunks)
            .map_err(TextError::tokenizer)?;
        Ok(Self { inner })
    }

    /// Reads a `tokenizer.json`: a regular file of at most [`TOKENIZER_MAX_BYTES`].
    ///
    /// # Errors
    ///
    /// [`TextError::NotAFile`], [`TextError::TooLarge`] or [`TextError::Io`] for the file,
    /// [`TextError::BadTokenizer`] naming it when `tokenizers` cannot read it.
    pub fn read(path: &Path) -> Result<Self, TextError> {
        read_tokenizer(path).map(|inner| Self { inner })
    }

    /// The tokenizer as `tokenizer.json` text.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] when it cannot be serialised.
    pub fn to_json(&self) -> Result<String, TextError> {
        self.inner.to_string(false).map_err(TextError::tokenizer)
    }

    /// Tokens in the vocabulary, the added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The ids of `text`.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] when `tokenizers` fails on the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TextError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(TextError::tokenizer)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The ids of `text` with the tokenizer's special tokens added around it (BERT's `[CLS]`
    /// and `[SEP]`), as transformers' tokenizers do by default.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] when `tokenizers` fails on the text.
    pub fn encode_with_special_tokens(&self, text: &str) -> Result<Vec<u32>, TextError> {
        let encoding = self
            .inner
            .encode_fast(text, true)
            .map_err(TextError::tokenizer)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`.
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TextError> {
        self.inner.decode(ids, false).map_err(TextError::tokenizer)
    }

    /// A decoder fed one id at a time that returns text only once it is whole characters, so a
    /// stream of BPE tokens never prints half of a multi-byte character.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            ids: Vec::new(),
            printed: 0,
        }
    }

    /// A readable name for one token: its text, or `#id` for an id outside the vocabulary.
    pub fn token_name(&self, id: usize) -> String {
        let Ok(id) = u32::try_from(id) else {
            return format!("#{id}");
        };
        match self.inner.decode(&[id], false) {
            Ok(text) if !text.is_empty() && !text.contains('\u{fffd}') => text,
            // A byte of a longer character, or a token that decodes to nothing: its name in
            // the vocabulary.
            _ => self
                .inner
                .id_to_token(id)
                .unwrap_or_else(|| format!("#{id}")),
        }
    }
}

/// Text decoded one token at a time ([`TextTokenizer::stream`]).
pub struct TextStream<'a> {
    tokenizer: &'a TextTokenizer,
    ids: Vec<u32>,
    /// Bytes of the decoded `ids` already returned.
    printed: usize,
}

impl TextStream<'_> {
    /// Adds `id`; returns the text it completes (empty while a character is still partial).
    ///
    /// # Errors
    ///
    /// [`TextError::Tokenizer`] for an id outside the vocabulary.
    pub fn push(&mut self, id: u32) -> Result<String, TextError> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        // A trailing replacement character is a multi-byte character still incomplete.
        if text.ends_with('\u{fffd}') || text.len() < self.printed {
            return Ok(String::new());
        }
        let new = text.get(self.printed..).unwrap_or_default().to_string();
        self.printed = text.len();
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(text: &str) -> BTreeSet<char> {
        text.chars().collect()
    }

    #[test]
    fn the_character_tokenizer_numbers_characters_by_code_point_after_unknown() {
        let tokenizer = TextTokenizer::characters(&chars("ba\n é")).expect("builds");
        assert_eq!(tokenizer.vocab_size(), 6);
        // <unk>, '\n', ' ', 'a', 'b', 'é'
        assert_eq!(
            tokenizer.encode("ab é\n").expect("encodes"),
            [3, 4, 2, 5, 1]
        );
        assert_eq!(tokenizer.encode("abc").expect("encodes"), [3, 4, 0]);
        assert_eq!(tokenizer.token_name(5), "é");
        assert_eq!(tokenizer.token_name(0), UNKNOWN);
    }

    #[test]
    fn the_character_tokenizer_round_trips_its_alphabet_through_json() {
        let text = "To be, or not to be:\nthat is the question. Ça va? 東京 🙂";
        let tokenizer = TextTokenizer::characters(&chars(text)).expect("builds");
        let ids = tokenizer.encode(text).expect("encodes");
        assert_eq!(ids.len(), text.chars().count());
        assert_eq!(tokenizer.decode(&ids).expect("decodes"), text);
        let json = tokenizer.to_json().expect("serialises");
        let read = Tokenizer::from_bytes(json.as_bytes()).expect("reads back");
        assert_eq!(
            read.encode_fast(text, false).expect("encodes").get_ids(),
            ids
        );
    }

    #[test]
    fn a_trained_bpe_round_trips_and_streams_whole_characters() {
        let line = "the cat sat on the mat; le chat était là — 猫がいた\n";
        let text = line.repeat(40);
        let tokenizer =
            TextTokenizer::train_bpe(300, std::iter::once(text.clone())).expect("trains");
        assert!(tokenizer.vocab_size() > 256 && tokenizer.vocab_size() <= 300);
        let ids = tokenizer.encode(&text).expect("encodes");
        assert!(ids.len() < text.len() / 2, "{} ids", ids.len());
        assert_eq!(tokenizer.decode(&ids).expect("decodes"), text);
        // Streamed one id at a time, every piece is whole characters and they add up.
        let mut stream = tokenizer.stream();
        let mut streamed = String::new();
        for &id in &ids {
            let piece = stream.push(id).expect("decodes");
            assert!(!piece.contains('\u{fffd}'), "{piece:?}");
            streamed.push_str(&piece);
        }
        assert_eq!(streamed, text);
    }

    #[test]
    fn choices_parse_from_their_names_and_refuse_the_rest() {
        assert_eq!("char".parse(), Ok(TokenizerChoice::Char));
        assert_eq!("bpe:512".parse(), Ok(TokenizerChoice::Bpe(512)));
        assert_eq!(
            "tok/tokenizer.json".parse(),
            Ok(TokenizerChoice::File(PathBuf::from("tok/tokenizer.json")))
        );
        let small = "bpe:100".parse::<TokenizerChoice>().expect_err("too small");
        assert!(small.contains("257"), "{small}");
        let bad = "words".parse::<TokenizerChoice>().expect_err("unknown");
        assert!(bad.contains("char, bpe:N"), "{bad}");
        for choice in [TokenizerChoice::Char, TokenizerChoice::Bpe(400)] {
            let json = serde_json::to_string(&choice).expect("serialises");
            assert_eq!(
                serde_json::from_str::<TokenizerChoice>(&json).ok(),
                Some(choice)
            );
        }
    }
}
