//! A split's token ids: in memory, or in a file of the run folder (`u32`, little-endian) read
//! through a memory map, so that a corpus larger than memory trains from the page cache.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::TextError;

/// The ids of one split.
pub enum Tokens {
    /// Held in memory (a run without a folder).
    Memory(Vec<u32>),
    /// A file of the run folder, mapped.
    Mapped(memmap2::Mmap),
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} ids)", self.len())
    }
}

impl Tokens {
    /// Ids in the split.
    pub fn len(&self) -> usize {
        match self {
            Self::Memory(ids) => ids.len(),
            Self::Mapped(map) => map.len() / 4,
        }
    }

    /// Whether the split has no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id at `index`.
    ///
    /// # Panics
    ///
    /// When `index >= len()`.
    pub fn get(&self, index: usize) -> u32 {
        match self {
            Self::Memory(ids) => ids[index],
            Self::Mapped(map) => {
                let bytes = &map[4 * index..4 * index + 4];
                u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
            }
        }
    }

    /// `len` ids from `start`, as the backends' token type.
    ///
    /// # Panics
    ///
    /// When the window reaches past the end.
    pub fn window(&self, start: usize, len: usize) -> Vec<i64> {
        (start..start + len)
            .map(|i| i64::from(self.get(i)))
            .collect()
    }

    /// Maps the token file at `path`, checking that it holds whole ids below `vocab`.
    ///
    /// # Errors
    ///
    /// [`TextError::Io`] when it cannot be read, [`TextError::CorruptTokens`] naming what is
    /// wrong.
    pub fn map(path: &Path, vocab: usize) -> Result<Self, TextError> {
        let file = File::open(path).map_err(|e| TextError::io("opening", path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| TextError::io("reading", path, e))?;
        if !meta.is_file() {
            return Err(TextError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let corrupt = |reason: String| TextError::CorruptTokens {
            path: path.to_path_buf(),
            reason,
        };
        if meta.len() % 4 != 0 {
            return Err(corrupt(format!(
                "{} bytes is not a whole number of 4-byte ids",
                meta.len()
            )));
        }
        let tokens = Self::Mapped(map_read_only(&file, path)?);
        if let Some(at) = (0..tokens.len()).find(|&i| tokens.get(i) as usize >= vocab) {
            return Err(corrupt(format!(
                "id {} at position {at} is outside the tokenizer's {vocab} tokens",
                tokens.get(at)
            )));
        }
        Ok(tokens)
    }
}

/// Maps `file` for reading.
///
/// The map is of a file this run wrote into its own folder and only reads; were another
/// process to shorten the file while the run reads it, the read would fault, as any program
/// reading a memory-mapped file would.
#[allow(unsafe_code)]
fn map_read_only(file: &File, path: &Path) -> Result<memmap2::Mmap, TextError> {
    // SAFETY: the map is read-only and its bytes are read as plain integers; the file is the
    // run's own (see above).
    unsafe { memmap2::Mmap::map(file) }.map_err(|e| TextError::io("mapping", path, e))
}

/// Writes ids to a token file: to a temporary file beside `path`, renamed to `path` when done.
pub struct TokenWriter {
    out: BufWriter<File>,
    partial: PathBuf,
    path: PathBuf,
    written: usize,
}

impl TokenWriter {
    /// Starts the file `path`.
    ///
    /// # Errors
    ///
    /// [`TextError::Io`] when it cannot be created.
    pub fn create(path: &Path) -> Result<Self, TextError> {
        let partial =
            crate::files::temporary(path).map_err(|e| TextError::io("creating", path, e))?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&partial)
            .map_err(|e| TextError::io("creating", &partial, e))?;
        Ok(Self {
            out: BufWriter::new(file),
            partial,
            path: path.to_path_buf(),
            written: 0,
        })
    }

    /// Appends `ids`.
    ///
    /// # Errors
    ///
    /// [`TextError::Io`] when the write fails.
    pub fn write(&mut self, ids: &[u32]) -> Result<(), TextError> {
        for id in ids {
            self.out
                .write_all(&id.to_le_bytes())
                .map_err(|e| TextError::io("writing", &self.partial, e))?;
        }
        self.written += ids.len();
        Ok(())
    }

    /// Ids written so far.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Flushes, syncs and renames the file into place.
    ///
    /// # Errors
    ///
    /// [`TextError::Io`] when any of these fails.
    pub fn finish(self) -> Result<PathBuf, TextError> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| TextError::io("writing", &self.partial, e.into_error()))?;
        file.sync_all()
            .map_err(|e| TextError::io("writing", &self.partial, e))?;
        std::fs::rename(&self.partial, &self.path)
            .map_err(|e| TextError::io("renaming", &self.partial, e))?;
        Ok(self.path)
    }
}
