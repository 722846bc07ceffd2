//! One way from a model folder to a model, whatever its family, as transformers'
//! `AutoModel` reads `config.json`'s `model_type` and picks the class.
//!
//! ```text
//! model_type                          family            model
//! "gpt2"                              Family::Gpt2      Gpt2 (a decoder)
//! "bert"                              Family::Bert      Bert (an encoder)
//! "llama" "qwen2" "qwen3" "mistral"   Family::Llama(_)  CausalLm (a decoder)
//! ```
//!
//! The program, the explorer and the bench all load through [`AutoModel`], so a new family is
//! added here, in one place.

use std::path::Path;

use burn::tensor::{DType, Device};
use serde::Deserialize;

use super::{Architecture, Bert, CausalLm, Gpt2, read_config};
use crate::error::{ConfigError, ModelError};
use crate::token_decoder::TokenDecoder;

/// The families a folder may hold, by `config.json`'s `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `"gpt2"`: `GPT2LMHeadModel`.
    Gpt2,
    /// `"bert"`: `BertModel`, an encoder.
    Bert,
    /// `"llama"`, `"qwen2"`, `"qwen3"`, `"mistral"`: the Llama family's causal models.
    Llama(Architecture),
}

/// Every `model_type` [`Family::of_model_type`] reads, for messages.
pub const MODEL_TYPES: &str = "\"gpt2\", \"bert\", \"llama\", \"qwen2\", \"qwen3\" or \"mistral\"";

impl Family {
    /// The family of a `model_type`.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] naming the type and the types this crate reads.
    pub fn of_model_type(model_type: &str) -> Result<Self, ModelError> {
        match model_type {
            "gpt2" => Ok(Self::Gpt2),
            "bert" => Ok(Self::Bert),
            other => Architecture::from_model_type(other)
                .map(Self::Llama)
                .map_err(|_| {
                    ConfigError::Unsupported {
                        key: "model_type",
                        value: format!("{other:?}"),
                        supported: MODEL_TYPES,
                    }
                    .into()
                }),
        }
    }

    /// The family of the model in `folder`, from its `config.json`.
    ///
    /// # Errors
    /// As [`read_config`] and [`of_model_type`](Self::of_model_type).
    pub fn of_folder(folder: &Path) -> Result<Self, ModelError> {
        #[derive(Deserialize)]
        struct ModelType {
            model_type: String,
        }
        let ModelType { model_type } = read_config(folder)?;
        Self::of_model_type(&model_type)
    }

    /// `config.json`'s `model_type` of this family.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Gpt2 => "gpt2",
            Self::Bert => "bert",
            Self::Llama(Architecture::Llama) => "llama",
            Self::Llama(Architecture::Qwen2) => "qwen2",
            Self::Llama(Architecture::Qwen3) => "qwen3",
            Self::Llama(Architecture::Mistral) => "mistral",
        }
    }

    /// Whether the family writes text: every family but BERT's.
    pub fn is_decoder(self) -> bool {
        self != Self::Bert
    }

    /// Whether its matrices can be held in a half-precision type (the Llama family's loader
    /// keeps them; GPT-2's and BERT's read every weight as f32).
    pub fn holds_half_precision(self) -> bool {
        matches!(self, Self::Llama(_))
    }
}

/// A model folder's model, of whichever family it holds.
#[derive(Debug)]
pub enum AutoModel {
    /// A GPT-2 folder.
    Gpt2(Gpt2),
    /// A BERT folder.
    Bert(Bert),
    /// A Llama-family folder, with its architecture.
    Llama(Architecture, CausalLm),
}

impl AutoModel {
    /// Loads the model in `folder` with every weight in f32.
    ///
    /// # Errors
    /// As [`from_pretrained_as`](Self::from_pretrained_as).
    pub fn from_pretrained(folder: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        Self::from_pretrained_as(folder, device, DType::F32)
    }

    /// Loads the model in `folder`, its matrices held as `dtype` where the family can hold them
    /// so ([`Family::holds_half_precision`]).
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] for a `model_type` this crate does not read, or a
    /// half-precision `dtype` for a family that loads in f32 only; else the family's loader's
    /// errors.
    pub fn from_pretrained_as(
        folder: impl AsRef<Path>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, ModelError> {
        let folder = folder.as_ref();
        let family = Family::of_folder(folder)?;
        if dtype != DType::F32 && !family.holds_half_precision() {
            return Err(ConfigError::Unsupported {
                key: "dtype",
                value: format!("{dtype:?} for model_type \"{}\"", family.model_type()),
                supported: "F32 for gpt2 and bert folders",
            }
            .into());
        }
        Ok(match family {
            Family::Gpt2 => Self::Gpt2(Gpt2::from_pretrained(folder, device)?),
            Family::Bert => Self::Bert(Bert::from_pretrained(folder, device)?),
            Family::Llama(architecture) => Self::Llama(
                architecture,
                CausalLm::from_pretrained_as(folder, device, dtype)?,
            ),
        })
    }

    /// The family of this model.
    pub fn family(&self) -> Family {
        match self {
            Self::Gpt2(_) => Family::Gpt2,
            Self::Bert(_) => Family::Bert,
            Self::Llama(architecture, _) => Family::Llama(*architecture),
        }
    }

    /// The decoder that writes text, or `None` for an encoder (BERT).
    pub fn decoder(&self) -> Option<&TokenDecoder> {
        match self {
            Self::Gpt2(model) => Some(model.decoder()),
            Self::Llama(_, model) => Some(model.model()),
            Self::Bert(_) => None,
        }
    }

    /// The decoder that writes text, or the model back for an encoder (BERT).
    ///
    /// # Errors
    /// The model itself, when it is an encoder.
    pub fn into_decoder(self) -> Result<TokenDecoder, Box<Self>> {
        match self {
            Self::Gpt2(model) => Ok(model.into_model()),
            Self::Llama(_, model) => Ok(model.into_model()),
            bert @ Self::Bert(_) => Err(Box::new(bert)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_type_names_its_family_and_back() {
        for model_type in ["gpt2", "bert", "llama", "qwen2", "qwen3", "mistral"] {
            let family = Family::of_model_type(model_type).expect("a family");
            assert_eq!(family.model_type(), model_type);
            assert_eq!(family.is_decoder(), model_type != "bert");
        }
    }

    #[test]
    fn an_unknown_model_type_is_named_with_the_types_read() {
        let error = Family::of_model_type("t5").expect_err("t5 is not read");
        let message = error.to_string();
        assert!(message.contains("\"t5\""), "{message}");
        assert!(message.contains("\"mistral\""), "{message}");
    }
}
