//! The registry: the one `match` from a [`TaskKind`] to the file that implements it.
//!
//! It names every task and sits above them all: the tasks implement [`Task`] from
//! [`crate::tasks`], and nothing there names a task's file.

use super::{Task, TaskKind, add, context, copy, reverse, sort, text, translate};

impl TaskKind {
    /// The registry: the implementation of each task, one line per task.
    pub fn task(self) -> &'static dyn Task {
        match self {
            Self::Copy => &copy::COPY,
            Self::Reverse => &reverse::REVERSE,
            Self::Sort => &sort::SORT,
            Self::Context => &context::ContextTask,
            Self::Add => &add::AddTask,
            Self::Translate => &translate::TranslateTask,
            Self::Text => &text::TextTask,
        }
    }
}
