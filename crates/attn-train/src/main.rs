//! `attn-train`: trains a Transformer on a synthetic task and writes metrics, checkpoints and
//! plots; `attn-train generate` streams what a trained decoder writes.
//!
//! ```text
//! cargo run --release -p attn-train -- --task reverse --seed 1
//! cargo run --release -p attn-train -- generate --run runs/add --prompt 123+456=
//! ```
//!
//! Flags override `--config FILE.json`, which overrides the defaults. A progress bar goes to
//! stderr; one JSON line summarising the run goes to stdout at the end.
//!
//! The first SIGINT or SIGTERM lets the step under way finish, writes a checkpoint, prints the
//! command that resumes, and exits with status 130; a second one exits at once.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
// It keeps the memory it frees, set first thing in `main`: see `attn_train::allocator`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use attn_model::Sampling;
use attn_train::config::{Overrides, TrainConfig};
use attn_train::folder::{self, FolderModel, Options as FolderOptions, WeightType};
use attn_train::generate::{self, Request};
use attn_train::train::{self, RunOptions};
use attn_train::view;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Train a Transformer on a synthetic sequence task, or a language model on your own text.
#[derive(Parser, Debug)]
#[command(name = "attn-train", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    overrides: Overrides,
    /// Read the configuration from a JSON file (flags override it).
    #[arg(long, value_name = "FILE.json")]
    config: Option<PathBuf>,
    /// Output folder; it must be missing or empty unless --overwrite is given
    /// [default: runs/<task>]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Reuse a --out folder that is not empty: remove the files that an earlier run listed in
    /// its manifest.json there, and nothing else
    #[arg(long)]
    overwrite: bool,
    /// Continue the run in DIR from its last checkpoint, with the configuration saved there
    /// (only --steps, --device and --stop-at may be given with it).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Stop after this many steps, checkpointing there, as if interrupted [default: the
    /// configured --steps]
    #[arg(long)]
    stop_at: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Skip the PNG plots.
    #[arg(long)]
    no_plots: bool,
}

/// The exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT's number, as shells
/// report it).
const INTERRUPTED: i32 = 130;
/// What the program does besides training.
#[derive(Subcommand, Debug)]
enum Command {
    /// Generate from a trained decoder (an add, translate or text run), or from a Hugging
    /// Face folder (Llama, Qwen2, Qwen3, Mistral), printing text as it comes.
    Generate(GenerateArgs),
    /// Chat with a Hugging Face folder that has a chat template: the history stays in the
    /// key/value cache from turn to turn, Ctrl-C stops the current answer, /reset forgets.
    Chat(ChatArgs),
    /// Write one HTML page (no network needed) to explore a model's attention on a text: each
    /// head's lines from token to token, every layer and head at a glance.
    View(ViewArgs),
    /// Renders one chat template request from standard input, within a memory cap (the chat's
    /// child process, `attn_train::render`).
    #[command(name = "render-chat-template", hide = true)]
    RenderChatTemplate,
}

/// The flags of `attn-train view`.
#[derive(clap::Args, Debug)]
struct ViewArgs {
    /// A run folder (its config.json and newest checkpoint).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "model",
        conflicts_with = "model"
    )]
    run: Option<PathBuf>,
    /// A Hugging Face model folder (GPT-2, BERT, Llama, Qwen2, Qwen3 or Mistral: config.json, the
    /// weights, tokenizer.json).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The text: any text for a text run or a model folder, a prompt for add and translate,
    /// the task's tokens separated by spaces for the others.
    #[arg(long)]
    text: String,
    /// The page to write; an existing file is replaced only if it is such a page.
    #[arg(long, value_name = "FILE.html")]
    out: PathBuf,
    /// Backend (default: flex where compiled in, else the first backend compiled in).
    #[arg(long)]
    device: Option<String>,
}

/// The flags of `attn-train generate`.
#[derive(clap::Args, Debug)]
struct GenerateArgs {
    /// The run folder to load (its config.json and newest checkpoint).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "model",
        conflicts_with = "model"
    )]
    run: Option<PathBuf>,
    /// A Hugging Face folder: config.json, the weights, tokenizer.json (Llama, Qwen2, Qwen3,
    /// Mistral).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// add: two numbers, `123+456=`; translate: the run's seq_len digit words, `three one
    /// four ...`; text and model folders: any text, `ROMEO:`.
    #[arg(long, required_unless_present = "prompts", conflicts_with = "prompts")]
    prompt: Option<String>,
    /// A model folder: a file of prompts, one per line, generated together (left-padded);
    /// one answer per line.
    #[arg(long, value_name = "FILE", requires = "model")]
    prompts: Option<PathBuf>,
    /// A model folder: divide the logits of tokens already present by this (above 1
    /// discourages repeats).
    #[arg(long, requires = "model")]
    repetition_penalty: Option<f64>,
    /// A model folder: the type its matrices are held in; `auto` is the folder's own
    /// (`bf16` keeps a bfloat16 folder at about its file's size, products in f32).
    #[arg(long, value_enum, default_value = "auto", requires = "model")]
    dtype: WeightType,
    /// A model folder: end the answer at this text (may be repeated).
    #[arg(long, requires = "model")]
    stop: Vec<String>,
    /// New tokens at most (default: the task's answer length; text: 200).
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Sample at this temperature instead of taking the most likely token (text runs sample
    /// at 0.8 from the 200 most likely tokens unless --temperature, --top-k or --top-p is
    /// given).
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Sample from the k most likely tokens only (temperature 1 unless given).
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability reaches p (temperature 1
    /// unless given).
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampling generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Backend (default: the run's).
    #[arg(long)]
    device: Option<String>,
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
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The renderer's memory is capped: what it frees goes back to the system at once.
    #[cfg(feature = "mimalloc")]
    if !matches!(cli.command, Some(Command::RenderChatTemplate)) {
        attn_train::allocator::keep_freed_memory();
    }
    match &cli.command {
        Some(Command::Generate(args)) => return run_generate(args),
        Some(Command::Chat(args)) => return run_chat(args),
        Some(Command::View(args)) => return run_view(args),
        Some(Command::RenderChatTemplate) => return attn_train::render::serve(),
        None => {}
    }
    let interrupt = Arc::new(AtomicBool::new(false));
    let signals = Arc::new(AtomicUsize::new(0));
    {
        let interrupt = Arc::clone(&interrupt);
        ctrlc::set_handler(move || {
            if signals.fetch_add(1, Ordering::SeqCst) == 0 {
                eprintln!(
                    "\ninterrupted: finishing this step and writing a checkpoint \
                     (interrupt again to quit at once, without one)"
                );
                interrupt.store(true, Ordering::SeqCst);
            } else {
                std::process::exit(INTERRUPTED);
            }
        })
        .context("installing the SIGINT and SIGTERM handler")?;
    }
    let options = RunOptions {
        out: None,
        resume: false,
        stop_at: cli.stop_at,
        progress: !cli.quiet,
        skip_plots: cli.no_plots,
        overwrite: cli.overwrite,
        interrupt: Some(interrupt),
    };

    // The summary names the folder in JSON, which holds text only: a name that is not UTF-8 is
    // refused now, not after the run has trained and written everything.
    for (flag, path) in [("--out", &cli.out), ("--resume", &cli.resume)] {
        if let Some(path) = path
            && path.to_str().is_none()
        {
            bail!(
                "{flag} {} is not valid UTF-8; give a \
                 folder whose name is",
                path.display()
            );
        }
    }
    let summary = if let Some(dir) = &cli.resume {
        let refused = refused_with_resume(&matches);
        if !refused.is_empty() {
            bail!(
                "--resume continues with the configuration saved in {}, so {} cannot be given \
                 with it (only --steps, --device and --stop-at can)",
                dir.display(),
                refused.join(", ")
            );
        }
        train::resume(dir, &cli.overrides, &options)
            .with_context(|| format!("cannot resume {}", dir.display()))?
    } else {
        let mut config = match &cli.config {
            Some(path) => TrainConfig::from_file(path)?,
            None => TrainConfig::default(),
        };
        config.apply(&cli.overrides)?;
        let out = cli
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(config.task.kind.to_string()));
        let options = RunOptions {
            out: Some(out.clone()),
            ..options
        };
        train::run(&config, &options)
            .with_context(|| format!("cannot train {} into {}", config.task.kind, out.display()))?
    };

    println!(
        "{}",
        serde_json::to_string(&summary).context("serialising the summary")?
    );
    if summary.interrupted {
        let dir = summary.out.as_deref().unwrap_or(Path::new("."));
        match &summary.last_checkpoint {
            Some(checkpoint) => eprintln!(
                "stopped at step {}; checkpoint {}\nresume with: {}",
                summary.steps,
                checkpoint.display(),
                resume_command(dir, &cli)
            ),
            None => eprintln!("stopped at step {}; no checkpoint", summary.steps),
        }
        std::process::exit(INTERRUPTED);
    }
    Ok(())
}

/// The command line that continues the run in `dir`, with this one's output flags.
fn resume_command(dir: &Path, cli: &Cli) -> String {
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "attn-train".into());
    let mut words = vec![program, "--resume".into(), dir.display().to_string()];
    if cli.quiet {
        words.push("--quiet".into());
    }
    if cli.no_plots {
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

/// The flags of `attn-train chat`.
#[derive(clap::Args, Debug)]
struct ChatArgs {
    /// A Hugging Face folder with a chat template (chat_template.jinja or
    /// tokenizer_config.json's chat_template).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// A system message that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    /// The type the folder's matrices are held in; `auto` is the folder's own (`bf16` keeps a
    /// bfloat16 folder at about its file's size, products in f32).
    #[arg(long, value_enum, default_value = "auto")]
    dtype: WeightType,
    /// New tokens per answer at most.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: usize,
    /// Sample at this temperature (default: greedy unless --top-k or --top-p is given).
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Sample from the k most likely tokens only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability reaches p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Divide the logits of tokens already present by this.
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// Seed of the sampling generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Backend (default: flex where compiled in).
    #[arg(long)]
    device: Option<String>,
}

/// Greedy, unless a sampling flag is given.
fn sampling_of(
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
) -> Option<Sampling> {
    (temperature.is_some() || top_k.is_some() || top_p.is_some()).then(|| Sampling::Sample {
        temperature: temperature.unwrap_or(1.0),
        top_k,
        top_p,
    })
}

fn folder_device(device: &Option<String>) -> Result<burn::tensor::Device> {
    let name = device
        .clone()
        .unwrap_or_else(|| attn_train::backend::default_backend().to_string());
    Ok(attn_train::backend::device(&name)?)
}

/// `attn-train generate --model DIR`: one prompt streamed, or a file of prompts answered a
/// line each.
fn run_generate_folder(args: &GenerateArgs, folder: &std::path::Path) -> Result<()> {
    if args.max_new_tokens == Some(0) {
        bail!("--max-new-tokens must be at least 1");
    }
    let device = folder_device(&args.device)?;
    let model = FolderModel::load(folder, &device, args.dtype)
        .with_context(|| format!("loading {}", folder.display()))?;
    let options = FolderOptions {
        max_new_tokens: args.max_new_tokens.unwrap_or(128),
        sampling: sampling_of(args.temperature, args.top_k, args.top_p).unwrap_or_default(),
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
        stop: args.stop.clone(),
    };
    let mut stdout = std::io::stdout();
    let timing = match (&args.prompt, &args.prompts) {
        (Some(prompt), _) => {
            let (_, timing) =
                model.generate(std::slice::from_ref(prompt), &options, |_, piece| {
                    let _ = write!(stdout, "{piece}");
                    let _ = stdout.flush();
                })?;
            println!();
            timing
        }
        (None, Some(file)) => {
            let prompts = folder::read_prompts(file)?;
            let (answers, timing) = model.generate(&prompts, &options, |_, _| {})?;
            for answer in answers {
                println!("{}", answer.replace('\n', "\\n"));
            }
            timing
        }
        (None, None) => bail!("give --prompt TEXT or --prompts FILE"),
    };
    eprintln!("{}", timing.summary());
    Ok(())
}

/// `attn-train chat --model DIR`: a conversation on stdin and stdout.
fn run_chat(args: &ChatArgs) -> Result<()> {
    use std::io::BufRead;
    let device = folder_device(&args.device)?;
    let model = FolderModel::load(&args.model, &device, args.dtype)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let program = std::env::current_exe().context("cannot find this program's own file")?;
    let mut chat = folder::Chat::new(&model, args.system.clone())?.rendered_by(program);
    let options = FolderOptions {
        max_new_tokens: args.max_new_tokens.max(1),
        sampling: sampling_of(args.temperature, args.top_k, args.top_p).unwrap_or_default(),
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
        stop: Vec::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .context("cannot catch Ctrl-C")?;
    }
    eprintln!(
        "chat with {} (/reset forgets, Ctrl-D ends)",
        args.model.display()
    );
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim();
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
        let said = chat.say(line, &options, &stop, |piece| {
            let _ = write!(stdout, "{piece}");
            let _ = stdout.flush();
        });
        println!();
        match said {
            Ok(timing) => eprintln!("{}", timing.summary()),
            // The turn is dropped and the chat goes on: the next line may work.
            Err(err) => eprintln!("{}", report(&err)),
        }
    }
}

/// `attn-train generate`: streams the new tokens to stdout as they come.
fn run_generate(args: &GenerateArgs) -> Result<()> {
    let (run, prompt) = match (&args.model, &args.run, &args.prompt) {
        (Some(folder), _, _) => return run_generate_folder(args, folder),
        (None, Some(run), Some(prompt)) => (run, prompt),
        _ => bail!("give --run DIR --prompt TEXT, or --model DIR"),
    };
    let sampling = sampling_of(args.temperature, args.top_k, args.top_p);
    let request = Request {
        run: run.clone(),
        prompt: prompt.clone(),
        max_new_tokens: args.max_new_tokens,
        sampling,
        seed: args.seed,
        device: args.device.clone(),
    };
    let mut stdout = std::io::stdout();
    let generated = generate::generate(&request, |piece| {
        let _ = write!(stdout, "{piece}");
        let _ = stdout.flush();
    })
    .with_context(|| format!("generating from {}", run.display()))?;
    println!();
    if let Some(sum) = generated.sum {
        println!("read back, most significant digit first: {sum}");
    }
    Ok(())
}

/// `attn-train view`: writes the explorer page.
fn run_view(args: &ViewArgs) -> Result<()> {
    let name = args
        .device
        .clone()
        .unwrap_or_else(|| attn_train::backend::default_backend().to_string());
    let device = attn_train::backend::device(&name)?;
    let (title, views) = match (&args.run, &args.model) {
        (Some(run), _) => view::from_run(run, &args.text, &device)
            .with_context(|| format!("reading the attention of {}", run.display()))?,
        (None, Some(model)) => view::from_model_folder(model, &args.text, &device)
            .with_context(|| format!("reading the attention of {}", model.display()))?,
        (None, None) => bail!("give --run DIR or --model DIR"),
    };
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

/// The flags that `--resume` takes along: the rest would change the saved configuration.
const WITH_RESUME: [&str; 6] = ["resume", "steps", "device", "stop_at", "quiet", "no_plots"];

/// The flags given on the command line that `--resume` refuses, as `--name`.
fn refused_with_resume(matches: &ArgMatches) -> Vec<String> {
    Cli::command()
        .get_arguments()
        .filter(|arg| !WITH_RESUME.contains(&arg.get_id().as_str()))
        .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags refused when `args` follow `--resume runs/x`.
    fn refused(args: &[&str]) -> Vec<String> {
        let command_line = ["attn-train", "--resume", "runs/x"].iter().chain(args);
        let matches = Cli::command()
            .try_get_matches_from(command_line)
            .expect("flags parse");
        refused_with_resume(&matches)
    }

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
    fn resume_commands_quote_what_the_shell_would_split() {
        assert_eq!(shell_quoted("runs/reverse"), "runs/reverse");
        assert_eq!(shell_quoted("my runs/it's"), "'my runs/it'\\''s'");
        assert_eq!(shell_quoted(""), "''");
    }

    #[test]
    fn every_flag_with_a_value_states_its_default() {
        let mut unstated = Vec::new();
        for arg in Cli::command().get_arguments() {
            let takes_value = arg.get_action().takes_values();
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            if takes_value && !help.contains("default") {
                unstated.push(arg.get_id().to_string());
            }
        }
        // A file or a folder to read from has no default: without it, nothing is read.
        assert_eq!(unstated, ["data", "config", "resume"]);
    }

    #[test]
    fn resume_names_only_the_refused_flags_that_were_given() {
        let given = refused(&["--steps", "9", "--lr", "0.1", "--long-range"]);
        assert_eq!(given, ["--long-range", "--lr"]);
        let given = refused(&["--config", "c.json", "--out", "elsewhere"]);
        assert_eq!(given, ["--config", "--out"]);
        let given = refused(&["--steps", "9", "--device", "ndarray", "--quiet"]);
        assert!(given.is_empty(), "{given:?}");
    }
}
