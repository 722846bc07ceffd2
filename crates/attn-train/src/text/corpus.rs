//! The text files of a run, read as one stream of UTF-8 chunks, each on its side of the split.
//!
//! The files are concatenated in the order given (a folder stands for its regular files, sorted
//! by name). The first 90% of the bytes are the training split and the rest the validation
//! split, as nanoGPT's `prepare.py` splits its text (there by characters; here by bytes, the
//! cut moved forward to the next character boundary, which is the same for ASCII text).
//!
//! Files are read in chunks of [`CHUNK_BYTES`] and never held whole, so a corpus larger than
//! memory can be tokenized. Each chunk ends at a line break where the chunk has one, so that BPE
//! never sees a word cut in two by the reading.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::TextError;

/// Bytes read at a time.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The fraction of the text that trains; the rest validates.
pub const TRAIN_FRACTION: f64 = 0.9;

/// The side of the split a chunk lies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first [`TRAIN_FRACTION`] of the bytes.
    Train,
    /// The rest.
    Validation,
}

/// One piece of the text, whole characters only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Its side of the split.
    pub side: Side,
    /// The text.
    pub text: String,
}

/// The files of a corpus, in reading order, with their sizes.
#[derive(Clone, Debug)]
pub struct Sources {
    files: Vec<(PathBuf, u64)>,
    lossy: bool,
}

impl Sources {
    /// The files of `paths`: each a regular file, or a folder standing for the regular files
    /// in it (sorted by name, not descending into subfolders).
    ///
    /// # Errors
    ///
    /// [`TextError::NoData`] when `paths` names no file, [`TextError::NotAFile`] for a path that
    /// is neither a regular file nor a folder (a FIFO, a device), [`TextError::Empty`] for an
    /// empty file, [`TextError::Io`] when a path cannot be read.
    pub fn open(paths: &[PathBuf], lossy: bool) -> Result<Self, TextError> {
        let mut files = Vec::new();
        for path in paths {
            let meta = std::fs::metadata(path).map_err(|e| TextError::io("reading", path, e))?;
            if meta.is_dir() {
                let mut inside = Vec::new();
                let entries =
                    std::fs::read_dir(path).map_err(|e| TextError::io("listing", path, e))?;
                for entry in entries {
                    let entry = entry.map_err(|e| TextError::io("listing", path, e))?;
                    let file = entry.path();
                    let meta =
                        std::fs::metadata(&file).map_err(|e| TextError::io("reading", &file, e))?;
                    if meta.is_file() {
                        inside.push((file, meta.len()));
                    }
                }
                if inside.is_empty() {
                    return Err(TextError::NoData {
                        reason: format!("the folder {} holds no regular file", path.display()),
                    });
                }
                inside.sort();
                files.extend(inside);
            } else if meta.is_file() {
                files.push((path.clone(), meta.len()));
            } else {
                return Err(TextError::NotAFile { path: path.clone() });
            }
        }
        if files.is_empty() {
            return Err(TextError::NoData {
                reason: "no --data file was given".into(),
            });
        }
        if let Some((path, _)) = files.iter().find(|(_, len)| *len == 0) {
            return Err(TextError::Empty { path: path.clone() });
        }
        Ok(Self { files, lossy })
    }

    /// The files, in reading order.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(path, _)| path.as_path())
    }

    /// Bytes in all the files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, len)| len).sum()
    }

    /// The byte of the concatenation where the validation split starts (before moving to a
    /// character boundary).
    pub fn split_at(&self) -> u64 {
        (self.total_bytes() as f64 * TRAIN_FRACTION) as u64
    }

    /// The text as chunks, in order: the training split's, then the validation split's.
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks {
            sources: self,
            file: 0,
            reader: None,
            carry: Vec::new(),
            read_in_file: 0,
            offset: 0,
            split_at: self.split_at(),
            pending: None,
        }
    }
}

/// The chunks of [`Sources::chunks`].
pub struct Chunks<'a> {
    sources: &'a Sources,
    /// The file being read.
    file: usize,
    reader: Option<File>,
    /// Bytes read but not yet returned: an incomplete character, or text after the last line
    /// break of the previous read.
    carry: Vec<u8>,
    /// Bytes of the current file read so far.
    read_in_file: u64,
    /// Bytes of the concatenation returned so far (the start of `carry`).
    offset: u64,
    split_at: u64,
    /// The validation part of a chunk that straddled the split.
    pending: Option<Chunk>,
}

impl Chunks<'_> {
    /// Reads the next piece of the current file into `carry`; false at its end.
    fn fill(&mut self) -> Result<bool, TextError> {
        let (path, len) = &self.sources.files[self.file];
        if self.reader.is_none() {
            self.reader = Some(File::open(path).map_err(|e| TextError::io("opening", path, e))?);
        }
        let reader = self.reader.as_mut().expect("opened above");
        let start = self.carry.len();
        self.carry.resize(start + CHUNK_BYTES, 0);
        let n = reader
            .read(&mut self.carry[start..])
            .map_err(|e| TextError::io("reading", path, e))?;
        self.carry.truncate(start + n);
        if let Some(at) = self.carry[start..].iter().position(|&b| b == 0) {
            return Err(TextError::Binary {
                path: path.clone(),
                offset: self.read_in_file + at as u64,
            });
        }
        self.read_in_file += n as u64;
        // A file that grew while read is read up to its size when opened.
        if self.read_in_file > *len {
            let extra = (self.read_in_file - len) as usize;
            self.carry.truncate(self.carry.len() - extra);
            self.read_in_file = *len;
        }
        Ok(n > 0 && self.read_in_file <= *len)
    }

    /// The next chunk of text, whole characters up to a line break where there is one.
    fn next_text(&mut self) -> Result<Option<String>, TextError> {
        while self.file < self.sources.files.len() {
            let more = self.fill()?;
            let at_end = !more || self.read_in_file == self.sources.files[self.file].1;
            if self.carry.len() < CHUNK_BYTES && !at_end {
                continue;
            }
            // Where this chunk ends: everything at the end of the file, else after the last
            // line break, else after the last whole character.
            let end = if at_end {
                self.carry.len()
            } else {
                match self.carry.iter().rposition(|&b| b == b'\n') {
                    Some(at) if at > 0 => at + 1,
                    _ => self.carry.len(),
                }
            };
            let text = self.decode(end, at_end)?;
            if at_end {
                self.file += 1;
                self.reader = None;
                self.read_in_file = 0;
            }
            if !text.is_empty() {
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// The text of `carry[..end]` (all of it at the end of a file), leaving the rest and any
    /// incomplete character at its end in `carry`.
    fn decode(&mut self, end: usize, at_end: bool) -> Result<String, TextError> {
        let bytes = &self.carry[..end];
        // A character cut by the read is kept for the next one, unless the file ends there.
        let keep = if at_end { 0 } else { incomplete_tail(bytes) };
        let whole = &bytes[..end - keep];
        if let Err(e) = std::str::from_utf8(whole)
            && !self.sources.lossy
        {
            let (path, _) = &self.sources.files[self.file];
            let carry_start = self.read_in_file - self.carry.len() as u64;
            return Err(TextError::InvalidUtf8 {
                path: path.clone(),
                offset: carry_start + e.valid_up_to() as u64,
            });
        }
        let text = String::from_utf8_lossy(whole).into_owned();
        self.carry.drain(..end - keep);
        Ok(text)
    }
}

/// Bytes at the end of `bytes` that begin a character without finishing it (0 to 3).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for its start
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

impl Iterator for Chunks<'_> {
    type Item = Result<Chunk, TextError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(pending) = self.pending.take() {
            return Some(Ok(pending));
        }
        let text = match self.next_text() {
            Ok(Some(text)) => text,
            Ok(None) => return None,
            Err(e) => {
                // Nothing more after an error.
                self.file = self.sources.files.len();
                return Some(Err(e));
            }
        };
        let start = self.offset;
        self.offset += text.len() as u64;
        if self.offset <= self.split_at {
            return Some(Ok(Chunk {
                side: Side::Train,
                text,
            }));
        }
        if start >= self.split_at {
            return Some(Ok(Chunk {
                side: Side::Validation,
                text,
            }));
        }
        // The chunk straddles the split: cut it at the next character boundary.
        let mut cut = (self.split_at - start) as usize;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let (train, validation) = text.split_at(cut);
        self.pending = Some(Chunk {
            side: Side::Validation,
            text: validation.to_string(),
        });
        Some(Ok(Chunk {
            side: Side::Train,
            text: train.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("writes");
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("attn-corpus-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creates");
        dir
    }

    fn read_all(sources: &Sources) -> Result<(String, String), TextError> {
        let (mut train, mut validation) = (String::new(), String::new());
        for chunk in sources.chunks() {
            let chunk = chunk?;
            match chunk.side {
                Side::Train => train.push_str(&chunk.text),
                Side::Validation => validation.push_str(&chunk.text),
            }
        }
        Ok((train, validation))
    }

    #[test]
    fn files_concatenate_in_order_and_split_ninety_ten_at_a_character_boundary() {
        let dir = temp_dir("split");
        // 3 MiB and a bit, so that reads cut lines and characters: "é" is two bytes.
        let line = "Tout est bien, é!\n";
        let a = line.repeat(100_000);
        let b = "second file ".repeat(30_000);
        let first = write(&dir, "a.txt", a.as_bytes());
        let second = write(&dir, "b.txt", b.as_bytes());
        let sources = Sources::open(&[first, second], false).expect("opens");
        let (train, validation) = read_all(&sources).expect("reads");
        assert_eq!(format!("{train}{validation}"), format!("{a}{b}"));
        let split = (sources.total_bytes() as f64 * 0.9) as usize;
        assert!(
            train.len() >= split && train.len() < split + 4,
            "{}",
            train.len()
        );
        // A folder stands for its files in name order.
        let (train_dir, validation_dir) =
            read_all(&Sources::open(std::slice::from_ref(&dir), false).expect("opens"))
                .expect("reads");
        assert_eq!((train_dir, validation_dir), (train, validation));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn bad_files_are_named_with_what_and_where() {
        let dir = temp_dir("bad");
        let empty = write(&dir, "empty.txt", b"");
        let err = Sources::open(std::slice::from_ref(&empty), false).expect_err("empty");
        assert!(
            matches!(err, TextError::Empty { ref path } if *path == empty),
            "{err}"
        );

        let binary = write(&dir, "binary.bin", b"text then\0 binary");
        let sources = Sources::open(&[binary], false).expect("opens");
        let err = read_all(&sources).expect_err("binary");
        assert!(err.to_string().contains("byte offset 9"), "{err}");

        // A lone continuation byte at offset 6.
        let latin1 = write(&dir, "latin1.txt", b"caf\xc3\xa9 \xe9t\xc3\xa9\n");
        let err = read_all(&Sources::open(std::slice::from_ref(&latin1), false).expect("opens"))
            .expect_err("invalid");
        assert!(
            matches!(err, TextError::InvalidUtf8 { offset: 6, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--lossy"), "{err}");
        let (train, validation) =
            read_all(&Sources::open(&[latin1], true).expect("opens")).expect("lossy");
        assert_eq!(format!("{train}{validation}"), "café \u{fffd}té\n");

        // A character cut by the end of the file.
        let cut = write(&dir, "cut.txt", b"abc\xe2\x82");
        let err = read_all(&Sources::open(&[cut], false).expect("opens")).expect_err("truncated");
        assert!(
            matches!(err, TextError::InvalidUtf8 { offset: 3, .. }),
            "{err}"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
