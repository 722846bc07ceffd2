//! The attention explorer: one self-contained HTML page of a model's attention on a text, with
//! bertviz's head view (two columns of tokens, a line per query and key weighted by attention,
//! a colour per head) and model view (a thumbnail per layer and head), and for an
//! encoder-decoder a cross-attention view. Everything is inside the file: the page
//! (`explorer.html`), its script and styles, and the weights; it opens without a network.
//!
//! The weights are quantised to one byte each (`round(255 · w)`, so a line's opacity is within
//! 1/510 of the weight) and deflated: most weights of a trained model are near zero, and 512
//! tokens × 12 layers × 12 heads of GPT-2 small take a few megabytes instead of 150 as JSON
//! numbers. The page inflates them with the browser's own `DecompressionStream`.
//!
//! [`from_run`] and [`from_model_folder`] collect the weights of a run folder's model and of a
//! Hugging Face folder (GPT-2, BERT, or the Llama family); [`page`] writes the file.

use std::io::Write;

use base64::Engine;
use serde::Serialize;

mod collect;

pub use collect::{check_tokens, from_model_folder, from_run};

/// The page, with `__ATTN_DATA__` where the data goes.
const TEMPLATE: &str = include_str!("explorer.html");

/// The most bytes of weights a page holds before compression (512 tokens, 12 layers and 12
/// heads is 37.7 million).
pub const MAX_WEIGHTS: usize = 1 << 28;

/// One kind of attention of a model on a text: every layer's and head's weights from each
/// query token to each key token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttentionView {
    /// A short id: `self`, `encoder`, `decoder` or `cross`.
    pub name: String,
    /// The view's tab.
    pub label: String,
    /// The attending tokens (rows).
    pub queries: Vec<String>,
    /// The attended tokens (columns); the same as `queries` for self-attention.
    pub keys: Vec<String>,
    /// Layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// `[layer][head][query][key]`, each weight as `round(255 · w)`.
    #[serde(skip)]
    pub weights: Vec<u8>,
}

/// Why a page cannot be written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ViewError {
    /// A layer whose weights are not `heads × queries × keys`.
    #[error(
        "layer {layer} of the {view} view has {got} weights, not heads × queries × keys = \
         {heads} × {queries} × {keys}"
    )]
    Shape {
        /// The view.
        view: String,
        /// The layer.
        layer: usize,
        /// Weights given.
        got: usize,
        /// Heads.
        heads: usize,
        /// Queries.
        queries: usize,
        /// Keys.
        keys: usize,
    },
    /// More weights than a page holds.
    #[error(
        "the {view} view has {weights} weights, more than the {max} a page holds; give a \
         shorter text"
    )]
    TooLarge {
        /// The view.
        view: String,
        /// Its weights.
        weights: usize,
        /// [`MAX_WEIGHTS`].
        max: usize,
    },
    /// A weight that is not a number in [0, 1].
    #[error("the {view} view's weight {value} (layer {layer}) is not a number in [0, 1]")]
    NotAWeight {
        /// The view.
        view: String,
        /// The layer.
        layer: usize,
        /// The value.
        value: String,
    },
}

impl AttentionView {
    /// A view of `layers`, each `[heads, queries, keys]` row-major weights in [0, 1].
    ///
    /// # Errors
    ///
    /// [`ViewError`] for a layer of the wrong size, a weight outside [0, 1] (NaN included),
    /// or more than [`MAX_WEIGHTS`] weights.
    pub fn new(
        name: &str,
        label: &str,
        queries: Vec<String>,
        keys: Vec<String>,
        heads: usize,
        layers: &[Vec<f32>],
    ) -> Result<Self, ViewError> {
        let size = heads
            .checked_mul(queries.len())
            .and_then(|n| n.checked_mul(keys.len()))
            .unwrap_or(usize::MAX);
        let total = size.saturating_mul(layers.len().max(1));
        if total > MAX_WEIGHTS {
            return Err(ViewError::TooLarge {
                view: name.into(),
                weights: total,
                max: MAX_WEIGHTS,
            });
        }
        let mut weights = Vec::with_capacity(total);
        for (layer, values) in layers.iter().enumerate() {
            if values.len() != size {
                return Err(ViewError::Shape {
                    view: name.into(),
                    layer,
                    got: values.len(),
                    heads,
                    queries: queries.len(),
                    keys: keys.len(),
                });
            }
            // A softmax may round a hair past 1.
            if let Some(bad) = values.iter().find(|w| !(0.0..=1.0 + 1e-5).contains(*w)) {
                return Err(ViewError::NotAWeight {
                    view: name.into(),
                    layer,
                    value: bad.to_string(),
                });
            }
            weights.extend(values.iter().map(|w| quantize(*w)));
        }
        Ok(Self {
            name: name.into(),
            label: label.into(),
            queries,
            keys,
            layers: layers.len(),
            heads,
            weights,
        })
    }
}

/// A weight in [0, 1] as the byte `round(255 · w)`.
pub fn quantize(weight: f32) -> u8 {
    (weight.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// The page of `views` under `title`: the explorer with its data inside.
pub fn page(title: &str, views: &[AttentionView]) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        title: &'a str,
        views: Vec<ViewData<'a>>,
    }
    #[derive(Serialize)]
    struct ViewData<'a> {
        #[serde(flatten)]
        view: &'a AttentionView,
        weights: String,
    }
    let data = Data {
        title,
        views: views
            .iter()
            .map(|view| ViewData {
                view,
                weights: base64::engine::general_purpose::STANDARD.encode(deflate(&view.weights)),
            })
            .collect(),
    };
    let json = serde_json::to_string(&data).expect("strings and numbers serialise");
    // No `<` inside the script element, so no text can close it.
    let json = json.replace('<', "\\u003c");
    seal(&TEMPLATE.replacen("__ATTN_DATA__", &json, 1))
}

/// Writes `page` to `path` through a temporary file beside it and a rename. An existing file
/// is replaced only if this program wrote it: a page that ends in its seal
/// ([`is_sealed_page`]). Nothing else is overwritten: not a link, not a folder, not a file
/// that merely holds the page's markup.
///
/// # Errors
///
/// [`TrainError::Config`](attn_train::TrainError::Config) for an existing path that is not
/// such a page, [`TrainError::Io`](attn_train::TrainError::Io) when writing fails.
pub fn write_page(path: &std::path::Path, page: &str) -> Result<(), attn_train::TrainError> {
    check_out(path)?;
    Ok(attn_train::files::write_atomically(path, page.as_bytes())?)
}

/// Refuses an output path that [`write_page`] may not write: an existing link, folder or file
/// that is not a sealed page. Called before any work, so that a run is not lost to a bad
/// `--out`.
///
/// # Errors
///
/// [`TrainError::Config`](attn_train::TrainError::Config) naming the path and what it is.
pub fn check_out(path: &std::path::Path) -> Result<(), attn_train::TrainError> {
    use attn_train::TrainError;
    let refuse = |what: &str| {
        Err(TrainError::Config(format!(
            "{} exists and is {what}; give another --out",
            path.display()
        )))
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        return refuse("a link");
    }
    if meta.is_dir() {
        return refuse("a folder");
    }
    if !meta.is_file() {
        return refuse("not a regular file");
    }
    // A page is at most a few hundred megabytes; a larger file is not one.
    match attn_train::text::read_bounded(path, 1 << 30) {
        Ok(bytes) if is_sealed_page(&bytes) => Ok(()),
        _ => refuse("not a page this program wrote (its seal is missing or does not match)"),
    }
}

/// The seal's opening: the page ends with `<!-- attn-page sha256:HEX -->` and a newline,
/// where `HEX` is the SHA-256 of every byte before the seal.
const SEAL: &str = "<!-- attn-page sha256:";

/// `page` with its seal appended.
fn seal(page: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(page.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{page}{SEAL}{hex} -->\n")
}

/// Whether `bytes` are a page as [`page`] writes it: they hold the data element, and end in a
/// seal whose checksum is that of every byte before it.
pub fn is_sealed_page(bytes: &[u8]) -> bool {
    use sha2::Digest;
    let Some(at) = bytes
        .windows(SEAL.len())
        .rposition(|w| w == SEAL.as_bytes())
    else {
        return false;
    };
    let (body, tail) = bytes.split_at(at);
    let Some(hex) = tail[SEAL.len()..].strip_suffix(b" -->\n") else {
        return false;
    };
    let digest = sha2::Sha256::digest(body);
    let expected: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex == expected.as_bytes() && body.windows(MARK.len()).any(|w| w == MARK.as_bytes())
}

/// What every page holds: its data element.
const MARK: &str = r#"<script id="attn-data" type="application/json">"#;

/// `bytes` as a zlib stream (RFC 1950), what the browser's `DecompressionStream('deflate')`
/// reads.
fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    encoder
        .write_all(bytes)
        .expect("writing into memory does not fail");
    encoder.finish().expect("writing into memory does not fail")
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    /// The data of a page, read back as the browser reads it.
    fn data_of(page: &str) -> serde_json::Value {
        let start = page
            .find(r#"<script id="attn-data" type="application/json">"#)
            .expect("the data element")
            + r#"<script id="attn-data" type="application/json">"#.len();
        let end = start + page[start..].find("</script>").expect("closed");
        serde_json::from_str(&page[start..end]).expect("JSON")
    }

    #[test]
    fn a_page_holds_its_weights_quantised_and_deflated_and_its_tokens_escaped() {
        let tokens = vec![
            "a".to_string(),
            "</script><b>".to_string(),
            "\n".to_string(),
        ];
        // One layer of two heads over three tokens.
        let layer: Vec<f32> = vec![
            1.0,
            0.0,
            0.0,
            0.5,
            0.5,
            0.0,
            0.2,
            0.3,
            0.5, // head 0
            0.0,
            0.0,
            1.0,
            0.1,
            0.0,
            0.9,
            1.0 / 3.0,
            1.0 / 3.0,
            1.0 / 3.0, // head 1
        ];
        let view = AttentionView::new(
            "self",
            "Self-attention",
            tokens.clone(),
            tokens,
            2,
            std::slice::from_ref(&layer),
        )
        .expect("valid");
        let page = page("a <title>", &[view]);
        assert_eq!(
            page.matches("</script>").count(),
            TEMPLATE.matches("</script>").count()
        );
        assert!(!page.contains("__ATTN_DATA__"));
        let data = data_of(&page);
        assert_eq!(data["title"], "a <title>");
        let view = &data["views"][0];
        assert_eq!(view["queries"][1], "</script><b>");
        assert_eq!(
            (view["layers"].as_u64(), view["heads"].as_u64()),
            (Some(1), Some(2))
        );
        let deflated = base64::engine::general_purpose::STANDARD
            .decode(view["weights"].as_str().expect("base64"))
            .expect("decodes");
        let mut bytes = Vec::new();
        flate2::read::ZlibDecoder::new(&deflated[..])
            .read_to_end(&mut bytes)
            .expect("inflates");
        assert_eq!(bytes.len(), layer.len());
        for (byte, weight) in bytes.iter().zip(&layer) {
            assert!(
                (f32::from(*byte) / 255.0 - weight).abs() <= 0.5 / 255.0 + 1e-6,
                "{byte} {weight}"
            );
        }
    }

    #[test]
    fn views_of_the_wrong_size_or_with_non_weights_are_refused() {
        let err = AttentionView::new("self", "", names(2), names(2), 2, &[vec![0.5; 7]])
            .expect_err("8 weights needed");
        assert!(err.to_string().contains("has 7 weights"), "{err}");
        let err = AttentionView::new("self", "", names(1), names(2), 1, &[vec![0.5, f32::NAN]])
            .expect_err("NaN");
        assert!(matches!(err, ViewError::NotAWeight { .. }), "{err}");
        let err = AttentionView::new("self", "", names(1 << 10), names(1 << 10), 1 << 10, &[])
            .expect_err("too large");
        assert!(matches!(err, ViewError::TooLarge { .. }), "{err}");
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("attn-view-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    }

    #[test]
    fn only_a_sealed_page_is_replaced_and_every_other_file_is_kept() {
        let dir = scratch("seal");
        let view = AttentionView::new("self", "Self", names(2), names(2), 1, &[vec![0.5; 4]])
            .expect("a view");
        let page = page("t", std::slice::from_ref(&view));
        assert!(is_sealed_page(page.as_bytes()));
        // A page this program wrote is replaced.
        let ours = dir.join("ours.html");
        std::fs::write(&ours, &page).expect("written");
        write_page(&ours, &page).expect("a sealed page is replaced");
        // A notes file that merely holds the page's data element is kept, byte for byte.
        let notes = dir.join("notes.html");
        let text = format!("my notes\n{MARK}\nmore notes\n");
        std::fs::write(&notes, &text).expect("written");
        let err = write_page(&notes, &page).expect_err("not a page");
        assert!(err.to_string().contains("notes.html"), "{err}");
        assert_eq!(std::fs::read_to_string(&notes).expect("kept"), text);
        // So is a copy of the page's own template, and a page whose data was edited.
        let template = dir.join("template.html");
        std::fs::write(&template, TEMPLATE).expect("written");
        write_page(&template, &page).expect_err("the template is not a page");
        assert_eq!(std::fs::read_to_string(&template).expect("kept"), TEMPLATE);
        let edited = dir.join("edited.html");
        let tampered = page.replacen("\"title\":\"t\"", "\"title\":\"u\"", 1);
        assert_ne!(tampered, page);
        std::fs::write(&edited, &tampered).expect("written");
        write_page(&edited, &page).expect_err("the seal no longer matches");
        assert_eq!(std::fs::read_to_string(&edited).expect("kept"), tampered);
        // A folder and a link are refused.
        let err = write_page(&dir, &page).expect_err("a folder");
        assert!(err.to_string().contains("a folder"), "{err}");
        let link = dir.join("link.html");
        std::os::unix::fs::symlink(&ours, &link).expect("linked");
        let err = write_page(&link, &page).expect_err("a link");
        assert!(err.to_string().contains("a link"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
