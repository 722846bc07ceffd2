//! The attention explorer in a real browser: Chromium, headless, driven through the DevTools
//! protocol. A page of a known attention pattern must draw one line per (query, key, head) at
//! or above the threshold with the weight as its opacity, keep only a token's lines while it is
//! hovered, log nothing to the console and fetch nothing.
//!
//! The test needs Chromium (`.ci/run` installs Debian's `chromium`); where none is installed
//! and `ATTN_BROWSER` is not set, it says so and checks nothing.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use attn_infer::view::{AttentionView, page, quantize};
use headless_chrome::{Browser, LaunchOptions, Tab};

const CHROMIUM: &str = "/usr/bin/chromium";

/// The known pattern: 6 tokens, 2 layers of 3 heads. Head 0 attends each token to itself,
/// head 1 uniformly to the token and every one before it, head 2 nowhere (all zeros); the
/// second layer is the first with heads 0 and 1 swapped.
fn pattern() -> (Vec<String>, Vec<Vec<f32>>) {
    let n = 6;
    let tokens: Vec<String> = ["The", " cat", " sat", " on", " the", " mat"]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let head = |kind: usize| -> Vec<f32> {
        let mut w = vec![0.0; n * n];
        for q in 0..n {
            for k in 0..n {
                w[q * n + k] = match kind {
                    0 if q == k => 1.0,
                    1 if k <= q => 1.0 / (q + 1) as f32,
                    _ => 0.0,
                };
            }
        }
        w
    };
    let layer0: Vec<f32> = [head(0), head(1), head(2)].concat();
    let layer1: Vec<f32> = [head(1), head(0), head(2)].concat();
    (tokens, vec![layer0, layer1])
}

/// A DevTools value as JSON.
fn value(tab: &Tab, script: &str) -> serde_json::Value {
    tab.evaluate(script, false)
        .unwrap_or_else(|e| panic!("evaluating {script}: {e}"))
        .value
        .unwrap_or(serde_json::Value::Null)
}

/// The lines drawn: (head, query, key, opacity).
fn lines(tab: &Tab) -> Vec<(usize, usize, usize, f64)> {
    let json = value(
        tab,
        "JSON.stringify([...document.querySelectorAll('#lines line')].map(l => \
         [+l.dataset.head, +l.dataset.q, +l.dataset.k, +l.getAttribute('stroke-opacity')]))",
    );
    let text = json.as_str().expect("a JSON string");
    let rows: Vec<(usize, usize, usize, f64)> = serde_json::from_str(text).expect("lines");
    rows
}

fn browser() -> Option<Browser> {
    let present = Path::new(CHROMIUM).exists();
    if !present && std::env::var_os("ATTN_BROWSER").is_none() {
        eprintln!("no {CHROMIUM}: the explorer's browser test checks nothing here");
        return None;
    }
    let args: Vec<&OsStr> = [
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    let options = LaunchOptions::default_builder()
        .path(Some(PathBuf::from(CHROMIUM)))
        .sandbox(false)
        .headless(true)
        .args(args)
        .idle_browser_timeout(Duration::from_secs(120))
        .build()
        .expect("launch options");
    Some(Browser::new(options).expect("Chromium starts"))
}

#[test]
fn the_head_view_draws_each_weight_as_a_line_and_hovering_keeps_one_tokens_lines() {
    let Some(browser) = browser() else {
        return;
    };
    let (tokens, layers) = pattern();
    let view = AttentionView::new("self", "Self-attention", tokens.clone(), tokens, 3, &layers)
        .expect("a valid view");
    let file = std::env::temp_dir().join(format!("attn-explorer-{}.html", std::process::id()));
    std::fs::write(&file, page("a known pattern", &[view])).expect("writes the page");

    let tab = browser.new_tab().expect("a tab");
    let messages: Arc<Mutex<Vec<String>>> = Arc::default();
    {
        let messages = Arc::clone(&messages);
        tab.enable_runtime().expect("Runtime.enable");
        tab.add_event_listener(Arc::new(
            move |event: &headless_chrome::protocol::cdp::types::Event| {
                use headless_chrome::protocol::cdp::types::Event;
                match event {
                    Event::RuntimeConsoleAPICalled(call) => {
                        let kind = format!("{:?}", call.params.Type);
                        messages.lock().expect("lock").push(kind);
                    }
                    Event::RuntimeExceptionThrown(thrown) => {
                        messages.lock().expect("lock").push(format!(
                            "exception: {}",
                            thrown.params.exception_details.text
                        ));
                    }
                    _ => {}
                }
            },
        ))
        .expect("listens");
    }
    tab.navigate_to(&format!("file://{}", file.display()))
        .expect("navigates");
    tab.wait_until_navigated().expect("loads");
    let started = Instant::now();
    while value(&tab, "document.body.dataset.ready || ''") != "true" {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the page never became ready: {:?}",
            value(&tab, "document.body.dataset.ready || ''")
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Layer 0, every head, threshold 0.01: 6 diagonal lines, 21 lines of the causal prefix,
    // none of the zero head; each line's opacity is its weight as the page stores it.
    let drawn = lines(&tab);
    assert_eq!(drawn.len(), 6 + 21, "{drawn:?}");
    for &(head, q, k, opacity) in &drawn {
        let weight = match head {
            0 if q == k => 1.0,
            1 if k <= q => 1.0 / (q + 1) as f32,
            _ => panic!("a line for a zero weight: head {head}, {q} → {k}"),
        };
        let expected = f64::from(quantize(weight)) / 255.0;
        assert!(
            (opacity - expected).abs() < 1e-9,
            "head {head}, {q} → {k}: {opacity}"
        );
    }

    // Hovering query 3 keeps its lines only: itself in head 0, keys 0 to 3 in head 1.
    tab.find_element("span.tok.q[data-i='3']")
        .expect("query 3")
        .move_mouse_over()
        .expect("hovers");
    let hovered = lines(&tab);
    assert_eq!(hovered.len(), 5, "{hovered:?}");
    assert!(hovered.iter().all(|&(_, q, _, _)| q == 3), "{hovered:?}");
    // Moving to a key instead keeps the lines into that key: key 5 is read by query 5 alone.
    tab.find_element("span.tok.k[data-i='5']")
        .expect("key 5")
        .move_mouse_over()
        .expect("hovers");
    let into = lines(&tab);
    assert_eq!(into.len(), 2, "{into:?}");
    assert!(
        into.iter().all(|&(_, q, k, _)| (q, k) == (5, 5)),
        "{into:?}"
    );

    // The next layer, by keyboard: its heads 0 and 1 are the first layer's 1 and 0.
    value(
        &tab,
        "document.activeElement && document.activeElement.blur()",
    );
    tab.find_element("h1")
        .expect("the title")
        .move_mouse_over()
        .expect("moves away");
    tab.press_key("ArrowDown").expect("a key");
    let next = lines(&tab);
    assert_eq!(next.len(), 27, "{next:?}");
    assert!(
        next.iter()
            .any(|&(head, q, k, _)| head == 0 && q == 4 && k == 0),
        "head 0 of layer 1 is the uniform one: {next:?}"
    );

    // Nothing was logged, and nothing but the page itself was loaded.
    let resources = value(&tab, "performance.getEntriesByType('resource').length");
    assert_eq!(resources, 0, "the page fetched something");
    let logged = messages.lock().expect("lock").clone();
    assert!(logged.is_empty(), "console: {logged:?}");
    std::fs::remove_file(file).ok();
}
