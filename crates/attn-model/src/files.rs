//! Reading the files a caller names: whole, within a bound, and only regular files; and the
//! rule for the files of a model folder, which may be links only to files inside it.
//!
//! [`read_bounded`] refuses what is not a regular file (a FIFO would block, a device or
//! `/dev/zero` would never end) before it opens it, and refuses a file longer than its bound
//! before it reads it.
//!
//! [`folder_file`] finds a file of a model folder, following a link only when its final target
//! is a regular file inside the folder itself, or, when the folder is a revision of Hugging
//! Face's cache (`.../models--org--name/snapshots/REV`, whose files are links
//! `../../blobs/HASH`), inside that repository's cache folder (the parent of `snapshots`).
//! A folder downloaded from elsewhere so cannot make this crate read `/etc/passwd` into a
//! prompt through a `chat_template.jinja` that links to it.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Nothing is at the path.
    #[error("{} does not exist", path.display())]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// Something other than a regular file is at the path.
    #[error("{} is {kind}, not a regular file; only regular files are read", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is: `"a FIFO"`, `"a device"`, `"a folder"`, `"a socket"`.
        kind: &'static str,
    },
    /// A file longer than the bound on what is read of it.
    #[error(
        "{} holds {size} bytes, more than the {max} bytes read of such a file",
        path.display()
    )]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its length in bytes (at least this many, when it grew while it was read).
        size: u64,
        /// The most bytes read.
        max: u64,
    },
    /// A file of a model folder that is a link to a file outside the folder (or outside the
    /// repository's cache folder, for a revision of Hugging Face's cache).
    #[error(
        "{} is a link to {}, outside {}; a model folder's files may only link to files inside \
         it",
        link.display(),
        target.display(),
        allowed.display()
    )]
    LinkOutside {
        /// The link.
        link: PathBuf,
        /// Its final target, every link followed.
        target: PathBuf,
        /// The folder its target must lie in.
        allowed: PathBuf,
    },
    /// A link whose target does not exist.
    #[error("{} is a link to {}, which does not exist", link.display(), target.display())]
    BrokenLink {
        /// The link.
        link: PathBuf,
        /// Its target, as the link gives it.
        target: PathBuf,
    },
    /// The system could not read the file.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

impl FileError {
    /// The file the error is about (for a link, the link).
    pub fn path(&self) -> &Path {
        match self {
            Self::NotFound { path }
            | Self::NotRegular { path, .. }
            | Self::TooLarge { path, .. }
            | Self::Io { path, .. } => path,
            Self::LinkOutside { link, .. } | Self::BrokenLink { link, .. } => link,
        }
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            Self::NotFound {
                path: path.to_path_buf(),
            }
        } else {
            Self::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

/// The bytes of the regular file at `path` (a link is followed), refused when it is anything
/// else (a FIFO, a device, a folder: nothing that could block or never end) or longer than
/// `max_bytes`. Both are checked before the file is opened; a file that grows after the check
/// is read up to `max_bytes` and one byte more, and refused.
///
/// # Errors
/// [`FileError::NotFound`], [`FileError::NotRegular`] naming what the path is,
/// [`FileError::TooLarge`] with the length and the bound, [`FileError::Io`].
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileError> {
    let metadata = regular_file(path)?;
    let too_large = |size: u64| FileError::TooLarge {
        path: path.to_path_buf(),
        size,
        max: max_bytes,
    };
    if metadata.len() > max_bytes {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .map_err(|e| FileError::io(path, e))?
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The metadata of the regular file at `path` (a link is followed), read without opening it.
///
/// # Errors
/// [`FileError::NotFound`], [`FileError::NotRegular`] naming what the path is,
/// [`FileError::Io`].
pub fn regular_file(path: &Path) -> Result<fs::Metadata, FileError> {
    let metadata = fs::metadata(path).map_err(|e| FileError::io(path, e))?;
    if !metadata.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: describe(metadata.file_type()),
        });
    }
    Ok(metadata)
}

/// The file `name` of the model folder `folder`: `None` when nothing is there, its path when it
/// is a regular file, or a link whose final target is a regular file inside the folder (or,
/// when the folder is `.../snapshots/REV` of Hugging Face's cache, inside the repository's
/// cache folder, the parent of `snapshots`).
///
/// # Errors
/// [`FileError::LinkOutside`] naming the link and its target, [`FileError::BrokenLink`],
/// [`FileError::NotRegular`] naming what the file is, [`FileError::Io`].
pub fn folder_file(folder: &Path, name: &str) -> Result<Option<PathBuf>, FileError> {
    let path = folder.join(name);
    let entry = match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::io(&path, e)),
        Ok(entry) => entry,
    };
    let target = if entry.file_type().is_symlink() {
        match fs::canonicalize(&path) {
            Ok(target) => Some(target),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FileError::BrokenLink {
                    target: fs::read_link(&path).unwrap_or_default(),
                    link: path,
                });
            }
            Err(e) => return Err(FileError::io(&path, e)),
        }
    } else {
        None
    };
    // What the file is comes first: a link to `/dev/zero` is a device wherever it points.
    regular_file(&path)?;
    if let Some(target) = target {
        let allowed = links_may_reach(folder)?;
        if !target.starts_with(&allowed) {
            return Err(FileError::LinkOutside {
                link: path,
                target,
                allowed,
            });
        }
    }
    Ok(Some(path))
}

/// The folder the links of `folder` may point into: the folder itself, or for
/// `.../snapshots/REV` the repository's cache folder that holds `snapshots` and `blobs`; every
/// link in the path resolved.
fn links_may_reach(folder: &Path) -> Result<PathBuf, FileError> {
    let folder = fs::canonicalize(folder).map_err(|e| FileError::io(folder, e))?;
    let repository = folder
        .parent()
        .filter(|snapshots| {
            snapshots
                .file_name()
                .is_some_and(|name| name == "snapshots")
        })
        .and_then(Path::parent);
    Ok(match repository {
        Some(repository) => repository.to_path_buf(),
        None => folder,
    })
}

/// What a file that is not a regular file is, for an error.
pub(crate) fn describe(file_type: fs::FileType) -> &'static str {
    if file_type.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    "something other than a regular file"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty folder under the system's temporary folder.
    fn scratch(name: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("attn-model-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).expect("a scratch folder");
        folder
    }

    #[test]
    fn read_bounded_reads_up_to_the_bound() {
        let folder = scratch("bounded");
        let path = folder.join("file.txt");
        fs::write(&path, "12345").expect("written");
        assert_eq!(read_bounded(&path, 5).expect("reads"), b"12345");
        let err = read_bounded(&path, 4).expect_err("one byte too many");
        assert!(
            matches!(
                err,
                FileError::TooLarge {
                    size: 5,
                    max: 4,
                    ..
                }
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("file.txt") && text.contains("5 bytes") && text.contains("the 4 bytes"),
            "{text}"
        );
        let missing = folder.join("missing.txt");
        let err = read_bounded(&missing, 5).expect_err("nothing there");
        assert!(matches!(err, FileError::NotFound { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!("{} does not exist", missing.display())
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn a_folder_is_not_read() {
        let folder = scratch("folder");
        let err = read_bounded(&folder, 5).expect_err("a folder");
        assert_eq!(
            err.to_string(),
            format!(
                "{} is a folder, not a regular file; only regular files are read",
                folder.display()
            )
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_and_a_device_are_refused_without_being_opened() {
        let folder = scratch("fifo");
        let fifo = folder.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo failed");
        // Opening the FIFO would block this thread until a writer came.
        let err = read_bounded(&fifo, 5).expect_err("a FIFO");
        assert!(
            matches!(err, FileError::NotRegular { kind: "a FIFO", .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("is a FIFO, not a regular file"),
            "{err}"
        );
        let zero = folder.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("a link");
        let err = read_bounded(&zero, 5).expect_err("a device");
        assert!(
            err.to_string()
                .contains(&format!("{} is a device", zero.display())),
            "{err}"
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_out_of_the_folder_is_refused_naming_link_and_target() {
        use std::os::unix::fs::symlink;
        let root = scratch("links");
        let folder = root.join("model");
        fs::create_dir_all(folder.join("sub")).expect("a folder");
        fs::write(root.join("secret.txt"), "outside").expect("written");
        fs::write(folder.join("sub/inside.txt"), "inside").expect("written");
        fs::write(folder.join("plain.txt"), "plain").expect("written");
        symlink(root.join("secret.txt"), folder.join("out.txt")).expect("a link");
        symlink("../secret.txt", folder.join("relative_out.txt")).expect("a link");
        symlink("sub/inside.txt", folder.join("in.txt")).expect("a link");
        // A link to a link inside that leads out.
        symlink("out.txt", folder.join("chain.txt")).expect("a link");
        symlink("missing.txt", folder.join("broken.txt")).expect("a link");

        assert_eq!(folder_file(&folder, "absent.txt").expect("fine"), None);
        assert_eq!(
            folder_file(&folder, "plain.txt").expect("a file"),
            Some(folder.join("plain.txt"))
        );
        assert_eq!(
            folder_file(&folder, "in.txt").expect("a link inside"),
            Some(folder.join("in.txt"))
        );
        let secret = fs::canonicalize(root.join("secret.txt")).expect("exists");
        for name in ["out.txt", "relative_out.txt", "chain.txt"] {
            let err = folder_file(&folder, name).expect_err(name);
            assert!(
                matches!(err, FileError::LinkOutside { .. }),
                "{name}: {err}"
            );
            let text = err.to_string();
            assert!(
                text.contains(&folder.join(name).display().to_string())
                    && text.contains(&secret.display().to_string()),
                "{name}: {text}"
            );
        }
        let err = folder_file(&folder, "broken.txt").expect_err("broken");
        assert!(
            err.to_string()
                .contains("missing.txt, which does not exist"),
            "{err}"
        );
        let err = folder_file(&folder, "sub").expect_err("a folder");
        assert!(err.to_string().contains("is a folder"), "{err}");
        let _ = fs::remove_dir_all(&root);
    }

    #[cfg(unix)]
    #[test]
    fn links_of_a_hugging_face_cache_revision_reach_its_blobs() {
        use std::os::unix::fs::symlink;
        let root = scratch("hf-cache");
        let repository = root.join("models--org--name");
        let revision = repository.join("snapshots/0123abcd");
        fs::create_dir_all(&revision).expect("a folder");
        fs::create_dir_all(repository.join("blobs")).expect("a folder");
        fs::write(repository.join("blobs/f00d"), "{}").expect("written");
        fs::write(root.join("elsewhere"), "{}").expect("written");
        symlink("../../blobs/f00d", revision.join("config.json")).expect("a link");
        symlink("../../../elsewhere", revision.join("tokenizer_config.json")).expect("a link");
        assert_eq!(
            folder_file(&revision, "config.json").expect("a blob"),
            Some(revision.join("config.json"))
        );
        let err = folder_file(&revision, "tokenizer_config.json").expect_err("out of the cache");
        assert!(
            matches!(&err, FileError::LinkOutside { allowed, .. }
                if *allowed == fs::canonicalize(&repository).expect("exists")),
            "{err}"
        );
        // Outside a `snapshots` folder, the blobs are outside.
        let copy = root.join("plain_folder");
        fs::create_dir_all(&copy).expect("a folder");
        symlink(repository.join("blobs/f00d"), copy.join("config.json")).expect("a link");
        assert!(matches!(
            folder_file(&copy, "config.json"),
            Err(FileError::LinkOutside { .. })
        ));
        let _ = fs::remove_dir_all(&root);
    }
}
