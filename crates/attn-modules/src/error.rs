//! Why a crate's module graph could not be read.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a crate's module graph could not be read.
#[derive(Debug)]
pub enum Error {
    /// A source file (or the `src` folder) could not be read.
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// `mod name;` names a module with neither `name.rs` nor `name/mod.rs` where it belongs
    /// (a `#[path]` attribute is not followed).
    MissingModule {
        /// The file that declares it.
        declared_in: PathBuf,
        /// The line of the declaration.
        line: usize,
        /// The module's name.
        name: String,
    },
    /// The folder has no crate root: no `lib.rs`, `main.rs` or `bin/*.rs`.
    NoCrateRoot {
        /// The `src` folder.
        src: PathBuf,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::MissingModule {
                declared_in,
                line,
                name,
            } => write!(
                f,
                "{}:{line}: `mod {name};` has neither {name}.rs nor {name}/mod.rs beside it",
                declared_in.display()
            ),
            Error::NoCrateRoot { src } => {
                write!(f, "{} has no lib.rs, main.rs or bin/*.rs", src.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}
