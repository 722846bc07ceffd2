//! Fuzz test of the reference-file reader: the workspace's real reference files (`sdpa.json`,
//! `mha.json`, `positional.json`, `encoder_layer.json`, `decoder_layer.json`, and the Hugging
//! Face folders'
//! `reference.json`), mutated, must read or fail with a [`ReferenceError`] naming the file,
//! never panic or abort; a file that reads holds tensors whose data fills their shape.
//!
//! `ATTN_FUZZ_CASES` sets the cases, `ATTN_FUZZ_SEED` the seed:
//! `ATTN_FUZZ_CASES=50000 ATTN_TEST_DEVICES=flex cargo test --workspace --test fuzz -- reference`

use std::path::{Path, PathBuf};

use attn_reference::{
    BertReference, CausalLmReference, DecoderLayerFile, EncoderLayerFile, Gpt2Reference, MhaFile,
    PositionalFile, RefTensor, ReferenceError, ReferenceFile, SdpaFile,
};
use attn_testing::mutate::{self, Mutated};
use burn::tensor::Device;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// The known files: where each lies in a reference folder, and the folder it is copied from.
const FILES: [(&str, &str); 11] = [
    (SdpaFile::PATH, "crates/attn-testing/data"),
    (MhaFile::PATH, "crates/attn-testing/data"),
    (PositionalFile::PATH, "crates/attn-testing/data"),
    (EncoderLayerFile::PATH, "crates/attn-testing/data"),
    (DecoderLayerFile::PATH, "crates/attn-testing/data"),
    (BertReference::PATH, "crates/attn-model/tests/data"),
    (Gpt2Reference::PATH, "crates/attn-model/tests/data"),
    (CausalLmReference::PATH, "crates/attn-model/tests/data"),
    (
        "hf/qwen2_tiny/reference.json",
        "crates/attn-model/tests/data",
    ),
    (
        "hf/qwen3_tiny/reference.json",
        "crates/attn-model/tests/data",
    ),
    (
        "hf/mistral_tiny/reference.json",
        "crates/attn-model/tests/data",
    ),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A mutated file of [`FILES`]: JSON edits mostly, bytes now and then.
fn cases() -> impl Strategy<Value = (usize, Mutated<Vec<u8>>)> {
    let per_file: Vec<_> = FILES
        .iter()
        .enumerate()
        .map(|(i, (path, from))| {
            let bytes = std::fs::read(workspace().join(from).join(path)).expect("a shipped file");
            let text = String::from_utf8(bytes.clone()).expect("UTF-8");
            let json = mutate::json(&text).prop_map(|m| Mutated {
                value: m.value.into_bytes(),
                what: m.what,
            });
            prop_oneof![4 => json, 1 => mutate::bytes(bytes)]
                .prop_map(move |m| (i, m))
                .boxed()
        })
        .collect();
    proptest::strategy::Union::new(per_file)
}

/// A tensor that reads fills its shape, and converts or is refused with a typed error (a value
/// of `1e12` among token ids made burn panic converting it to a backend's 32-bit integers).
#[track_caller]
fn check_tensor(tensor: &RefTensor, device: &Device, what: &str) {
    let values = tensor
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d));
    assert_eq!(
        values,
        Some(tensor.data.len()),
        "{what}: {:?}",
        tensor.shape
    );
    let converted = match tensor.shape.len() {
        1 => tensor
            .try_int_tensor::<1>(device)
            .map(|t| t.dims().to_vec()),
        2 => tensor
            .try_int_tensor::<2>(device)
            .map(|t| t.dims().to_vec()),
        3 => tensor.try_tensor::<3>(device).map(|t| t.dims().to_vec()),
        _ => tensor.try_tensor::<4>(device).map(|t| t.dims().to_vec()),
    };
    match converted {
        Ok(dims) => assert_eq!(dims, tensor.shape, "{what}"),
        Err(err) => assert!(
            matches!(
                err,
                ReferenceError::NotInteger { .. }
                    | ReferenceError::IntegerOutOfRange { .. }
                    | ReferenceError::Rank { .. }
            ),
            "{what}: {err}"
        ),
    }
}

/// Reads the file `i` of [`FILES`] from `dir` with its layout, checking some of its tensors.
fn read(i: usize, dir: &Path, device: &Device, what: &str) -> Result<(), ReferenceError> {
    let model = |path: &str| dir.join(Path::new(path).parent().expect("a folder"));
    match i {
        0 => {
            let file = SdpaFile::read_from(dir)?;
            for case in &file.cases {
                check_tensor(&case.q, device, what);
            }
        }
        1 => {
            MhaFile::read_from(dir)?;
        }
        2 => {
            PositionalFile::read_from(dir)?;
        }
        3 => {
            EncoderLayerFile::read_from(dir)?;
        }
        4 => {
            let file = DecoderLayerFile::read_from(dir)?;
            for case in &file.cases {
                check_tensor(&case.memory_padding, device, what);
                // A name that is not a file beside the reference file is refused by name.
                if let Err(err) = case.weights_path(dir) {
                    assert!(
                        matches!(err, ReferenceError::NotAFileName { .. }),
                        "{what}: {err}"
                    );
                }
            }
        }
        5 => {
            let file = BertReference::from_folder(&model(FILES[i].0))?;
            check_tensor(&file.input_ids, device, what);
        }
        6 => {
            let file = Gpt2Reference::from_folder(&model(FILES[i].0))?;
            check_tensor(&file.batch_ids, device, what);
            let new = file.new_tokens();
            assert!(new.len() <= file.greedy_ids.data.len(), "{what}");
        }
        _ => {
            let file = CausalLmReference::from_folder(&model(FILES[i].0))?;
            check_tensor(&file.batch_attention_mask, device, what);
            let new = file.new_tokens();
            assert!(new.len() <= file.greedy_ids.data.len(), "{what}");
        }
    }
    Ok(())
}

#[test]
fn reference_files_read_or_are_refused_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("attn-reference-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, _) in FILES {
        let folder = dir.join(path);
        std::fs::create_dir_all(folder.parent().expect("a folder")).expect("a scratch folder");
    }
    let device = attn_testing::devices()
        .into_iter()
        .next()
        .expect("a test device")
        .device;
    let mut runner = TestRunner::new(mutate::config(1));
    let result = runner.run(&cases(), |(i, mutated)| {
        let path = dir.join(FILES[i].0);
        std::fs::write(&path, &mutated.value).expect("written");
        let what = format!("{}: {}", FILES[i].0, mutated.what);
        if let Err(err) = read(i, &dir, &device, &what) {
            let message = err.to_string();
            assert!(
                matches!(
                    err,
                    ReferenceError::Read { .. } | ReferenceError::Parse { .. }
                ),
                "{what}: {message}"
            );
            assert!(
                message.contains(&path.display().to_string()),
                "{what}: `{message}` does not name the file"
            );
        }
        std::fs::remove_file(&path).expect("removed");
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
