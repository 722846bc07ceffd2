//! Writing files so that nothing but the file named changes: every file is written whole into a
//! temporary file beside it and renamed into place, and no write goes through a symbolic link.
//!
//! A rename replaces a link with the new file instead of writing where the link points, and the
//! temporary file is created with `O_EXCL`, which refuses a link already standing at its name.
//! A reader therefore sees the old file or the new one, never half of one, and a link planted in
//! a run folder can neither redirect a write nor be written through.
//!
//! Reading is bounded: [`read_bounded`] refuses what is not a regular file, and a file longer
//! than its kind may be, before it reads a byte.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::text::TextError;

/// A fresh, empty file beside `path`, created here and nowhere else (`O_EXCL`): its name is
/// `.tmp-`, the process id and a counter, then the file's own name, whose extension it keeps
/// (writers such as the PNG encoder choose the format by it).
///
/// # Errors
///
/// When it cannot be created.
pub fn temporary(path: &Path) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    loop {
        let mut tmp = std::ffi::OsString::from(format!(
            ".tmp-{}-{}-",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        tmp.push(name);
        let tmp = path.with_file_name(tmp);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(_) => return Ok(tmp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Replaces `path` with what `write` writes into the temporary file it is given, through a
/// rename. When `write` fails, the temporary file is removed and `path` is left as it was.
///
/// # Errors
///
/// `write`'s error, or `io` of the creation or rename failure.
pub fn replace_with<E>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
    io: impl FnOnce(&Path, std::io::Error) -> E,
) -> Result<(), E> {
    let tmp = match temporary(path) {
        Ok(tmp) => tmp,
        Err(e) => return Err(io(path, e)),
    };
    if let Err(e) = write(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&tmp, e)
    })
}

/// Replaces `path` with `bytes`, flushed to the disk before the rename.
///
/// # Errors
///
/// The failure, with the path it concerns.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), (PathBuf, std::io::Error)> {
    replace_with(
        path,
        |tmp| {
            let mut file = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(tmp)
                .map_err(|e| (tmp.to_path_buf(), e))?;
            file.write_all(bytes)
                .and_then(|()| file.sync_data())
                .map_err(|e| (tmp.to_path_buf(), e))
        },
        |p, e| (p.to_path_buf(), e),
    )
}

/// Reads the regular file `path`, refusing anything else and anything over `limit` bytes
/// before reading it.
///
/// # Errors
///
/// [`TextError::NotAFile`], [`TextError::TooLarge`], or [`TextError::Io`].
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, TextError> {
    let meta = std::fs::metadata(path).map_err(|e| TextError::io("reading", path, e))?;
    if !meta.is_file() {
        return Err(TextError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > limit {
        return Err(TextError::TooLarge {
            path: path.to_path_buf(),
            bytes: meta.len(),
            limit,
        });
    }
    let file = std::fs::File::open(path).map_err(|e| TextError::io("opening", path, e))?;
    let mut bytes = Vec::new();
    // A file that grows after the check is read up to the limit and one byte more.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| TextError::io("reading", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(TextError::TooLarge {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// What stands at a path inside a folder, seen without following links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A symbolic link, whatever it points at.
    Link,
    /// A FIFO, socket or device.
    Other,
}

/// What stands at `path`, links not followed.
///
/// # Errors
///
/// When it cannot be examined for another reason than being missing.
pub fn entry(path: &Path) -> std::io::Result<Entry> {
    match path.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => Ok(Entry::Link),
        Ok(meta) if meta.is_dir() => Ok(Entry::Folder),
        Ok(meta) if meta.is_file() => Ok(Entry::File),
        Ok(_) => Ok(Entry::Other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Entry::Missing),
        Err(e) => Err(e),
    }
}

/// Why a path inside a folder cannot be written or removed safely.
#[derive(Debug)]
pub enum Unsafe {
    /// The path, or a folder on the way to it, is a symbolic link.
    Link(PathBuf),
    /// A folder on the way is a file, or the path is a folder, FIFO or device.
    NotFile(PathBuf),
    /// The relative path is absolute or climbs out with `..`.
    Outside(String),
    /// It could not be examined.
    Io(PathBuf, std::io::Error),
}

/// `relative` (`/`-separated) inside `root`, checked without following any link: each folder on
/// the way is a real folder or missing, and the path itself a regular file or missing. Returns
/// the path and what stands there ([`Entry::File`] or [`Entry::Missing`]).
///
/// # Errors
///
/// [`Unsafe`] naming the first part that is a link, not a folder, or not a file.
pub fn inside(root: &Path, relative: &str) -> Result<(PathBuf, Entry), Unsafe> {
    let parts = Path::new(relative).components().collect::<Vec<_>>();
    if parts.is_empty() || !parts.iter().all(|c| matches!(c, Component::Normal(_))) {
        return Err(Unsafe::Outside(relative.to_string()));
    }
    let mut path = root.to_path_buf();
    let last = parts.len() - 1;
    for (i, part) in parts.into_iter().enumerate() {
        path.push(part);
        let found = entry(&path).map_err(|e| Unsafe::Io(path.clone(), e))?;
        match (found, i == last) {
            (Entry::Missing, _) => {
                return Ok((root.join(relative), Entry::Missing));
            }
            (Entry::Link, _) => return Err(Unsafe::Link(path)),
            (Entry::Folder, false) | (Entry::File, true) => {}
            _ => return Err(Unsafe::NotFile(path)),
        }
    }
    Ok((path, Entry::File))
}

/// Creates the folders of `relative` (`/`-separated, the folders only) under `root` one by one,
/// refusing to go through a link or a file.
///
/// # Errors
///
/// As [`inside`], and the creation's failure.
pub fn create_folders(root: &Path, relative: &str) -> Result<(), Unsafe> {
    let mut path = root.to_path_buf();
    for part in Path::new(relative).components() {
        let Component::Normal(part) = part else {
            return Err(Unsafe::Outside(relative.to_string()));
        };
        path.push(part);
        match entry(&path).map_err(|e| Unsafe::Io(path.clone(), e))? {
            Entry::Folder => {}
            Entry::Missing => match std::fs::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Unsafe::Io(path, e)),
            },
            Entry::Link => return Err(Unsafe::Link(path)),
            Entry::File | Entry::Other => return Err(Unsafe::NotFile(path)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root(name: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("attn-train-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("created");
        root
    }

    #[test]
    fn a_link_is_replaced_not_written_through() {
        let root = temp_root("link");
        let victim = root.join("victim.txt");
        std::fs::write(&victim, "precious").expect("written");
        let link = root.join("plot.png");
        std::os::unix::fs::symlink(&victim, &link).expect("linked");
        write_atomically(&link, b"new").expect("replaced");
        assert_eq!(std::fs::read_to_string(&victim).expect("kept"), "precious");
        assert_eq!(std::fs::read_to_string(&link).expect("a file now"), "new");
        assert_eq!(entry(&link).expect("examined"), Entry::File);
        let names = std::fs::read_dir(&root).expect("listed").count();
        assert_eq!(names, 2, "no temporary file is left behind");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let root = temp_root("fail");
        let path = root.join("config.json");
        std::fs::write(&path, "old").expect("written");
        let result = replace_with(
            &path,
            |tmp| {
                std::fs::write(tmp, "half").expect("written");
                Err("the writer failed")
            },
            |_, _| "io",
        );
        assert_eq!(result, Err("the writer failed"));
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), "old");
        assert_eq!(std::fs::read_dir(&root).expect("listed").count(), 1);
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn inside_refuses_links_on_the_way_and_paths_that_leave() {
        let root = temp_root("inside");
        let outside = temp_root("inside-outside");
        std::fs::create_dir_all(root.join("attention")).expect("folder");
        std::os::unix::fs::symlink(&outside, root.join("checkpoints")).expect("linked");
        std::fs::write(root.join("attention/a.png"), "x").expect("written");

        let (path, found) = inside(&root, "attention/a.png").expect("a file inside");
        assert_eq!((path, found), (root.join("attention/a.png"), Entry::File));
        assert_eq!(
            inside(&root, "attention/b.png").expect("missing is fine").1,
            Entry::Missing
        );
        assert!(matches!(
            inside(&root, "checkpoints/latest"),
            Err(Unsafe::Link(p)) if p == root.join("checkpoints")
        ));
        assert!(matches!(
            inside(&root, "attention"),
            Err(Unsafe::NotFile(_))
        ));
        assert!(matches!(
            inside(&root, "attention/a.png/x"),
            Err(Unsafe::NotFile(_))
        ));
        for bad in ["../x", "/etc/passwd", "a/../../x", ""] {
            assert!(
                matches!(inside(&root, bad), Err(Unsafe::Outside(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            create_folders(&root, "checkpoints/step-000010"),
            Err(Unsafe::Link(_))
        ));
        create_folders(&root, "attention/deeper/still").expect("created");
        assert!(root.join("attention/deeper/still").is_dir());
        assert_eq!(std::fs::read_dir(&outside).expect("listed").count(), 0);
        for dir in [root, outside] {
            std::fs::remove_dir_all(dir).expect("cleanup");
        }
    }
}
