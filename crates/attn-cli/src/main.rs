//! `attn`: one program for the whole workspace.
//!
//! ```text
//! attn train --task reverse --seed 1              train a model, into runs/reverse
//! attn resume runs/reverse                        continue it from its last checkpoint
//! attn generate runs/add --prompt 123+456=        write with a trained run
//! attn generate SmolLM2-135M --prompt "Gravity"   or with a Hugging Face model folder
//! attn chat SmolLM2-135M-Instruct                 talk to a folder with a chat template
//! attn view gpt2 --text "..." --out heads.html    a page of every head's attention
//! ```
//!
//! `MODEL` is a run folder (written by `attn train`) or a model folder (transformers'
//! `save_pretrained`), told apart by their contents ([`attn_infer::source`]). Every check of
//! the flags and of the output paths comes before a model is loaded.
//!
//! The program parses arguments and prints; the work is `attn-train`'s and `attn-infer`'s.
//!
//! The first SIGINT or SIGTERM during training lets the step under way finish, writes a
//! checkpoint, prints the command that resumes, and exits with status 130; a second one exits
//! at once.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
// It keeps the memory it frees, set first thing in `main`: see `attn_train::allocator`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use attn_infer::folder::{self, FolderModel, Options as FolderOptions, WeightType};
use attn_infer::run::{self as run_generation, Request};
use attn_infer::source::Source;
use attn_infer::view;
use attn_model::Sampling;
use attn_train::config::{Overrides, TrainConfig};
use attn_train::train::{self, RunOptions};
use clap::{Parser, Subcommand, ValueEnum};

/// Transformer attention from first principles: train a model, write and chat with it or with
/// a Hugging Face model folder, and look inside its heads.
#[derive(Parser, Debug)]
#[command(name = "attn", version, about, long_about = None)]
#[command(propagate_version = true, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT's number, as shells
/// report it).
const INTERRUPTED: i32 = 130;

/// The most bytes `view --text` takes: its tokens are bounded again, by the page's size, once
/// counted.
const VIEW_TEXT_MAX_BYTES: usize = 1 << 20;

// One command line is parsed once: the training flags' size is no cost worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Train a Transformer on a synthetic sequence task, or a language model on your own text
    /// (--task text --data FILE).
    Train(TrainArgs),
    /// Continue a run from its last checkpoint, with the configuration saved in it.
    Resume(ResumeArgs),
    /// Write text after a prompt, with a trained run (add, translate, text) or a model folder
    /// (GPT-2, Llama, Qwen2, Qwen3, Mistral), printing it as it comes.
    Generate(GenerateArgs),
    /// Chat with a model folder that has a chat template: the history stays in the key/value
    /// cache from turn to turn, a line ending in \\ continues the message, Ctrl-C stops the
    /// current answer, /reset forgets.
    Chat(ChatArgs),
    /// Write one HTML page (no network needed) of a model's attention on a text: each head's
    /// lines from token to token, every layer and head at a glance.
    View(ViewArgs),
    /// Renders one chat template request from standard input, within a memory cap (the chat's
    /// child process, `attn_infer::render`).
    #[command(name = "render-chat-template", hide = true)]
    RenderChatTemplate,
}

/// The flags of `attn train`: the configuration's overrides, and where the run goes.
#[derive(clap::Args, Debug)]
struct TrainArgs {
    #[command(flatten)]
    overrides: Overrides,
    /// Read the configuration from a JSON file (flags override it).
    #[arg(long, value_name = "FILE.json", help_heading = "Run folder")]
    config: Option<PathBuf>,
    /// Output folder; it must be missing or empty unless --overwrite is given
    /// [default: runs/TASK, the task's name]
    #[arg(long, value_name = "DIR", help_heading = "Run folder")]
    out: Option<PathBuf>,
    /// Reuse a --out folder that is not empty: remove the files that an earlier run listed in
    /// its manifest.json there, and nothing else
    #[arg(long, help_heading = "Run folder")]
    overwrite: bool,
    #[command(flatten)]
    progress: ProgressArgs,
}

/// How far a run goes, and what it shows: shared by `train` and `resume`.
#[derive(clap::Args, Debug)]
struct ProgressArgs {
    /// Stop after this many steps, checkpointing there, as if interrupted [default: the
    /// configured --steps]
    #[arg(long, help_heading = "Loop")]
    stop_at: Option<usize>,
    /// No progress bar.
    #[arg(long, help_heading = "Output")]
    quiet: bool,
    /// Skip the PNG plots.
    #[arg(long, help_heading = "Output")]
    no_plots: bool,
}

/// The flags of `attn resume`.
#[derive(clap::Args, Debug)]
struct ResumeArgs {
    /// The run folder to continue.
    #[arg(value_name = "RUN")]
    run: PathBuf,
    /// Optimizer updates in all, to extend a finished run [default: the run's own]
    #[arg(long, help_heading = "Loop")]
    steps: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    progress: ProgressArgs,
}

/// Where the model runs: shared by every command but `train`, whose `--device` also takes a
/// list of devices for data-parallel replicas.
#[derive(clap::Args, Debug)]
struct DeviceArgs {
    /// Backend, one compiled into this build [default: a run's own; for a model folder flex
    /// where compiled in, else the first backend compiled in]
    #[arg(
        long,
        value_name = "flex|ndarray|wgpu|vulkan|metal|cuda",
        help_heading = "Device"
    )]
    device: Option<String>,
}

/// How a model folder's matrices are held: shared by `generate` and `chat`.
#[derive(clap::Args, Debug)]
struct DtypeArgs {
    /// A model folder: the type its matrices are held in; `auto` is the folder's own (`bf16`
    /// keeps a bfloat16 folder at about its file's size, products in f32)
    #[arg(long, value_enum, default_value = "auto", help_heading = "Device")]
    dtype: Dtype,
}

/// `--dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dtype {
    /// The folder's own type where the device holds it, else f32.
    Auto,
    /// Every weight widened to f32.
    F32,
    /// bfloat16, products accumulating in f32.
    Bf16,
    /// float16, widened for each product.
    F16,
}

impl From<Dtype> for WeightType {
    fn from(dtype: Dtype) -> Self {
        match dtype {
            Dtype::Auto => WeightType::Auto,
            Dtype::F32 => WeightType::F32,
            Dtype::Bf16 => WeightType::Bf16,
            Dtype::F16 => WeightType::F16,
        }
    }
}

/// How the next token is chosen: shared by `generate` and `chat`.
#[derive(clap::Args, Debug)]
struct SamplingArgs {
    /// Sample at this temperature instead of taking the most likely token [default: greedy;
    /// a text run samples at 0.8 from the 200 most likely tokens unless a sampling flag is
    /// given]
    #[arg(long, allow_negative_numbers = true, help_heading = "Sampling")]
    temperature: Option<f64>,
    /// Sample from the k most likely tokens only [default: all; temperature 1 unless given]
    #[arg(long, help_heading = "Sampling")]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability reaches p [default: 1;
    /// temperature 1 unless given]
    #[arg(long, help_heading = "Sampling")]
    top_p: Option<f64>,
    /// A model folder: divide the logits of tokens already present by this (above 1
    /// discourages repeats) [default: none]
    #[arg(long, allow_negative_numbers = true, help_heading = "Sampling")]
    repetition_penalty: Option<f64>,
    /// Seed of the sampling generator.
    #[arg(long, default_value_t = 0, help_heading = "Sampling")]
    seed: u64,
}

impl SamplingArgs {
    /// Greedy, unless a sampling flag is given.
    fn sampling(&self) -> Option<Sampling> {
        let given = self.temperature.is_some() || self.top_k.is_some() || self.top_p.is_some();
        given.then(|| Sampling::Sample {
            temperature: self.temperature.unwrap_or(1.0),
            top_k: self.top_k,
            top_p: self.top_p,
        })
    }

    /// A model folder's options, checked before anything is loaded.
    fn folder_options(&self, max_new_tokens: usize, stop: Vec<String>) -> Result<FolderOptions> {
        let options = FolderOptions {
            max_new_tokens,
            sampling: self.sampling().unwrap_or_default(),
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            stop,
        };
        options.validate()?;
        Ok(options)
    }
}

/// The flags of `attn generate`.
#[derive(clap::Args, Debug)]
struct GenerateArgs {
    /// A run folder (from `attn train`: its newest checkpoint) or a model folder
    /// (config.json, the weights, tokenizer.json).
    #[arg(value_name = "MODEL")]
    model: PathBuf,
    /// add: two numbers, `123+456=`; translate: the run's seq_len digit words, `three one
    /// four ...`; text runs and model folders: any text, `ROMEO:`.
    #[arg(long, required_unless_present = "prompts", conflicts_with = "prompts")]
    prompt: Option<String>,
    /// A model folder: a file of prompts, one per line, answered in batches; one answer per
    /// line.
    #[arg(long, value_name = "FILE")]
    prompts: Option<PathBuf>,
    /// New tokens at most [default: a task's answer length; a text run 200; a model folder
    /// 128]
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// A model folder: end the answer at this text (may be repeated).
    #[arg(long)]
    stop: Vec<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    dtype: DtypeArgs,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The flags of `attn chat`.
#[derive(clap::Args, Debug)]
struct ChatArgs {
    /// A model folder with a chat template (chat_template.jinja or tokenizer_config.json's
    /// chat_template).
    #[arg(value_name = "MODEL")]
    model: PathBuf,
    /// A system message that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    /// New tokens per answer at most.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    dtype: DtypeArgs,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The flags of `attn view`.
#[derive(clap::Args, Debug)]
struct ViewArgs {
    /// A run folder (its newest checkpoint) or a model folder (GPT-2, BERT, Llama, Qwen2, Qwen3
    /// or Mistral: config.json, the weights, tokenizer.json).
    #[arg(value_name = "MODEL")]
    model: PathBuf,
    /// The text: any text for a text run or a model folder, a prompt for add and translate,
    /// the task's tokens separated by spaces for the others.
    #[arg(long)]
    text: String,
    /// The page to write; an existing file is replaced only if this program wrote it.
    #[arg(long, value_name = "FILE.html")]
    out: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, one a line, as anyhow prints them, but each cause whose text the
/// line before already holds left out: an error that prints its source inside its own message
/// would otherwise say the same thing twice.
fn report(error: &anyhow::Error) -> String {
    let mut lines: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !lines.last().is_some_and(|last| last.contains(&text)) {
            lines.push(text);
        }
    }
    let mut out = format!("Error: {}", lines[0]);
    if lines.len() > 1 {
        out.push_str("\n\nCaused by:");
        for line in &lines[1..] {
            out.push_str(&format!("\n    {line}"));
        }
    }
    out
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    // The renderer's memory is capped: what it frees goes back to the system at once.
    #[cfg(feature = "mimalloc")]
    if !matches!(cli.command, Command::RenderChatTemplate) {
        attn_train::allocator::keep_freed_memory();
    }
    match &cli.command {
        Command::Train(args) => run_train(args),
        Command::Resume(args) => run_resume(args),
        Command::Generate(args) => run_generate(args),
        Command::Chat(args) => run_chat(args),
        Command::View(args) => run_view(args),
        Command::RenderChatTemplate => attn_infer::render::serve(),
    }
}

/// A flag that is raised by the first SIGINT or SIGTERM; the second exits at once.
fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let signals = Arc::new(AtomicUsize::new(0));
    let raised = Arc::clone(&interrupt);
    ctrlc::set_handler(move || {
        if signals.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!(
                "\ninterrupted: finishing this step and writing a checkpoint \
                 (interrupt again to quit at once, without one)"
            );
            raised.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(INTERRUPTED);
        }
    })
    .context("installing the SIGINT and SIGTERM handler")?;
    Ok(interrupt)
}

/// The summary folder names a path in JSON, which holds text only: a name that is not UTF-8 is
/// refused now, not after the run has trained and written everything.
fn utf8_folder(flag: &str, path: &Path) -> Result<()> {
    if path.to_str().is_none() {
        bail!(
            "{flag} {} is not valid UTF-8; give a folder whose name is",
            path.display()
        );
    }
    Ok(())
}

fn run_options(progress: &ProgressArgs, interrupt: Arc<AtomicBool>) -> RunOptions {
    RunOptions {
        out: None,
        resume: false,
        stop_at: progress.stop_at,
        progress: !progress.quiet,
        skip_plots: progress.no_plots,
        overwrite: false,
        interrupt: Some(interrupt),
    }
}

/// `attn train`.
fn run_train(args: &TrainArgs) -> Result<()> {
    if let Some(out) = &args.out {
        utf8_folder("--out", out)?;
    }
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_file(path)?,
        None => TrainConfig::default(),
    };
    config.apply(&args.overrides)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(config.task.kind.to_string()));
    let options = RunOptions {
        out: Some(out.clone()),
        overwrite: args.overwrite,
        ..run_options(&args.progress, interrupt_flag()?)
    };
    let summary = train::run(&config, &options)
        .with_context(|| format!("cannot train {} into {}", config.task.kind, out.display()))?;
    finish(&summary, &args.progress)
}

/// `attn resume RUN`.
fn run_resume(args: &ResumeArgs) -> Result<()> {
    utf8_folder("RUN", &args.run)?;
    let overrides = Overrides {
        steps: args.steps,
        device: args.device.device.clone(),
        ..Overrides::default()
    };
    let options = run_options(&args.progress, interrupt_flag()?);
    let summary = train::resume(&args.run, &overrides, &options)
        .with_context(|| format!("cannot resume {}", args.run.display()))?;
    finish(&summary, &args.progress)
}

/// Prints the run's summary, and how to resume an interrupted one.
fn finish(summary: &train::RunSummary, progress: &ProgressArgs) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string(summary).context("serialising the summary")?
    );
    if summary.interrupted {
        let dir = summary.out.as_deref().unwrap_or(Path::new("."));
        match &summary.last_checkpoint {
            Some(checkpoint) => eprintln!(
                "stopped at step {}; checkpoint {}\nresume with: {}",
                summary.steps,
                checkpoint.display(),
                resume_command(dir, progress)
            ),
            None => eprintln!("stopped at step {}; no checkpoint", summary.steps),
        }
        std::process::exit(INTERRUPTED);
    }
    Ok(())
}

/// The command line that continues the run in `dir`, with this one's output flags.
fn resume_command(dir: &Path, progress: &ProgressArgs) -> String {
    let program = std::env::args().next().unwrap_or_else(|| "attn".into());
    let mut words = vec![program, "resume".into(), dir.display().to_string()];
    if progress.quiet {
        words.push("--quiet".into());
    }
    if progress.no_plots {
        words.push("--no-plots".into());
    }
    words
        .iter()
        .map(|w| shell_quoted(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as a POSIX shell reads it back: bare when it is plain, else in single quotes.
fn shell_quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The device a model folder runs on.
fn folder_device(device: &DeviceArgs) -> Result<burn::tensor::Device> {
    let name = device
        .device
        .clone()
        .unwrap_or_else(|| attn_train::backend::default_backend().to_string());
    Ok(attn_train::backend::device(&name)?)
}

/// Streams one answer's pieces to stdout.
fn print_piece(piece: &str) {
    let mut stdout = std::io::stdout();
    let _ = write!(stdout, "{piece}");
    let _ = stdout.flush();
}

/// `attn generate MODEL`.
fn run_generate(args: &GenerateArgs) -> Result<()> {
    match Source::of(&args.model)? {
        Source::Folder(folder) => run_generate_folder(args, &folder),
        Source::Run(run) => run_generate_run(args, &run),
    }
}

/// `attn generate RUN`: streams the new tokens to stdout as they come.
fn run_generate_run(args: &GenerateArgs, run: &Path) -> Result<()> {
    let folder_only = [
        ("--prompts", args.prompts.is_some()),
        ("--stop", !args.stop.is_empty()),
        (
            "--repetition-penalty",
            args.sampling.repetition_penalty.is_some(),
        ),
        ("--dtype", args.dtype.dtype != Dtype::Auto),
    ];
    let given: Vec<&str> = folder_only
        .iter()
        .filter(|(_, given)| *given)
        .map(|(flag, _)| *flag)
        .collect();
    if !given.is_empty() {
        bail!(
            "{} is a run folder; {} apply to model folders only",
            run.display(),
            given.join(", ")
        );
    }
    let prompt = args
        .prompt
        .clone()
        .context("a run folder takes one --prompt")?;
    let request = Request {
        run: run.to_path_buf(),
        prompt,
        max_new_tokens: args.max_new_tokens,
        sampling: args.sampling.sampling(),
        seed: args.sampling.seed,
        device: args.device.device.clone(),
    };
    request.validate()?;
    let generated = run_generation::generate(&request, print_piece)
        .with_context(|| format!("generating from {}", run.display()))?;
    println!();
    if let Some(sum) = generated.sum {
        println!("read back, most significant digit first: {sum}");
    }
    Ok(())
}

/// `attn generate FOLDER`: one prompt streamed, or a file of prompts answered a line each.
fn run_generate_folder(args: &GenerateArgs, folder: &Path) -> Result<()> {
    let options = args
        .sampling
        .folder_options(args.max_new_tokens.unwrap_or(128), args.stop.clone())?;
    folder::decoder_family(folder)?;
    let prompts = match &args.prompts {
        Some(file) => Some(folder::read_prompts(file)?),
        None => None,
    };
    let device = folder_device(&args.device)?;
    let model = FolderModel::load(folder, &device, args.dtype.dtype.into())
        .with_context(|| format!("loading {}", folder.display()))?;
    let timing = match (&args.prompt, prompts) {
        (Some(prompt), _) => {
            let (_, timing) =
                model.generate(std::slice::from_ref(prompt), &options, |_, piece| {
                    print_piece(piece);
                })?;
            println!();
            timing
        }
        (None, Some(prompts)) => model.generate_all(&prompts, &options, |_, answer| {
            println!("{}", answer.replace('\n', "\\n"));
        })?,
        (None, None) => bail!("give --prompt TEXT or --prompts FILE"),
    };
    eprintln!("{}", timing.summary());
    Ok(())
}

/// `attn chat FOLDER`: a conversation on stdin and stdout.
fn run_chat(args: &ChatArgs) -> Result<()> {
    let folder = match Source::of(&args.model)? {
        Source::Folder(folder) => folder,
        Source::Run(run) => bail!(
            "{} is a run folder, which has no chat template; `attn generate {} --prompt TEXT` \
             writes with it",
            run.display(),
            run.display()
        ),
    };
    let options = args
        .sampling
        .folder_options(args.max_new_tokens, Vec::new())?;
    folder::decoder_family(&folder)?;
    let device = folder_device(&args.device)?;
    let model = FolderModel::load(&folder, &device, args.dtype.dtype.into())
        .with_context(|| format!("loading {}", folder.display()))?;
    let program = std::env::current_exe().context("cannot find this program's own file")?;
    let mut chat = folder::Chat::new(&model, args.system.clone())?.rendered_by(program);
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .context("cannot catch Ctrl-C")?;
    }
    eprintln!(
        "chat with {} (/reset forgets, Ctrl-D ends)",
        folder.display()
    );
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let Some(message) = read_message(&mut stdin.lock())? else {
            return Ok(());
        };
        let line = message.trim();
        stop.store(false, Ordering::SeqCst);
        match line {
            "" => continue,
            "/reset" => {
                chat.reset();
                eprintln!("(history cleared)");
                continue;
            }
            _ => {}
        }
        let said = chat.say(line, &options, &stop, print_piece);
        println!();
        match said {
            Ok(timing) => eprintln!("{}", timing.summary()),
            // The turn is dropped and the chat goes on: the next line may work.
            Err(err) => eprintln!("{}", report(&err)),
        }
    }
}

/// One message of a chat from `input`: a line, or several where each but the last ends in `\`
/// (as llama.cpp's interactive mode reads them); `None` at the end of the input.
fn read_message(input: &mut impl std::io::BufRead) -> Result<Option<String>> {
    let mut message = String::new();
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok((!message.is_empty()).then_some(message));
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.strip_suffix('\\') {
            Some(part) => {
                message.push_str(part);
                message.push('\n');
            }
            None => {
                message.push_str(line);
                return Ok(Some(message));
            }
        }
    }
}

/// `attn view MODEL`: writes the explorer page.
fn run_view(args: &ViewArgs) -> Result<()> {
    // The output and the text are checked before the model is read.
    view::check_out(&args.out)?;
    if args.text.len() > VIEW_TEXT_MAX_BYTES {
        bail!(
            "--text is {} bytes, more than the {VIEW_TEXT_MAX_BYTES} a page is made from",
            args.text.len()
        );
    }
    let source = Source::of(&args.model)?;
    let device = folder_device(&args.device)?;
    let (title, views) = match &source {
        Source::Run(run) => view::from_run(run, &args.text, &device),
        Source::Folder(folder) => view::from_model_folder(folder, &args.text, &device),
    }
    .with_context(|| format!("reading the attention of {}", source.path().display()))?;
    let page = view::page(&title, &views);
    view::write_page(&args.out, &page)?;
    let tokens = views.first().map_or(0, |v| v.queries.len());
    eprintln!(
        "wrote {} ({:.1} MB): {tokens} tokens, {} layers × {} heads",
        args.out.display(),
        page.len() as f64 / 1e6,
        views.first().map_or(0, |v| v.layers),
        views.first().map_or(0, |v| v.heads),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_cause_already_in_the_message_above_it_is_printed_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("model config: {0}")]
        struct Outer(#[source] std::io::Error);
        let inner = std::io::Error::other("cannot read m/config.json: missing field");
        let error = anyhow::Error::new(Outer(inner)).context("loading m");
        assert_eq!(
            report(&error),
            "Error: loading m\n\nCaused by:\n    model config: cannot read m/config.json: \
             missing field"
        );
        let plain = anyhow::anyhow!("a fault");
        assert_eq!(report(&plain), "Error: a fault");
    }

    #[test]
    fn a_chat_message_continues_over_lines_that_end_in_a_backslash() {
        let mut input = std::io::Cursor::new("one\\\ntwo\nthree\n\\\n");
        let messages: Vec<String> =
            std::iter::from_fn(|| read_message(&mut input).expect("reads")).collect();
        assert_eq!(messages, ["one\ntwo", "three", "\n"]);
    }

    #[test]
    fn resume_commands_quote_what_the_shell_would_split() {
        assert_eq!(shell_quoted("runs/reverse"), "runs/reverse");
        assert_eq!(shell_quoted("my runs/it's"), "'my runs/it'\\''s'");
        assert_eq!(shell_quoted(""), "''");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_with_a_value_states_its_default() {
        let mut unstated = Vec::new();
        for command in Cli::command().get_subcommands() {
            for arg in command.get_arguments() {
                let takes_value = arg.get_action().takes_values();
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                let has_default = !arg.get_default_values().is_empty();
                if takes_value && !arg.is_positional() && !help.contains("default") && !has_default
                {
                    unstated.push(format!("{} --{}", command.get_name(), arg.get_id()));
                }
            }
        }
        // Inputs have no default: without them, nothing is read or written.
        assert_eq!(
            unstated,
            [
                "train --data",
                "train --config",
                "generate --prompt",
                "generate --prompts",
                "generate --stop",
                "chat --system",
                "view --text",
                "view --out",
            ]
        );
    }

    #[test]
    fn every_flag_of_train_sits_under_a_heading() {
        let command = Cli::command();
        let train = command.find_subcommand("train").expect("train");
        let loose: Vec<String> = train
            .get_arguments()
            .filter(|arg| !arg.is_positional() && arg.get_help_heading().is_none())
            .filter(|arg| !["help", "version"].contains(&arg.get_id().as_str()))
            .map(|arg| arg.get_id().to_string())
            .collect();
        assert!(loose.is_empty(), "{loose:?}");
    }
}
