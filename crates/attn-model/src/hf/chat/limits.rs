//! The files a chat template comes from, and the bounds a template is checked and rendered
//! within: the constants every part of the chat module reads, beneath all of them.

/// The chat template file that transformers' `save_pretrained` writes.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// The tokenizer settings file, with the special tokens and, in older folders, the template.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// The most bytes read from one file of a model folder by this module and by
/// [`GenerationDefaults`](crate::hf::GenerationDefaults): 4 MiB.
pub const CHAT_MAX_BYTES: u64 = 4 << 20;

/// The most instructions one rendering runs (minijinja's fuel, one unit per instruction):
/// Qwen3's and Llama 3's templates spend a few hundred per message, so this allows
/// conversations of tens of thousands of messages while a loop of `range(100000)` nested in
/// another ends within a second or so.
pub const CHAT_RENDER_FUEL: u64 = 20_000_000;

/// The deepest nesting of calls, blocks and loops one rendering reaches (minijinja's recursion
/// counter; a macro call counts several levels): a macro that calls itself without end stops
/// here, well before the thread's stack would.
pub const CHAT_RECURSION_LIMIT: usize = 200;

/// The most operators (`+`, `~`, `|`, calls, `and`, `if`...`else`, ...) one tag may chain, and
/// the most `elif` branches one template may hold. minijinja builds each into a tree as deep as
/// it is long, and compiles and drops that tree by recursion: ten thousand overflow a thread's
/// 2 MiB stack, three thousand do not. Hugging Face's templates use a few dozen.
pub const CHAT_MAX_CHAIN: usize = 500;

/// The most bytes one rendering writes, and the most `tojson` writes for one value: 16 MiB,
/// a thousand times a long conversation's prompt.
pub const CHAT_PROMPT_MAX_BYTES: u64 = 16 << 20;
