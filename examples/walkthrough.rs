//! cargo run --release --example walkthrough -- --device flex
//!
//! Self-attention on two toy sentences, one step at a time, with every intermediate printed.
//!
//! The word "apple" is ambiguous: a fruit in "we eat a red apple", a company in
//! "apple launched a new phone". Its embedding alone is half one, half the other. One
//! attention step lets it look at its neighbours and come out as mostly fruit in the first
//! sentence and mostly company in the second.
//!
//! The steps follow `Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V`:
//!
//! 1. `Q = X·W_q`, `K = X·W_k`, `V = X·W_v`: each token asks (query), offers a label (key),
//!    and carries content (value);
//! 2. `Q·Kᵀ`: how well every query matches every key ([`scaled_scores`] with scale 1);
//! 3. `/ √d_k`: the same scores, scaled ([`scaled_scores`] with scale `1/√d_k`);
//! 4. `softmax` over each row: weights that sum to 1 ([`safe_softmax`]);
//! 5. `weights · V`: each token's new content, a weighted mix of everyone's values.
//!
//! The program then runs the library's own entry point, [`scaled_dot_product_attention`] with
//! [`Strategy::Explicit`] and `need_weights`, and checks that it gives the same weights and
//! output as the five steps.
//!
//! Two short sections close it:
//!
//! - shuffling the words of the first sentence shuffles the rows of the output and changes
//!   nothing else: attention alone cannot see order (see `docs/positional.md`);
//! - cross-attention: queries from one sequence, keys and values from another, with the same
//!   function (see `docs/self-vs-cross.md`).
//!
//! The embeddings and the three projection matrices are set by hand so that every number can
//! be read: `d_model = 4` features (fruit, company, cue, ambiguous) and `d_k = d_v = 2`.
//! A trained model learns its projections instead (see `examples/train_reverse.rs`).
//!
//! # Arguments
//!
//! - `--device NAME`: the backend (`flex` by default; `ndarray`, `wgpu`, ... when compiled
//!   in with the cargo feature of the same name).

use anyhow::{Context, Result, ensure};
use attn::core::{
    AttentionOptions, Strategy, safe_softmax, scaled_dot_product_attention, scaled_scores,
};
use attn::train::backend;
use burn::tensor::{Device, Tensor, TensorData};
use clap::Parser;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Self-attention on a toy sentence, one step at a time")]
struct Args {
    /// Backend to run on (flex, ndarray, wgpu, vulkan, metal, cuda; as compiled in).
    #[arg(long, default_value_t = backend::default_backend().to_string())]
    device: String,
}

/// Width of a token embedding: fruit, company, cue, ambiguous.
const D_MODEL: usize = 4;
/// Width of a query and of a key.
const D_K: usize = 2;
/// Width of a value: how much fruit, how much company.
const D_V: usize = 2;

/// Hand-set embeddings `[fruit, company, cue, ambiguous]`.
///
/// "cue" marks words that settle what a nearby word means ("eat", "launched"); "ambiguous"
/// marks the word that needs settling. Function words are all zeros: no meaning, no cue.
fn embedding(token: &str) -> Option<[f32; D_MODEL]> {
    Some(match token {
        "we" | "a" | "我" => [0.0, 0.0, 0.0, 0.0],
        "eat" | "吃" => [1.0, 0.0, 1.0, 0.0],
        "red" => [0.8, 0.0, 0.5, 0.0],
        "apple" | "苹果" => [0.5, 0.5, 0.0, 1.0],
        "launched" => [0.0, 1.0, 1.0, 0.0],
        "new" => [0.0, 0.3, 0.3, 0.0],
        "phone" => [0.0, 0.9, 0.8, 0.0],
        _ => return None,
    })
}

/// `W_q`, `[d_model, d_k]`: what each feature makes a token look for.
///
/// An ambiguous word looks for cues (strength 3); a cue looks for the ambiguous word it would
/// settle (strength 2). Fruit and company features ask for nothing.
const W_Q: [[f32; D_K]; D_MODEL] = [[0.0, 0.0], [0.0, 0.0], [0.0, 2.0], [3.0, 0.0]];

/// `W_k`, `[d_model, d_k]`: the label each feature puts on a token, `[is cue, is ambiguous]`.
const W_K: [[f32; D_K]; D_MODEL] = [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]];

/// `W_v`, `[d_model, d_v]`: the content a token hands over, `[fruit, company]`.
const W_V: [[f32; D_V]; D_MODEL] = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]];

fn main() -> Result<()> {
    let args = Args::parse();
    let device = backend::device(&args.device).context("choosing the backend")?;
    println!("Self-attention, step by step, on {}.", args.device);
    println!("Embeddings have d_model = {D_MODEL} features [fruit, company, cue, ambiguous].");
    println!("Projections: d_k = {D_K} ([wants cue, wants ambiguous] · [is cue, is ambiguous]),");
    println!("             d_v = {D_V} ([fruit, company]).");

    let fruit = ["we", "eat", "a", "red", "apple"];
    let company = ["apple", "launched", "a", "new", "phone"];
    let apple_fruit = walk_through(&fruit, &device)?;
    let apple_company = walk_through(&company, &device)?;

    section("\"apple\" before and after attention");
    let alone = embedding("apple").expect("apple has an embedding");
    println!(
        "  embedding alone        fruit {:.3}  company {:.3}",
        alone[0], alone[1]
    );
    println!(
        "  in \"{}\"  fruit {:.3}  company {:.3}",
        fruit.join(" "),
        apple_fruit[0],
        apple_fruit[1]
    );
    println!(
        "  in \"{}\" fruit {:.3}  company {:.3}",
        company.join(" "),
        apple_company[0],
        apple_company[1]
    );

    order_does_not_matter(&fruit, &device)?;
    cross_attention(&["我", "吃", "苹果"], &fruit, &device)?;
    Ok(())
}

/// Runs the five steps on one sentence, prints them, checks them against the library's entry
/// point, and returns the output row of "apple".
fn walk_through(tokens: &[&str], device: &Device) -> Result<Vec<f32>> {
    section(&format!("Sentence: \"{}\"", tokens.join(" ")));
    let x = embed(tokens, device)?; // [seq_len, d_model]
    print_matrix(
        "X, embeddings",
        tokens,
        &["fruit", "company", "cue", "ambig"],
        &x,
    );

    let [q, k, v] = project(x.clone(), device); // each [1, 1, seq_len, d]
    print_matrix(
        "Q = X·W_q  (what I look for)",
        tokens,
        &["w.cue", "w.ambig"],
        &q,
    );
    print_matrix(
        "K = X·W_k  (the label I offer)",
        tokens,
        &["cue", "ambig"],
        &k,
    );
    print_matrix("V = X·W_v  (my content)", tokens, &["fruit", "company"], &v);

    let scores = scaled_scores(q.clone(), k.clone(), 1.0); // [1, 1, seq_len, seq_len]
    print_matrix(
        "Q·Kᵀ, raw scores (row: query, column: key)",
        tokens,
        tokens,
        &scores,
    );
    let scale = 1.0 / (D_K as f64).sqrt();
    let scaled = scaled_scores(q.clone(), k.clone(), scale); // [1, 1, seq_len, seq_len]
    print_matrix(
        &format!("Q·Kᵀ / √d_k = Q·Kᵀ · {scale:.4}"),
        tokens,
        tokens,
        &scaled,
    );
    let weights = safe_softmax(scaled); // [1, 1, seq_len, seq_len]
    print_matrix(
        "softmax(Q·Kᵀ / √d_k), weights (each row sums to 1)",
        tokens,
        tokens,
        &weights,
    );
    let output = weights.clone().matmul(v.clone()); // [1, 1, seq_len, d_v]
    print_matrix(
        "weights · V, output",
        tokens,
        &["fruit", "company"],
        &output,
    );

    // The library's entry point, forced onto the readable path so that it returns the weights.
    let options = AttentionOptions::new()
        .with_strategy(Strategy::Explicit)
        .with_need_weights(true);
    let library = scaled_dot_product_attention(q, k, v, &options);
    let library_weights = library.weights.context("need_weights was set")?;
    let diff_w = max_abs_diff(&weights, &library_weights)?;
    let diff_o = max_abs_diff(&output, &library.context)?;
    println!(
        "scaled_dot_product_attention (explicit, need_weights) agrees: \
         largest difference {diff_w:.1e} in the weights, {diff_o:.1e} in the output"
    );
    ensure!(
        diff_w < 1e-6 && diff_o < 1e-6,
        "the steps and the library disagree"
    );

    let apple = tokens
        .iter()
        .position(|t| *t == "apple")
        .context("the sentence has no apple")?;
    let rows = values(&output)?;
    Ok(rows[apple * D_V..(apple + 1) * D_V].to_vec())
}

/// Shuffles the sentence: the output rows are shuffled the same way and are otherwise equal.
fn order_does_not_matter(tokens: &[&str], device: &Device) -> Result<()> {
    let shuffled: Vec<&str> = [4, 3, 0, 2, 1].iter().map(|&i| tokens[i]).collect();
    section(&format!(
        "Order: \"{}\" against \"{}\"",
        tokens.join(" "),
        shuffled.join(" ")
    ));
    let run = |words: &[&str]| -> Result<Tensor<4>> {
        let [q, k, v] = project(embed(words, device)?, device);
        Ok(safe_softmax(scaled_scores(q, k, 1.0 / (D_K as f64).sqrt())).matmul(v))
    };
    let original = values(&run(tokens)?)?;
    let reordered = values(&run(&shuffled)?)?;
    println!(
        "{:>10}  {:>17}  {:>17}",
        "token", "output in order", "output shuffled"
    );
    for (i, token) in tokens.iter().enumerate() {
        let j = shuffled
            .iter()
            .position(|t| t == token)
            .expect("same words");
        let a = &original[i * D_V..(i + 1) * D_V];
        let b = &reordered[j * D_V..(j + 1) * D_V];
        println!(
            "{token:>10}  {:>8.3}{:>9.3}  {:>8.3}{:>9.3}",
            a[0], a[1], b[0], b[1]
        );
    }
    println!("Same numbers, rows moved: without positional encodings the order is invisible.");
    Ok(())
}

/// Cross-attention: queries from `queries`, keys and values from `memory`.
///
/// For brevity it reuses the self-attention projections; a real cross-attention layer has its
/// own `W_q` (applied to the decoder side) and `W_k`, `W_v` (applied to the encoder side).
fn cross_attention(queries: &[&str], memory: &[&str], device: &Device) -> Result<()> {
    section(&format!(
        "Cross-attention: queries from \"{}\", keys and values from \"{}\"",
        queries.join(" "),
        memory.join(" ")
    ));
    let [q, _, _] = project(embed(queries, device)?, device); // [1, 1, seq_len_q, d_k]
    let [_, k, v] = project(embed(memory, device)?, device); // [1, 1, seq_len_kv, d_k]
    let options = AttentionOptions::new().with_need_weights(true);
    let out = scaled_dot_product_attention(q, k, v, &options);
    let weights = out.weights.context("need_weights was set")?; // [1, 1, seq_len_q, seq_len_kv]
    println!(
        "weights have shape {:?} = [batch, n_heads, seq_len_q, seq_len_kv]",
        weights.dims()
    );
    print_matrix(
        "weights (row: query token, column: key token)",
        queries,
        memory,
        &weights,
    );
    print_matrix("output", queries, &["fruit", "company"], &out.context);
    Ok(())
}

/// The embeddings of a sentence, `[seq_len, d_model]`.
fn embed(tokens: &[&str], device: &Device) -> Result<Tensor<2>> {
    let mut data = Vec::with_capacity(tokens.len() * D_MODEL);
    for token in tokens {
        data.extend(embedding(token).with_context(|| format!("no embedding for {token:?}"))?);
    }
    Ok(Tensor::from_data(
        TensorData::new(data, [tokens.len(), D_MODEL]),
        device,
    ))
}

/// `[X·W_q, X·W_k, X·W_v]`, each lifted to `[batch = 1, n_heads = 1, seq_len, d]` as attention
/// expects.
fn project(x: Tensor<2>, device: &Device) -> [Tensor<4>; 3] {
    let [seq_len, _d_model] = x.dims();
    let matrix = |w: &[[f32; 2]; D_MODEL]| Tensor::<2>::from_floats(*w, device); // [d_model, 2]
    [&W_Q, &W_K, &W_V].map(|w| {
        x.clone()
            .matmul(matrix(w)) // [seq_len, 2]
            .reshape([1, 1, seq_len, 2]) // [1, 1, seq_len, 2]
    })
}

fn values<const D: usize>(t: &Tensor<D>) -> Result<Vec<f32>> {
    t.clone()
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("reading a tensor back: {e:?}"))
}

fn max_abs_diff(a: &Tensor<4>, b: &Tensor<4>) -> Result<f32> {
    let (a, b) = (values(a)?, values(b)?);
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max))
}

fn section(title: &str) {
    println!("\n== {title}");
}

/// Prints a `[.., rows, columns]` tensor with a label per row and per column.
fn print_matrix<const D: usize>(title: &str, rows: &[&str], columns: &[&str], t: &Tensor<D>) {
    let data = values(t).expect("a float tensor reads back as f32");
    println!("\n{title}");
    print!("{:>10}", "");
    for c in columns {
        print!("{}", pad(c, 9));
    }
    println!();
    for (values, label) in data.chunks(columns.len()).zip(rows) {
        print!("{}", pad(label, 10));
        for x in values {
            print!("{x:>9.3}");
        }
        println!();
    }
}

/// Right-aligns `s` in `width` terminal columns, counting a CJK character as two.
fn pad(s: &str, width: usize) -> String {
    let cols: usize = s.chars().map(|c| if c > '\u{2E80}' { 2 } else { 1 }).sum();
    format!("{}{s}", " ".repeat(width.saturating_sub(cols)))
}
