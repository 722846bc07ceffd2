//! The model a run trains, one of three shapes, chosen by the task ([`Architecture`]):
//!
//! ```text
//! Encoder          TokenEncoder(tokens)                   one class per position, argmax
//! Decoder          TokenDecoder(text[..-1])               next token at each position
//! EncoderDecoder   EncoderDecoder(source, target[..-1])   next target token, reading the source
//! ```
//!
//! Training is the same for all three: teacher-forced logits `[batch, seq_len, n_classes]`
//! and the cross-entropy of [`crate::loss`] on the scored positions. Evaluation differs: the
//! encoder's predictions are the argmax of the same logits, while the decoders' answers are
//! generated, greedily, through the key/value cache, from the prompt alone, so a wrong digit
//! early on is fed back as the model would feed it at use.

use attn_model::{
    EncoderDecoder, EncoderDecoderInput, GenerateConfig, Prompt, TokenDecoder, TokenDecoderInput,
    TokenEncoder, TokenEncoderInput,
};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::tasks::{Architecture, Batch, IGNORED, TaskConfig};

/// The trained model.
// One model per run, built once and moved only through the optimizer's step: the size of the
// largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Model {
    /// A token classifier (`copy`, `reverse`, `sort`, `context`).
    Encoder(TokenEncoder),
    /// A decoder-only language model (`add`).
    Decoder(TokenDecoder),
    /// An encoder and a decoder with cross-attention (`translate`).
    EncoderDecoder(EncoderDecoder),
}

impl Model {
    /// The model `config` describes, freshly initialised on `device`.
    ///
    /// # Errors
    ///
    /// [`TrainError::Model`] when the sizes do not fit.
    pub fn init(config: &TrainConfig, device: &Device) -> Result<Self, TrainError> {
        Ok(match config.task.kind.architecture() {
            Architecture::Encoder => Self::Encoder(config.encoder_config().init(device)?),
            Architecture::Decoder => Self::Decoder(config.decoder_config().init(device)?),
            Architecture::EncoderDecoder => {
                Self::EncoderDecoder(config.encoder_decoder_config().init(device)?)
            }
        })
    }

    /// Which of the three it is.
    pub fn architecture(&self) -> Architecture {
        match self {
            Self::Encoder(_) => Architecture::Encoder,
            Self::Decoder(_) => Architecture::Decoder,
            Self::EncoderDecoder(_) => Architecture::EncoderDecoder,
        }
    }

    /// Teacher-forced logits of every position of `batch`: what training and the held-out
    /// loss score.
    ///
    /// # Shapes
    ///
    /// - batch: tokens `[batch, seq_len]`, source `[batch, source_len]`
    /// - output: `[batch, seq_len, n_classes]`
    ///
    /// # Errors
    ///
    /// [`TrainError::Model`] when the model cannot run on the batch.
    pub fn logits(&self, batch: &Batch, device: &Device) -> Result<Tensor<3>, TrainError> {
        let tokens = batch.tokens_tensor(device);
        Ok(match self {
            Self::Encoder(model) => model.try_forward(TokenEncoderInput::new(tokens))?.logits,
            Self::Decoder(model) => model.try_forward(TokenDecoderInput::new(tokens))?.logits,
            Self::EncoderDecoder(model) => {
                let input = EncoderDecoderInput::new(batch.source_tensor(device), tokens);
                model.try_forward(input)?.logits
            }
        })
    }

    /// What the model predicts at every position of `batch`, `[batch, seq_len]` row-major:
    /// the argmax of `logits` (its [`logits`](Self::logits) on `batch`) for the encoder and for
    /// the `text` task's decoder; for the other decoders, which ignore `logits`, the answer generated greedily from the first
    /// `task.prompt_len()` tokens of each row, placed where the targets hold it (every other
    /// position [`IGNORED`]).
    ///
    /// # Shapes
    ///
    /// - logits: `[batch, seq_len, n_classes]`
    ///
    /// # Errors
    ///
    /// [`TrainError::Model`] when the model cannot run, [`TrainError::Config`] when results
    /// cannot be read back from the device.
    pub fn predictions(
        &self,
        task: &TaskConfig,
        batch: &Batch,
        logits: Tensor<3>,
        device: &Device,
    ) -> Result<Vec<i64>, TrainError> {
        // The encoder classifies every position; a decoder of a task without answers (`text`)
        // predicts the next token at every position.
        if matches!(self, Self::Encoder(_)) || task.answer_len() == 0 {
            let predictions = logits.argmax(2).squeeze_dim::<2>(2); // [batch, seq_len]
            return predictions
                .into_data()
                .try_into_vec_as::<i64>()
                .map_err(|e| TrainError::Config(format!("cannot read predictions back: {e:?}")));
        }
        let answers = self.generate_answers(task, batch, device)?;
        let start = task.prompt_len() - 1;
        let mut predictions = vec![IGNORED as i64; batch.batch * batch.seq_len];
        for (row, answer) in predictions.chunks_mut(batch.seq_len).zip(answers) {
            for (slot, token) in row[start..].iter_mut().zip(answer) {
                *slot = token;
            }
        }
        Ok(predictions)
    }

    /// Each row's answer, `task.answer_len()` tokens generated greedily with the key/value
    /// cache from the row's prompt (and, for the encoder-decoder, its source).
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] for the encoder, which does not generate; [`TrainError::Model`]
    /// when generation fails.
    pub fn generate_answers(
        &self,
        task: &TaskConfig,
        batch: &Batch,
        device: &Device,
    ) -> Result<Vec<Vec<i64>>, TrainError> {
        let prompt_len = task.prompt_len();
        let prompts: Vec<i64> = (0..batch.batch)
            .flat_map(|b| batch.sequence(b)[..prompt_len].iter().copied())
            .collect();
        let prompt = Prompt::new(Tensor::<2, Int>::from_data(
            TensorData::new(prompts, [batch.batch, prompt_len]),
            device,
        ));
        let config = GenerateConfig::new(task.answer_len());
        Ok(match self {
            Self::Encoder(_) => {
                return Err(TrainError::Config(format!(
                    "the {} task trains an encoder, which does not generate",
                    task.kind
                )));
            }
            Self::Decoder(model) => model.generate(prompt, config)?.tokens()?,
            Self::EncoderDecoder(model) => model
                .generate(batch.source_tensor(device), None, prompt, config)?
                .tokens()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;

    use super::*;
    use crate::random::Rng;
    use crate::tasks::{Split, TaskKind};

    fn tiny(kind: TaskKind, device: &str) -> TrainConfig {
        let mut config = TrainConfig::default();
        config.task.kind = kind;
        config.task.digits = 2;
        config.task.seq_len = 5;
        config.model.d_model = 12;
        config.model.n_heads = 3;
        config.model.n_layers = 1;
        config.model.d_ff = 20;
        config.device = device.to_string();
        config
    }

    /// Greedy decoding without the cache: the argmax of a full forward over the prefix,
    /// appended one token at a time.
    fn full_forward_answers(
        model: &Model,
        task: &TaskConfig,
        batch: &Batch,
        device: &Device,
    ) -> Vec<Vec<i64>> {
        (0..batch.batch)
            .map(|b| {
                let mut text = batch.sequence(b)[..task.prompt_len()].to_vec();
                for _ in 0..task.answer_len() {
                    let len = text.len();
                    let row = Batch {
                        batch: 1,
                        seq_len: len,
                        tokens: text.clone(),
                        targets: vec![0; len],
                        source_len: batch.source_len,
                        source: batch.source_sequence(b).to_vec(),
                    };
                    let logits = model.logits(&row, device).expect("runs"); // [1, len, vocab]
                    let [_, _, vocab] = logits.dims();
                    let last = logits.narrow(1, len - 1, 1).reshape([vocab]); // [vocab]
                    let next = last
                        .argmax(0)
                        .into_data()
                        .try_into_vec_as::<i64>()
                        .expect("ids");
                    text.push(next[0]);
                }
                text[task.prompt_len()..].to_vec()
            })
            .collect()
    }

    #[test]
    fn generated_answers_agree_with_the_argmax_of_a_full_forward() {
        for_each_device(|d| {
            for kind in [TaskKind::Add, TaskKind::Translate] {
                let config = tiny(kind, d.name);
                d.device.seed(7);
                let model = Model::init(&config, &d.device).expect("valid");
                let batch = config.task.batch_from(Split::HeldOut, 3, &mut Rng::new(8));
                let cached = model
                    .generate_answers(&config.task, &batch, &d.device)
                    .expect("generates");
                let full = full_forward_answers(&model, &config.task, &batch, &d.device);
                assert_eq!(cached, full, "{kind}");
                assert!(cached.iter().all(|a| a.len() == config.task.answer_len()));
            }
        });
    }

    #[test]
    fn encoder_runs_do_not_generate() {
        let d = &attn_testing::devices()[0];
        let config = tiny(TaskKind::Reverse, d.name);
        let model = Model::init(&config, &d.device).expect("valid");
        assert_eq!(model.architecture(), Architecture::Encoder);
        let batch = config.task.batch(2, &mut Rng::new(1));
        let err = model
            .generate_answers(&config.task, &batch, &d.device)
            .expect_err("encoder");
        assert!(err.to_string().contains("does not generate"), "{err}");
    }
}
