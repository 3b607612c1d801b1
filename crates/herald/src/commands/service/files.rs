//! Writing and removing a set of files all together: a failure part way leaves none of the
//! new files behind, so a service is never half installed.

use std::fs::{self, DirBuilder, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A file or directory that could not be written or removed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {error}", path.display())]
pub struct FileError {
    /// `write` or `remove`.
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// Why (not a `source`: the message already says it).
    pub error: io::Error,
}

impl FileError {
    /// Whether running with more privileges would help.
    pub fn not_permitted(&self) -> bool {
        self.error.kind() == io::ErrorKind::PermissionDenied
    }
}

/// Writes every file (mode 0644), creating missing directories. Each is written whole to a
/// temporary file in its own directory first and renamed into place only once all are; on
/// any failure what was written and created is removed again.
pub fn write_all(files: &[(&Path, &str)]) -> Result<(), FileError> {
    let mut made = Vec::new();
    let result = stage_and_rename(files, &mut made);
    if result.is_err() {
        for dir in made.iter().rev() {
            // Best effort: the directory was empty when it was made, and nothing else of
            // ours is left in it.
            let _ = fs::remove_dir(dir);
        }
    }
    result
}

fn stage_and_rename(files: &[(&Path, &str)], made: &mut Vec<PathBuf>) -> Result<(), FileError> {
    let mut staged = Vec::with_capacity(files.len());
    for &(path, contents) in files {
        let dir = path.parent().unwrap_or(Path::new("/"));
        create_dirs(dir, made)?;
        let fail = |error| FileError { action: "write", path: path.to_owned(), error };
        let mut temp =
            tempfile::Builder::new().prefix(".herald-").tempfile_in(dir).map_err(fail)?;
        temp.write_all(contents.as_bytes()).map_err(fail)?;
        temp.as_file().set_permissions(Permissions::from_mode(0o644)).map_err(fail)?;
        temp.as_file().sync_all().map_err(fail)?;
        staged.push((temp, path));
    }
    // Only renames inside directories just written to are left. A file being replaced is
    // moved aside first, so that should a rename fail anyway, the files already renamed are
    // removed and what they replaced is put back: a failed reinstall leaves the old install.
    let mut renamed: Vec<(&Path, Option<PathBuf>)> = Vec::with_capacity(staged.len());
    for (temp, path) in staged {
        let previous = match move_aside(path) {
            Ok(previous) => previous,
            Err(error) => {
                restore(&renamed);
                return Err(FileError { action: "write", path: path.to_owned(), error });
            }
        };
        renamed.push((path, previous));
        if let Err(e) = temp.persist(path) {
            restore(&renamed);
            return Err(FileError { action: "write", path: path.to_owned(), error: e.error });
        }
    }
    for (_, previous) in renamed {
        if let Some(previous) = previous {
            let _ = fs::remove_file(previous);
        }
    }
    Ok(())
}

/// Renames an existing `path` to a hidden name beside it; `None` when there is none.
fn move_aside(path: &Path) -> io::Result<Option<PathBuf>> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let aside = path.with_file_name(format!(".{name}.herald-previous"));
    match fs::rename(path, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Undoes the renames of a failed write, newest first.
fn restore(renamed: &[(&Path, Option<PathBuf>)]) {
    for (path, previous) in renamed.iter().rev() {
        let _ = fs::remove_file(path);
        if let Some(previous) = previous {
            let _ = fs::rename(previous, path);
        }
    }
}

/// Creates `dir` and its missing parents, recording each one made, outermost first.
fn create_dirs(dir: &Path, made: &mut Vec<PathBuf>) -> Result<(), FileError> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for dir in missing.into_iter().rev() {
        DirBuilder::new().mode(0o755).create(dir).map_err(|error| FileError {
            action: "write",
            path: dir.to_owned(),
            error,
        })?;
        made.push(dir.to_owned());
    }
    Ok(())
}

/// Removes every file, or none: each is first renamed aside in its own directory, and all are
/// put back if one cannot be.
pub fn remove_all(paths: &[&Path]) -> Result<(), FileError> {
    let mut aside: Vec<(&Path, PathBuf)> = Vec::with_capacity(paths.len());
    for &path in paths {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let temp = path.with_file_name(format!(".{name}.herald-removing"));
        if let Err(error) = fs::rename(path, &temp) {
            for (original, temp) in aside.iter().rev() {
                let _ = fs::rename(temp, original);
            }
            return Err(FileError { action: "remove", path: path.to_owned(), error });
        }
        aside.push((path, temp));
    }
    for (path, temp) in aside {
        fs::remove_file(&temp).map_err(|error| FileError {
            action: "remove",
            path: path.to_owned(),
            error,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_part_way_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("new/a.conf");
        // A file where the second file's directory should be: creating it fails.
        fs::write(dir.path().join("blocked"), "").unwrap();
        let bad = dir.path().join("blocked/b.conf");
        let err = write_all(&[(&good, "a"), (&bad, "b")]).unwrap_err();
        assert_eq!(err.path, bad, "{err}");
        let left: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["blocked"]);
    }

    #[test]
    fn files_are_written_and_removed_together() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("x/a.conf"), dir.path().join("y/z/b.conf"));
        write_all(&[(&a, "one\n"), (&b, "two\n")]).unwrap();
        assert_eq!(fs::read_to_string(&a).unwrap(), "one\n");
        assert_eq!(fs::metadata(&b).unwrap().permissions().mode() & 0o777, 0o644);
        let missing = dir.path().join("x/missing.conf");
        let err = remove_all(&[&a, &missing]).unwrap_err();
        assert_eq!(err.path, missing);
        assert!(a.exists(), "a removal that fails part way puts the others back");
        remove_all(&[&a, &b]).unwrap();
        assert!(!a.exists() && !b.exists());
        assert_eq!(fs::read_dir(dir.path().join("x")).unwrap().count(), 0);
    }

    #[test]
    fn a_failed_reinstall_leaves_the_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.conf"), dir.path().join("b.conf"));
        fs::write(&a, "old a\n").unwrap();
        fs::write(&b, "old b\n").unwrap();
        // What b would be moved aside to is taken: replacing b fails after a was replaced.
        let blocker = dir.path().join(".b.conf.herald-previous");
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("inside"), "").unwrap();
        let err = write_all(&[(&a, "new a\n"), (&b, "new b\n")]).unwrap_err();
        assert_eq!(err.path, b, "{err}");
        assert_eq!(fs::read_to_string(&a).unwrap(), "old a\n");
        assert_eq!(fs::read_to_string(&b).unwrap(), "old b\n");
        let mut left: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, [".b.conf.herald-previous", "a.conf", "b.conf"]);
    }
}
