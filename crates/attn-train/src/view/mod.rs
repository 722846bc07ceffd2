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

pub use collect::{from_model_folder, from_run};

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
    TEMPLATE.replacen("__ATTN_DATA__", &json, 1)
}

/// Writes `page` to `path` through a temporary file beside it and a rename. An existing file
/// is replaced only if it is an explorer page itself: nothing else is overwritten.
///
/// # Errors
///
/// [`TrainError::Config`](crate::TrainError::Config) for an existing file that is not a page,
/// [`TrainError::Io`](crate::TrainError::Io) when writing fails.
pub fn write_page(path: &std::path::Path, page: &str) -> Result<(), crate::TrainError> {
    use crate::TrainError;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let ours = meta.is_file()
            && crate::text::read_bounded(path, 1 << 30)
                .is_ok_and(|bytes| bytes.windows(MARK.len()).any(|w| w == MARK.as_bytes()));
        if !ours {
            return Err(TrainError::Config(format!(
                "{} exists and is not an explorer page; give another --out",
                path.display()
            )));
        }
    }
    Ok(crate::files::write_atomically(path, page.as_bytes())?)
}

/// What every page holds, and other files do not: its data element.
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
}
