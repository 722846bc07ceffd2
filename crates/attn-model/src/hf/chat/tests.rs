//! The chat templates rendered as transformers renders them: a Llama folder's template against
//! transformers' own rendering, text-generation-inference's cases, and cases rendered by
//! Python's jinja2 in transformers' environment; reading templates from folders.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::*;
use crate::files::FileError;

/// transformers' own rendering of a Llama-architecture folder's template
/// (`reference.json`'s `chat`), next to the folder's `chat_template.jinja`,
/// `tokenizer_config.json` and `generation_config.json`.
const LLAMA_TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf/llama_tiny");

fn chat(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs
        .iter()
        .map(|(role, content)| ChatMessage::new(*role, *content))
        .collect()
}

fn tokens(bos: &str, eos: &str) -> SpecialTokens {
    SpecialTokens {
        bos: Some(bos.into()),
        eos: Some(eos.into()),
        ..SpecialTokens::default()
    }
}

/// A fresh, empty folder under the system's temporary folder.
fn scratch_folder(name: &str) -> PathBuf {
    let folder =
        std::env::temp_dir().join(format!("attn-model-chat-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&folder);
    fs::create_dir_all(&folder).expect("a scratch folder");
    folder
}

/// `ChatTemplate::from_folder` on another thread, failing the test if it does not return
/// within 20 s (a FIFO read would block forever).
fn from_folder_within_time(folder: PathBuf) -> Result<Option<ChatTemplate>, ChatError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(ChatTemplate::from_folder(&folder));
    });
    receiver
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("from_folder blocked")
}

#[test]
fn llama_tiny_renders_as_transformers_does() {
    let reference: Json = serde_json::from_str(
        &fs::read_to_string(Path::new(LLAMA_TINY).join("reference.json")).expect("reference.json"),
    )
    .expect("reference.json parses");
    let case = &reference["chat"];
    let messages: Vec<ChatMessage> =
        serde_json::from_value(case["messages"].clone()).expect("the reference messages");
    let add_generation_prompt = case["add_generation_prompt"].as_bool().expect("a bool");
    let expected = case["rendered"].as_str().expect("the reference rendering");

    let template = ChatTemplate::from_folder(Path::new(LLAMA_TINY))
        .expect("the folder reads")
        .expect("the folder has a chat template");
    let rendered = template
        .render(&messages, add_generation_prompt)
        .expect("the template renders");
    assert_eq!(rendered, expected);
    assert_eq!(
        template.source(),
        fs::read_to_string(Path::new(LLAMA_TINY).join(CHAT_TEMPLATE_FILE))
            .expect("chat_template.jinja")
    );
    let special = template.special_tokens();
    assert_eq!(special.bos.as_deref(), Some("<s>"));
    assert_eq!(special.eos.as_deref(), Some("<|im_end|>"));
    assert_eq!(special.unk.as_deref(), Some("<unk>"));
    assert_eq!(special.pad.as_deref(), Some("<unk>"));
}

// Cases ported from text-generation-inference (Apache-2.0),
// `router/src/infer/chat_template.rs`, commit db931fcf42da018a3657580c64bf2720f167f9ab:
// templates, messages, tokens and expected strings as its authors wrote them. Its tests
// strip each line of a template and join the lines before compiling
// (`.lines().map(|line| line.trim()).collect::<Vec<&str>>().join("")`); the cases marked
// `trimmed` do the same here.

fn tgi_trim(source: &str) -> String {
    source.lines().map(str::trim).collect()
}

fn tgi_render(
    source: &str,
    trimmed: bool,
    bos: &str,
    eos: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<String, ChatError> {
    let source = if trimmed {
        tgi_trim(source)
    } else {
        source.to_string()
    };
    ChatTemplate::new(source, tokens(bos, eos))?.render(messages, add_generation_prompt)
}

fn tgi_four_turns() -> Vec<ChatMessage> {
    chat(&[
        ("user", "Hi!"),
        ("assistant", "Hello how can I help?"),
        ("user", "What is Deep Learning?"),
        ("assistant", "magic!"),
    ])
}

#[test]
fn tgi_chat_template() {
    let source = r#"
        {% for message in messages %}
            {% if message['role'] == 'system' %}
                {% if message['content']%}
                    {{'### System:\n' + message['content']+'\n\n'}}
                {% endif %}
            {% elif message['role'] == 'user' %}
                {{'### User:\n' + message['content']+'\n\n'}}
            {% elif message['role'] == 'assistant' %}
                {{'### Assistant:\n'  + message['content']}}
            {% endif %}
            {% if loop.last and add_generation_prompt %}
                {{ '### Assistant:\n' }}
            {% endif %}
        {% endfor %}"#;
    let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
    assert_eq!(
        result.expect("renders"),
        "### User:\nHi!\n\n### Assistant:\nHello how can I help?### User:\nWhat is Deep Learning?\n\n### Assistant:\nmagic!### Assistant:\n"
    );
}

/// TGI's template, but not its expected string: TGI expects the loop to stop at the second
/// user message, which relied on an old minijinja letting `{% set %}` inside a loop leak out
/// of the iteration. Jinja2 scopes it to the iteration, so `user_count` is 1 each time and
/// the loop never breaks; the expected string is jinja2's rendering in transformers'
/// environment (see the cases below), which minijinja 2.24 agrees with.
/// [`loop_controls_break_and_continue`] is a case that does break.
#[test]
fn tgi_chat_template_loop_controls() {
    let source = r#"
        {% set user_count = 0 %}
        {% for message in messages %}
            {% if message['role'] == 'user' %}
                {{'### User:\n' + message['content']+'\n\n'}}
                {% set user_count = user_count + 1 %}
                {% if user_count >= 2 %}
                    {% break %}
                {% endif %}
            {% elif message['role'] == 'assistant' %}
                {{'### Assistant:\n'  + message['content']}}
            {% endif %}
        {% endfor %}
        {% if add_generation_prompt %}
            {{ '### Assistant:\n' }}
        {% endif %}"#;
    let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
    assert_eq!(
        result.expect("renders"),
        "### User:\nHi!\n\n### Assistant:\nHello how can I help?### User:\nWhat is Deep Learning?\n\n### Assistant:\nmagic!### Assistant:\n"
    );
}

const TGI_RAISE_TEMPLATE: &str = r#"
        {{ bos_token }}
        {% for message in messages %}
        {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
        {% endif %}
        {% if message['role'] == 'user' %}
        {{ '[INST] ' + message['content'] + ' [/INST]' }}
        {% elif message['role'] == 'assistant' %}
        {{ message['content'] + eos_token}}
        {% else %}
        {{ raise_exception('Only user and assistant roles are supported!') }}
        {% endif %}
        {% endfor %}"#;

#[test]
fn tgi_chat_template_invalid_with_raise() {
    let messages = chat(&[
        ("user", "Hi!"),
        ("user", "Hi again!"),
        ("assistant", "Hello how can I help?"),
        ("user", "What is Deep Learning?"),
        ("assistant", "magic!"),
    ]);
    let result = tgi_render(TGI_RAISE_TEMPLATE, true, "[BOS]", "[EOS]", &messages, true);
    match result {
        Err(ChatError::Raised { message }) => assert_eq!(
            message,
            "Conversation roles must alternate user/assistant/user/assistant/..."
        ),
        other => panic!("expected ChatError::Raised, got {other:?}"),
    }
}

#[test]
fn tgi_chat_template_valid_with_raise() {
    let result = tgi_render(
        TGI_RAISE_TEMPLATE,
        true,
        "[BOS]",
        "[EOS]",
        &tgi_four_turns(),
        true,
    );
    assert_eq!(
        result.expect("renders"),
        "[BOS][INST] Hi! [/INST]Hello how can I help?[EOS][INST] What is Deep Learning? [/INST]magic![EOS]"
    );
}

#[test]
fn tgi_chat_template_valid_with_strftime_now() {
    let source = r#"
        {% set today = strftime_now("%Y-%m-%d") %}
        {% set default_system_message = "The current date is " + today + "." %}
        {{ bos_token }}
        {% if messages[0]['role'] == 'system' %}
            { set system_message = messages[0]['content'] %}
            {%- set loop_messages = messages[1:] %}
        {% else %}
            {%- set system_message = default_system_message %}
            {%- set loop_messages = messages %}
        {% endif %}
        {{ '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
        {% for message in loop_messages %}
            {% if message['role'] == 'user' %}
                {{ '[INST]' + message['content'] + '[/INST]' }}
            {% elif message['role'] == 'assistant' %}
                {{ message['content'] + eos_token }}
            {% else %}
                {{ raise_exception('Only user and assistant roles are supported!') }}
            {% endif %}
        {% endfor %}
        "#;
    let expected = |date: String| {
        format!(
            "[BOS][SYSTEM_PROMPT]The current date is {}.[/SYSTEM_PROMPT][INST]Hi![/INST]Hello how can I help?[EOS][INST]What is Deep Learning?[/INST]magic![EOS]",
            date
        )
    };
    // The date is read before and after rendering, in case midnight passes between.
    let before = chrono::Local::now().format("%Y-%m-%d").to_string();
    let result =
        tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true).expect("renders");
    let after = chrono::Local::now().format("%Y-%m-%d").to_string();
    assert!(
        result == expected(before) || result == expected(after),
        "{result}"
    );
}

#[test]
fn tgi_chat_template_valid_with_add_generation_prompt() {
    let source = r#"
        {% for message in messages %}
        {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
        {% endfor %}
        {% if add_generation_prompt %}
            {{ '<|im_start|>assistant\n' }}
        {% endif %}"#;
    let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
    assert_eq!(
        result.expect("renders"),
        "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello how can I help?<|im_end|>\n<|im_start|>user\nWhat is Deep Learning?<|im_end|>\n<|im_start|>assistant\nmagic!<|im_end|>\n<|im_start|>assistant\n"
    );
}

struct TgiCase {
    name: &'static str,
    chat_template: &'static str,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    bos_token: &'static str,
    eos_token: &'static str,
    target: &'static str,
    /// TGI strips and joins the lines of its "custom" templates, not of its "default" ones.
    trimmed: bool,
}

fn example_chat() -> Vec<ChatMessage> {
    chat(&[
        ("user", "Hello, how are you?"),
        ("assistant", "I'm doing great. How can I help you today?"),
        ("user", "I'd like to show off how chat templating works!"),
    ])
}

fn example_chat_with_system() -> Vec<ChatMessage> {
    let mut messages = chat(&[(
        "system",
        "You are a friendly chatbot who always responds in the style of a pirate",
    )]);
    messages.extend(example_chat());
    messages
}

fn zephyr_question() -> Vec<ChatMessage> {
    chat(&[
        (
            "system",
            "You are a friendly chatbot who always responds in the style of a pirate",
        ),
        (
            "user",
            "How many helicopters can a human eat in one sitting?",
        ),
    ])
}

/// TGI's `test_many_chat_templates`: its default and custom templates of many models.
#[test]
fn tgi_many_chat_templates() {
    let cases = vec![
        TgiCase {
            name: "_base",
            chat_template: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "",
            target: "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
            trimmed: false,
        },
        TgiCase {
            name: "blenderbot",
            chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ ' ' }}{% endif %}{{ message['content'] }}{% if not loop.last %}{{ '  ' }}{% endif %}{% endfor %}{{ eos_token }}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "</s>",
            target: " Hello, how are you?  I'm doing great. How can I help you today?   I'd like to show off how chat templating works!</s>",
            trimmed: false,
        },
        TgiCase {
            name: "blenderbot_small",
            chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ ' ' }}{% endif %}{{ message['content'] }}{% if not loop.last %}{{ '  ' }}{% endif %}{% endfor %}{{ eos_token }}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "</s>",
            target: " Hello, how are you?  I'm doing great. How can I help you today?   I'd like to show off how chat templating works!</s>",
            trimmed: false,
        },
        TgiCase {
            name: "bloom",
            chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "</s>",
            target: "Hello, how are you?</s>I'm doing great. How can I help you today?</s>I'd like to show off how chat templating works!</s>",
            trimmed: false,
        },
        TgiCase {
            name: "gpt_neox",
            chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "<|endoftext|>",
            target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
            trimmed: false,
        },
        TgiCase {
            name: "gpt2",
            chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "<|endoftext|>",
            target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
            trimmed: false,
        },
        TgiCase {
            name: "llama",
            chat_template: "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif USE_DEFAULT_PROMPT == true and not '<<SYS>>' in messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'DEFAULT_SYSTEM_MESSAGE' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token +'[INST] ' + content | trim + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content | trim + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% endfor %}",
            messages: example_chat_with_system(),
            add_generation_prompt: true,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s>[INST] <<SYS>>\nYou are a friendly chatbot who always responds in the style of a pirate\n<</SYS>>\n\nHello, how are you? [/INST] I'm doing great. How can I help you today? </s><s>[INST] I'd like to show off how chat templating works! [/INST]",
            trimmed: false,
        },
        TgiCase {
            name: "whisper",
            chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: true,
            bos_token: "",
            eos_token: "<|endoftext|>",
            target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
            trimmed: false,
        },
        TgiCase {
            name: "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=false)",
            chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
            messages: example_chat_with_system(),
            add_generation_prompt: false,
            bos_token: "",
            eos_token: "</s>",
            target: "<|system|>\nYou are a friendly chatbot who always responds in the style of a pirate</s><|user|>\nHello, how are you?</s><|assistant|>\nI'm doing great. How can I help you today?</s><|user|>\nI'd like to show off how chat templating works!</s>",
            trimmed: true,
        },
        TgiCase {
            name: "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=true)",
            chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
            messages: zephyr_question(),
            add_generation_prompt: true,
            bos_token: "",
            eos_token: "</s>",
            target: "<|system|>\nYou are a friendly chatbot who always responds in the style of a pirate</s><|user|>\nHow many helicopters can a human eat in one sitting?</s><|assistant|>",
            trimmed: true,
        },
        TgiCase {
            name: "HuggingFaceH4/zephyr-7b-gemma-v0.1",
            chat_template: "{% if messages[0]['role'] == 'user' or messages[0]['role'] == 'system' %}{{ bos_token }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% elif messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<bos>",
            eos_token: "<eos>",
            target: "<bos><|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
            trimmed: true,
        },
        TgiCase {
            name: "mistralai/Mistral-7B-Instruct-v0.1",
            chat_template: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s> [INST] I'd like to show off how chat templating works! [/INST]",
            trimmed: true,
        },
        TgiCase {
            name: "mistralai/Mixtral-8x7B-Instruct-v0.1",
            chat_template: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s>[INST] I'd like to show off how chat templating works! [/INST]",
            trimmed: true,
        },
        TgiCase {
            name: "cognitivecomputations/dolphin-2.5-mixtral-8x7b",
            chat_template: "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
            trimmed: true,
        },
        TgiCase {
            name: "openchat/openchat-3.5-0106",
            chat_template: "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + (message['role'] | title) + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s>GPT4 Correct User: Hello, how are you?<|end_of_turn|>GPT4 Correct Assistant: I'm doing great. How can I help you today?<|end_of_turn|>GPT4 Correct User: I'd like to show off how chat templating works!<|end_of_turn|>",
            trimmed: true,
        },
        TgiCase {
            name: "upstage/SOLAR-10.7B-Instruct-v1.0",
            chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "Hello, how are you?</s>I'm doing great. How can I help you today?</s>I'd like to show off how chat templating works!</s>",
            trimmed: true,
        },
        TgiCase {
            name: "codellama/CodeLlama-70b-Instruct-hf",
            chat_template: "{% if messages[0]['role'] == 'system' %}{% set user_index = 1 %}{% else %}{% set user_index = 0 %}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != ((loop.index0 + user_index) % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 %}{{ '<s>' }}{% endif %}{% set content = 'Source: ' + message['role'] + '\\n\\n ' + message['content'] | trim %}{{ content + ' <step> ' }}{% endfor %}{{'Source: assistant\\nDestination: user\\n\\n '}}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s>Source: user\n\n Hello, how are you? <step> Source: assistant\n\n I'm doing great. How can I help you today? <step> Source: user\n\n I'd like to show off how chat templating works! <step> Source: assistant\nDestination: user\n\n ",
            trimmed: true,
        },
        TgiCase {
            name: "Deci/DeciLM-7B-instruct",
            chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '### User:\\n' + message['content'] }}\n{% elif message['role'] == 'system' %}\n{{ '### System:\\n' + message['content'] }}\n{% elif message['role'] == 'assistant' %}\n{{ '### Assistant:\\n'  + message['content'] }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '### Assistant:' }}\n{% endif %}\n{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "### User:\nHello, how are you?### Assistant:\nI'm doing great. How can I help you today?### User:\nI'd like to show off how chat templating works!",
            trimmed: true,
        },
        TgiCase {
            name: "Qwen/Qwen1.5-72B-Chat",
            chat_template: "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']}}{% if (loop.last and add_generation_prompt) or not loop.last %}{{ '<|im_end|>' + '\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!",
            trimmed: true,
        },
        TgiCase {
            name: "deepseek-ai/deepseek-llm-7b-chat",
            chat_template: "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<｜begin▁of▁sentence｜>",
            eos_token: "<｜end▁of▁sentence｜>",
            target: "<｜begin▁of▁sentence｜>User: Hello, how are you?\n\nAssistant: I'm doing great. How can I help you today?<｜end▁of▁sentence｜>User: I'd like to show off how chat templating works!\n\n",
            trimmed: true,
        },
        TgiCase {
            name: "h2oai/h2o-danube-1.8b-chat",
            chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|prompt|>' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ '<|system|>' + message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ '<|answer|>'  + message['content'] + eos_token }}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|answer|>' }}{% endif %}{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<|prompt|>Hello, how are you?</s><|answer|>I'm doing great. How can I help you today?</s><|prompt|>I'd like to show off how chat templating works!</s>",
            trimmed: true,
        },
        TgiCase {
            name: "internlm/internlm2-chat-7b",
            chat_template: "{% if messages[0]['role'] == 'user' or messages[0]['role'] == 'system' %}{{ bos_token }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% elif messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "<s><|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
            trimmed: true,
        },
        TgiCase {
            name: "TheBloke/deepseek-coder-33B-instruct-AWQ",
            chat_template: "{%- set found_item = false -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set found_item = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{%- if not found_item -%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer.\\n'}}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{{'### Response:\\n'}}\n",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<｜begin▁of▁sentence｜>",
            eos_token: "<|EOT|>",
            target: "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer.\n### Instruction:\nHello, how are you?\n### Response:\nI'm doing great. How can I help you today?\n<|EOT|>\n### Instruction:\nI'd like to show off how chat templating works!\n### Response:\n",
            trimmed: true,
        },
        TgiCase {
            name: "ericzzz/falcon-rw-1b-chat",
            chat_template: "{% for message in messages %}{% if loop.index > 1 and loop.previtem['role'] != 'assistant' %}{{ ' ' }}{% endif %}{% if message['role'] == 'system' %}{{ '[SYS] ' + message['content'] | trim }}{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim }}{% elif message['role'] == 'assistant' %}{{ '[RESP] '  + message['content'] + eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ ' [RESP] ' }}{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<|endoftext|>",
            eos_token: "<|endoftext|>",
            target: "[INST] Hello, how are you? [RESP] I'm doing great. How can I help you today?<|endoftext|>[INST] I'd like to show off how chat templating works!",
            trimmed: true,
        },
        TgiCase {
            name: "abacusai/Smaug-34B-v0.1",
            chat_template: "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "Hello, how are you? [/INST] I'm doing great. How can I help you today? </s><s>[INST] I'd like to show off how chat templating works! [/INST]",
            trimmed: true,
        },
        TgiCase {
            name: "maywell/Synatra-Mixtral-8x7B",
            chat_template: "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n{% for message in messages %}{% if message['role'] == 'user' %}### Instruction:\n{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% elif message['role'] == 'assistant' %}### Response:\n{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% elif message['role'] == 'system' %}{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% endif %}\n{% endfor %}\n{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}\n### Response:\n{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "Below is an instruction that describes a task. Write a response that appropriately completes the request.### Instruction:Hello, how are you?### Response:I'm doing great. How can I help you today?### Instruction:I'd like to show off how chat templating works!",
            trimmed: true,
        },
        TgiCase {
            name: "deepseek-ai/deepseek-coder-33b-instruct",
            chat_template: "{% if not add_generation_prompt is defined %}\n{% set add_generation_prompt = false %}\n{% endif %}\n{%- set ns = namespace(found=false) -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set ns.found = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{{bos_token}}{%- if not ns.found -%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\\n'}}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{% if add_generation_prompt %}\n{{'### Response:'}}\n{% endif %}",
            messages: example_chat(),
            add_generation_prompt: false,
            bos_token: "<｜begin▁of▁sentence｜>",
            eos_token: "</EOT>",
            target: "<｜begin▁of▁sentence｜>You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\n### Instruction:\nHello, how are you?\n### Response:\nI'm doing great. How can I help you today?\n<|EOT|>\n### Instruction:\nI'd like to show off how chat templating works!\n",
            trimmed: true,
        },
        TgiCase {
            name: "maywell/PiVoT-MoE",
            chat_template: "{{ (messages|selectattr('role', 'equalto', 'system')|list|last).content|trim if (messages|selectattr('role', 'equalto', 'system')|list) else '' }}{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content']|trim }}{% elif message['role'] == 'user' %}### Instruction: {{ message['content']|trim }}{% elif message['role'] == 'assistant' %}### Response: {{ message['content']|trim }}{% elif message['role'] == 'user_context' %}### Input: {{ message['content']|trim }}{% endif %}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}### Response:{% endif %}",
            messages: example_chat_with_system(),
            add_generation_prompt: false,
            bos_token: "<s>",
            eos_token: "</s>",
            target: "You are a friendly chatbot who always responds in the style of a pirateYou are a friendly chatbot who always responds in the style of a pirate### Instruction: Hello, how are you?### Response: I'm doing great. How can I help you today?### Instruction: I'd like to show off how chat templating works!",
            trimmed: true,
        },
    ];
    for case in cases {
        let result = tgi_render(
            case.chat_template,
            case.trimmed,
            case.bos_token,
            case.eos_token,
            &case.messages,
            case.add_generation_prompt,
        );
        match result {
            Ok(rendered) => assert_eq!(rendered, case.target, "{}", case.name),
            Err(err) => panic!("{}: {err}", case.name),
        }
    }
}

// Cases whose expected strings were rendered by Python's jinja2 3.1.6 in the environment
// transformers builds (`ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True)`, `loopcontrols`, its `tojson`, `raise_exception`, `strftime_now`
// and `{% generation %}` tag), with `tools=None` and `documents=None`.

#[test]
fn python_string_methods_and_whitespace_as_jinja2() {
    let source = r#"{%- set ns = namespace(last_user=-1) %}
{%- for message in messages[::-1] %}
    {%- if ns.last_user == -1 and message.role == 'user' %}
        {%- set ns.last_user = (messages|length - 1) - loop.index0 %}
    {%- endif %}
{%- endfor %}
{% for message in messages %}
    {% if message.role == 'system' %}
<|system|>{{ message.content.strip() }}
    {% elif message.role == 'assistant' %}
        {% set content = message.content %}
        {% if '</think>' in content %}
            {% set content = content.split('</think>')[-1].lstrip('\n') %}
        {% endif %}
        {% if loop.index0 > ns.last_user %}
<|assistant|>{{ content.replace('\n\n', '\n') }}
        {% else %}
<|assistant|>{{ content }}
        {% endif %}
    {% elif message.content.startswith('/') %}
<|{{ message.role }}|>command {{ message.content[1:].split() | join(',') | upper }}
    {% else %}
<|{{ message.role }}|>{{ message.content.rstrip('?') }}{% if message.content.endswith('?') %} (a question){% endif %}

    {% endif %}
    {% if loop.index0 >= 10 %}
        {% break %}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}"#;
    let messages = chat(&[
        ("system", "  Be brief.  "),
        ("user", "/search rust  jinja"),
        ("assistant", "<think>\nhmm\n</think>\n\nHere."),
        ("user", "Why?"),
        ("assistant", "A\n\nB"),
    ]);
    let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
        .expect("compiles")
        .render(&messages, true)
        .expect("renders");
    assert_eq!(
        rendered,
        "<|system|>Be brief.\n<|user|>command SEARCH,RUST,JINJA\n<|assistant|>Here.\n<|user|>Why (a question)\n<|assistant|>A\nB\n<|assistant|>\n"
    );
}

#[test]
fn loop_controls_break_and_continue() {
    let source = r#"{% set ns = namespace(users=0) %}
{% for message in messages %}
    {% if message.role == 'system' %}
        {% continue %}
    {% endif %}
    {% if message.role == 'user' %}
        {% set ns.users = ns.users + 1 %}
    {% endif %}
{{ message.role }}: {{ message.content }}
    {% if ns.users >= 2 %}
        {% break %}
    {% endif %}
{% endfor %}
end"#;
    let messages = chat(&[
        ("system", "S"),
        ("user", "one"),
        ("assistant", "two"),
        ("user", "three"),
        ("assistant", "four"),
    ]);
    let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
        .expect("compiles")
        .render(&messages, false)
        .expect("renders");
    assert_eq!(rendered, "user: one\nassistant: two\nuser: three\nend");
}

#[test]
fn tojson_writes_what_python_json_dumps_writes() {
    let source = r#"{{ messages | tojson }}
{{ messages[0] | tojson(indent=2) }}
{{ {"z": [1, 2.5, none, true, false, [], {}], "a": 1e-05, "m": 1e16, "s": 0.1 + 0.2, "k": 1e15, "q": 0.0001, "h": 123456.789} | tojson(sort_keys=true) }}
{{ {"z": 1, "a": 2} | tojson }}
{{ messages[1] | tojson(ensure_ascii=true, separators=(",", ":")) }}
{{ [1, [2, {"x": [], "y": "t"}]] | tojson(indent=4) }}
{{ [1, {"x": 2}] | tojson(indent="\t") }}"#;
    let messages = chat(&[
        ("system", "plain"),
        (
            "user",
            "Café \"quoted\" \\ back\tslash\nnew 😀 \u{1}\u{7f} </tag>",
        ),
    ]);
    let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
        .expect("compiles")
        .render(&messages, false)
        .expect("renders");
    assert_eq!(
        rendered,
        "[{\"role\": \"system\", \"content\": \"plain\"}, {\"role\": \"user\", \"content\": \"Café \\\"quoted\\\" \\\\ back\\tslash\\nnew 😀 \\u0001\u{7f} </tag>\"}]\n{\n  \"role\": \"system\",\n  \"content\": \"plain\"\n}\n{\"a\": 1e-05, \"h\": 123456.789, \"k\": 1000000000000000.0, \"m\": 1e+16, \"q\": 0.0001, \"s\": 0.30000000000000004, \"z\": [1, 2.5, null, true, false, [], {}]}\n{\"z\": 1, \"a\": 2}\n{\"role\":\"user\",\"content\":\"Caf\\u00e9 \\\"quoted\\\" \\\\ back\\tslash\\nnew \\ud83d\\ude00 \\u0001\\u007f </tag>\"}\n[\n    1,\n    [\n        2,\n        {\n            \"x\": [],\n            \"y\": \"t\"\n        }\n    ]\n]\n[\n\t1,\n\t{\n\t\t\"x\": 2\n\t}\n]"
    );
}

#[test]
fn values_print_as_python_prints_them() {
    let source = r#"{{ none }} {{ true }} {{ false }} {{ tools }} {{ documents }} {{ 1.0 }} {{ 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ bos_token }} [{{ unk_token }}] [{{ pad_token }}] {{ messages[0].content is string }}"#;
    let special = SpecialTokens {
        bos: Some("<s>".into()),
        unk: Some("<unk>".into()),
        ..SpecialTokens::default()
    };
    let rendered = ChatTemplate::new(source.into(), special)
        .expect("compiles")
        .render(&chat(&[("user", "x")]), false)
        .expect("renders");
    assert_eq!(
        rendered,
        "None True False None None 1.0 2 3.5 3 <s> [<unk>] [] True"
    );
}

#[test]
fn generation_blocks_render_their_body() {
    let source = r#"{% for message in messages %}
{% if message.role == 'assistant' %}
<|assistant|>
{% generation %}
{{ message.content }}<|end|>
{% endgeneration %}
{% else %}
<|{{ message.role }}|>
  {%- generation -%}
 {{ message.content }}
  {%- endgeneration -%}
<|end|>
{% endif %}
{% endfor %}"#;
    let template = ChatTemplate::new(source.into(), SpecialTokens::default()).expect("compiles");
    let rendered = template
        .render(&chat(&[("user", "Hi"), ("assistant", "Hello")]), false)
        .expect("renders");
    assert_eq!(rendered, "<|user|>Hi<|end|>\n<|assistant|>\nHello<|end|>\n");
    assert_eq!(template.source(), source);
}

#[test]
fn generation_rewrite_leaves_other_tags_alone() {
    for source in [
        "{%}",
        "{%%}",
        "{% if x %}{%- generation -%}",
        "a {% generation",
        "{{ '{%' }}",
    ] {
        let rewritten = open_generation_blocks(source);
        assert_eq!(rewritten.replace("if true", "generation"), source);
    }
    assert_eq!(
        open_generation_blocks("{%+ generation %}x{%- endgeneration +%}"),
        "{%+ if true %}x{%- endif +%}"
    );
}

#[test]
fn raise_exception_gives_its_message() {
    let template = ChatTemplate::new(
        "{% if messages|length > 1 %}{{ raise_exception('x') }}{% endif %}ok".into(),
        SpecialTokens::default(),
    )
    .expect("compiles");
    let one = chat(&[("user", "a")]);
    assert_eq!(template.render(&one, false).expect("renders"), "ok");
    let two = chat(&[("user", "a"), ("user", "b")]);
    match template.render(&two, false) {
        Err(ChatError::Raised { message }) => assert_eq!(message, "x"),
        other => panic!("expected ChatError::Raised, got {other:?}"),
    }
}

#[test]
fn malformed_template_names_the_line_when_it_renders() {
    // Loading checks the source without parsing it; the syntax error comes from the
    // rendering, which is where the template is compiled.
    let source = "{% for message in messages %}\n{{ message.content }}\n{% if %}\n{% endfor %}";
    let template =
        ChatTemplate::new(source.into(), SpecialTokens::default()).expect("only checked");
    assert_eq!(template.source(), source);
    match template.render(&[], false) {
        Err(err @ ChatError::Template { line, .. }) => {
            assert_eq!(line, Some(3), "{err}");
            assert!(err.to_string().contains("line 3"), "{err}");
        }
        other => panic!("expected ChatError::Template, got {other:?}"),
    }
    let unclosed = "{% for message in messages %}\n{{ message.content }}\n";
    let err = ChatTemplate::new(unclosed.into(), SpecialTokens::default())
        .and_then(|template| template.render(&[], false))
        .expect_err("an unclosed for");
    assert!(matches!(err, ChatError::Template { .. }), "{err}");
    assert!(err.to_string().contains("syntax error"), "{err}");
}

#[test]
fn render_failure_names_the_error() {
    let template = ChatTemplate::new(
        "{{ messages[0].content }}\n{{ 'a' + messages[0].missing.deeper }}".into(),
        SpecialTokens::default(),
    )
    .expect("compiles");
    match template.render(&chat(&[("user", "hi")]), false) {
        Err(err @ ChatError::Template { line, .. }) => {
            assert_eq!(line, Some(2), "{err}");
            assert!(err.to_string().contains("undefined"), "{err}");
        }
        other => panic!("expected ChatError::Template, got {other:?}"),
    }
}

#[test]
fn tokenizer_config_template_list_takes_the_default() {
    let folder = scratch_folder("list-default");
    let config = serde_json::json!({
        "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
        "eos_token": "</s>",
        "pad_token": null,
        "chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}
        ]
    });
    fs::write(folder.join(TOKENIZER_CONFIG_FILE), config.to_string()).expect("written");
    let template = ChatTemplate::from_folder(&folder)
        .expect("reads")
        .expect("has a template");
    let rendered = template
        .render(&chat(&[("user", "a"), ("assistant", "b")]), false)
        .expect("renders");
    assert_eq!(rendered, "<s>a</s>b</s>");
    assert_eq!(template.special_tokens().pad, None);
    let _ = fs::remove_dir_all(&folder);
}

#[test]
fn chat_template_jinja_comes_before_tokenizer_config() {
    let folder = scratch_folder("jinja-first");
    fs::write(
        folder.join(TOKENIZER_CONFIG_FILE),
        r#"{"chat_template": "from the config", "eos_token": "E"}"#,
    )
    .expect("written");
    fs::write(
        folder.join(CHAT_TEMPLATE_FILE),
        "from the file {{ eos_token }}\n",
    )
    .expect("written");
    let template = ChatTemplate::from_folder(&folder)
        .expect("reads")
        .expect("has a template");
    // Jinja2 drops the template's one trailing newline (`keep_trailing_newline=False`).
    assert_eq!(
        template.render(&[], false).expect("renders"),
        "from the file E"
    );
    let _ = fs::remove_dir_all(&folder);
}

#[test]
fn folder_without_template_gives_none() {
    let folder = scratch_folder("none");
    assert!(ChatTemplate::from_folder(&folder).expect("reads").is_none());
    fs::write(
        folder.join(TOKENIZER_CONFIG_FILE),
        r#"{"eos_token": "</s>"}"#,
    )
    .expect("written");
    assert!(ChatTemplate::from_folder(&folder).expect("reads").is_none());
    let _ = fs::remove_dir_all(&folder);
    assert!(matches!(
        ChatTemplate::from_folder(&folder),
        Err(ChatError::Read { .. })
    ));
}

#[test]
fn template_list_without_default_lists_the_names() {
    let folder = scratch_folder("list-no-default");
    let config = serde_json::json!({"chat_template": [
        {"name": "tool_use", "template": "a"},
        {"name": "rag", "template": "b"}
    ]});
    fs::write(folder.join(TOKENIZER_CONFIG_FILE), config.to_string()).expect("written");
    match ChatTemplate::from_folder(&folder) {
        Err(err @ ChatError::NoDefaultTemplate { .. }) => {
            let ChatError::NoDefaultTemplate { names, .. } = &err else {
                unreachable!()
            };
            assert_eq!(names, &["tool_use", "rag"]);
            let text = err.to_string();
            assert!(text.contains("tool_use") && text.contains("rag"), "{text}");
            assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
        }
        other => panic!("expected ChatError::NoDefaultTemplate, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&folder);
}

#[test]
fn special_token_of_the_wrong_type_names_key_and_file() {
    let folder = scratch_folder("wrong-type");
    fs::write(folder.join(TOKENIZER_CONFIG_FILE), r#"{"eos_token": 2}"#).expect("written");
    match ChatTemplate::from_folder(&folder) {
        Err(err @ ChatError::WrongType { .. }) => {
            let text = err.to_string();
            assert!(text.contains("eos_token"), "{text}");
            assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
        }
        other => panic!("expected ChatError::WrongType, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&folder);
}

#[cfg(unix)]
#[test]
fn fifo_tokenizer_config_is_refused_without_blocking() {
    let folder = scratch_folder("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(folder.join(TOKENIZER_CONFIG_FILE))
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo failed");
    match from_folder_within_time(folder.clone()) {
        Err(err @ ChatError::File(FileError::NotRegular { kind: "a FIFO", .. })) => {
            let text = err.to_string();
            assert!(
                text.contains(&format!(
                    "{} is a FIFO, not a regular file",
                    folder.join(TOKENIZER_CONFIG_FILE).display()
                )),
                "{text}"
            );
        }
        other => panic!("expected ChatError::File, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&folder);
}

#[test]
fn folder_in_place_of_a_file_is_refused() {
    let folder = scratch_folder("dir-file");
    fs::create_dir(folder.join(CHAT_TEMPLATE_FILE)).expect("a folder");
    match ChatTemplate::from_folder(&folder) {
        Err(
            err @ ChatError::File(FileError::NotRegular {
                kind: "a folder", ..
            }),
        ) => {
            assert!(
                err.to_string()
                    .contains(&format!("{CHAT_TEMPLATE_FILE} is a folder")),
                "{err}"
            );
        }
        other => panic!("expected ChatError::File, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&folder);
}

#[test]
fn oversize_tokenizer_config_is_refused() {
    let folder = scratch_folder("oversize");
    // A sparse file: its length is all that is looked at.
    fs::File::create(folder.join(TOKENIZER_CONFIG_FILE))
        .and_then(|file| file.set_len(CHAT_MAX_BYTES + 1))
        .expect("a long file");
    match from_folder_within_time(folder.clone()) {
        Err(err @ ChatError::File(FileError::TooLarge { size, max, .. })) => {
            assert_eq!((size, max), (CHAT_MAX_BYTES + 1, CHAT_MAX_BYTES));
            let text = err.to_string();
            assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
            assert!(text.contains(&(CHAT_MAX_BYTES + 1).to_string()), "{text}");
            assert!(text.contains(&CHAT_MAX_BYTES.to_string()), "{text}");
        }
        other => panic!("expected ChatError::TooLarge, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&folder);
}
