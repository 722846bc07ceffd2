//! `attn view` end to end: pages of Hugging Face GPT-2, BERT and Llama folders and of a trained
//! translate run, read back from the file, and the refusal to write over a file that is not
//! such a page; and the weights the explorer collects from GPT-2, BERT, Llama and Mistral
//! folders against transformers' own attentions.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROGRAM: &str = env!("CARGO_BIN_EXE_attn");

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-view-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creates the test folder");
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(PROGRAM)
        .args(args)
        .output()
        .expect("the program starts")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

/// The JSON data a page holds.
fn data(page: &Path) -> serde_json::Value {
    let html = std::fs::read_to_string(page).expect("the page");
    let open = r#"<script id="attn-data" type="application/json">"#;
    let start = html.find(open).expect("the data element") + open.len();
    let end = start + html[start..].find("</script>").expect("closed");
    serde_json::from_str(&html[start..end]).expect("JSON")
}

#[test]
fn gpt2_bert_and_llama_folders_give_one_view_of_their_tokenizers_tokens() {
    let data_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf");
    for name in ["gpt2_tiny", "bert_tiny", "llama_tiny"] {
        let folder = data_dir.join(name);
        // The tokens transformers' tokenizer gives the text, and the model's shape
        // (view_reference.json).
        let reference: ViewReference = serde_json::from_str(
            &std::fs::read_to_string(folder.join("view_reference.json")).expect("reference"),
        )
        .expect("JSON");
        let dir = temp_dir(name);
        let page = dir.join(format!("{name}.html"));
        let output = run(&[
            "view",
            path(&folder),
            "--text",
            &reference.text,
            "--out",
            path(&page),
        ]);
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let data = data(&page);
        let views = data["views"].as_array().expect("views");
        assert_eq!(views.len(), 1, "{name}");
        let view = &views[0];
        assert_eq!(
            (view["layers"].as_u64(), view["heads"].as_u64()),
            (Some(reference.layers as u64), Some(reference.heads as u64)),
            "{name}"
        );
        assert_eq!(
            view["queries"],
            serde_json::json!(reference.tokens),
            "{name}"
        );
        assert_eq!(view["queries"], view["keys"], "{name}");
        std::fs::remove_dir_all(dir).ok();
    }
    // BERT's tokens carry its special tokens and word pieces.
    let bert: ViewReference = serde_json::from_str(
        &std::fs::read_to_string(data_dir.join("bert_tiny/view_reference.json"))
            .expect("reference"),
    )
    .expect("JSON");
    assert_eq!(
        (
            bert.tokens.first().map(String::as_str),
            bert.tokens.last().map(String::as_str)
        ),
        (Some("[CLS]"), Some("[SEP]"))
    );
}

#[test]
fn a_translate_run_gives_decoder_and_cross_views_and_other_files_are_never_replaced() {
    let dir = temp_dir("translate");
    let out = dir.join("run");
    let train = run(&[
        "train",
        "--task",
        "translate",
        "--seq-len",
        "4",
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--d-model",
        "8",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--d-ff",
        "12",
        "--eval-every",
        "3",
        "--eval-sequences",
        "4",
        "--warmup-steps",
        "1",
        "--quiet",
        "--no-plots",
        "--out",
        path(&out),
    ]);
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let page = dir.join("translate.html");
    let args = [
        "view",
        path(&out),
        "--text",
        "three one four one",
        "--out",
        path(&page),
    ];
    let output = run(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let data = data(&page);
    let names: Vec<&str> = data["views"]
        .as_array()
        .expect("views")
        .iter()
        .map(|v| v["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["decoder", "cross"]);
    let cross = &data["views"][1];
    // The cross view's keys are the source words; its queries what the decoder reads while it
    // writes the 4 digits: the start token and the first 3.
    assert_eq!(
        cross["keys"],
        serde_json::json!(["three", "one", "four", "one"])
    );
    assert_eq!(cross["queries"].as_array().map(Vec::len), Some(4));
    assert_eq!(cross["queries"], data["views"][0]["keys"]);

    // A page is written over; a file that is not one is refused and left as it was.
    assert!(run(&args).status.success());
    let notes = dir.join("notes.html");
    std::fs::write(&notes, "my notes").expect("writes");
    let mut args = args;
    args[5] = path(&notes);
    let refused = run(&args);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a page this program wrote"));
    assert_eq!(std::fs::read_to_string(&notes).expect("notes"), "my notes");
    std::fs::remove_dir_all(dir).ok();
}

/// transformers' attention weights (`output_attentions=True`, eager attention, f32) of a folder
/// on a text, written by `crates/attn-model/tests/data/hf/make_view_reference.py`.
#[derive(serde::Deserialize)]
struct ViewReference {
    text: String,
    tokens: Vec<String>,
    layers: usize,
    heads: usize,
    /// `[layer][head][query][key]`.
    attentions: Vec<Vec<Vec<Vec<f64>>>>,
}

#[test]
fn the_weights_of_gpt2_bert_llama_and_mistral_folders_are_transformers_attentions() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf");
    // mistral_tiny attends through a sliding window of 5 keys.
    for name in ["gpt2_tiny", "bert_tiny", "llama_tiny", "mistral_tiny"] {
        let folder = data.join(name);
        let reference: ViewReference = serde_json::from_str(
            &std::fs::read_to_string(folder.join("view_reference.json")).expect("reference"),
        )
        .expect("JSON");
        attn_testing::for_each_device(|d| {
            let what = format!("{name} on {}", d.name);
            let (_, views) =
                attn_infer::view::from_model_folder(&folder, &reference.text, &d.device)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(views.len(), 1, "{what}");
            let view = &views[0];
            assert_eq!(
                view.queries, reference.tokens,
                "{what}: the tokenizer's tokens"
            );
            assert_eq!(view.keys, reference.tokens, "{what}");
            assert_eq!(
                (view.layers, view.heads),
                (reference.layers, reference.heads),
                "{what}"
            );
            let n = reference.tokens.len();
            assert_eq!(
                view.weights.len(),
                reference.layers * reference.heads * n * n,
                "{what}"
            );
            let mut worst = 0.0f64;
            for (l, layer) in reference.attentions.iter().enumerate() {
                for (h, head) in layer.iter().enumerate() {
                    for (q, row) in head.iter().enumerate() {
                        for (k, &want) in row.iter().enumerate() {
                            let byte = view.weights[((l * reference.heads + h) * n + q) * n + k];
                            // One byte per weight: round(255 · w) is within 1/510 of w.
                            let err = (f64::from(byte) / 255.0 - want).abs();
                            worst = worst.max(err);
                            assert!(
                                err <= 1.0 / 510.0 + 1e-5,
                                "{what}: layer {l} head {h} query {q} key {k}: the page holds \
                                 {byte}/255, transformers gives {want}"
                            );
                        }
                    }
                }
            }
            // The weights are not all near zero or all equal: the check above had work to do.
            let spread = view.weights.iter().max().copied().unwrap_or(0)
                - view.weights.iter().min().copied().unwrap_or(0);
            assert!(spread > 100, "{what}: weights span only {spread}/255");
            eprintln!("{what}: largest difference {worst:.2e}");
        });
    }
}
