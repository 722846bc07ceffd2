//! A text through a Hugging Face model folder: the folder's `tokenizer.json` encodes it (with
//! the `tokenizers` crate, as the `gpt2` example does), GPT-2 continues it greedily through the
//! key/value cache, and the new ids decode back to text. The reference is the same text through
//! Python's `tokenizers` and transformers' `generate`
//! (`crates/attn-model/tests/data/hf/make_tokenizer.py`).

use std::path::Path;

use attn::model::hf::Gpt2;
use attn::model::{GenerateConfig, Prompt};
use burn::tensor::{Int, Tensor, TensorData};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    text: String,
    ids: Vec<u32>,
    new_ids: Vec<i64>,
    new_text: String,
}

#[test]
fn text_encodes_generates_and_decodes_as_in_transformers() {
    let folder =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/attn-model/tests/data/hf/gpt2_tiny");
    let reference: Reference = serde_json::from_str(
        &std::fs::read_to_string(folder.join("tokenizer_reference.json")).expect("readable"),
    )
    .expect("reference JSON");
    let tokenizer =
        tokenizers::Tokenizer::from_file(folder.join("tokenizer.json")).expect("tokenizer.json");
    let encoding = tokenizer
        .encode(reference.text.as_str(), false)
        .expect("encodes");
    assert_eq!(encoding.get_ids(), reference.ids.as_slice());

    let device = attn::train::backend::device("flex").expect("flex is built");
    let gpt2 = Gpt2::from_pretrained(&folder, &device).expect("loads");
    let ids: Vec<i64> = reference.ids.iter().map(|&id| i64::from(id)).collect();
    let prompt =
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, reference.ids.len()]), &device);
    let config = GenerateConfig::new(reference.new_ids.len());
    let new_ids: Vec<i64> = gpt2
        .generate(Prompt::new(prompt), config)
        .expect("prompt fits")
        .map(|step| step.expect("step").tokens[0].expect("one sequence, never stopped"))
        .collect();
    assert_eq!(new_ids, reference.new_ids);

    let new: Vec<u32> = new_ids.iter().map(|&id| id as u32).collect();
    assert_eq!(
        tokenizer.decode(&new, false).expect("decodes"),
        reference.new_text
    );
}
