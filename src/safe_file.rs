//! Files llmsurge creates where another local user may also write (the temporary
//! directory, a shared output directory): created exclusively, never through a symlink,
//! readable by the owner only while they are written, and scrubbed of the run's secrets.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `path` as a new file, mode 0600: fails if anything (a file, a planted
/// symlink) is already there, and never follows a symlink in the last component.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// The process's umask, read once from /proc (reading it with umask(2) would change it
/// for a moment under the other threads); 022 when /proc does not say.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}

/// Whether `path` is a markup document (HTML, SVG, XML) by its extension.
fn is_markup(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["html", "svg", "xml"].contains(&e.to_ascii_lowercase().as_str()))
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the new one. The
/// temporary file beside it is created exclusively (random name, mode 0600, no symlink
/// followed) and renamed over `path` (a symlink there is replaced, not followed); the
/// finished file gets the usual mode (0644 less the umask). Whatever writer made it,
/// text is scrubbed of the run's registered secrets on the way, and a markup document
/// (`.html`, `.svg`, `.xml`) gets the control characters XML forbids as visible escapes
/// ([`llmsurge_proto::inert::xml_chars`]): its templates and libraries escape the
/// entities but pass those through (a model id, a label), which leaves SVG and JUnit
/// ill-formed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    let bytes = llmsurge_proto::redact::scrub_bytes(bytes);
    let bytes = match std::str::from_utf8(&bytes) {
        Ok(text) if is_markup(path) => match llmsurge_proto::inert::xml_chars(text) {
            std::borrow::Cow::Owned(clean) => std::borrow::Cow::Owned(clean.into_bytes()),
            std::borrow::Cow::Borrowed(_) => bytes,
        },
        _ => bytes,
    };
    // Through the plain file: tempfile's own writer adds the temporary path to every
    // error, and the message should name the report, once.
    tmp.as_file_mut().write_all(&bytes)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644 & !umask()))?;
    // On an error the temporary file is removed when `tmp` drops.
    tmp.persist(path).map(drop).map_err(|e| e.error)
}

/// Proves `dir` can take the run's files before any load: creates it, then creates and
/// removes a probe file in it. The error names the directory and what failed.
pub fn check_writable_dir(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    if dir.exists() && !dir.is_dir() {
        return Err(format!("{shown} exists and is not a directory"));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {shown}: {e}"))?;
    tempfile::Builder::new()
        .prefix(".llmsurge-write-check.")
        .tempfile_in(dir)
        .and_then(|mut f| f.write_all(b"ok").map(|()| f))
        .map(drop)
        .map_err(|e| format!("cannot write in {shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_symlink_is_neither_followed_nor_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(&victim, &planted).expect("symlink");
        assert!(create_new(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");

        // The report path itself a symlink: the link is replaced, the victim kept.
        write_atomic(&planted, b"report").expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
        assert_eq!(std::fs::read_to_string(&planted).expect("read"), "report");
        assert!(
            !std::fs::symlink_metadata(&planted)
                .expect("meta")
                .is_symlink()
        );
    }

    #[test]
    fn the_output_directory_is_checked_for_what_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").expect("file");
        let e = check_writable_dir(&file).expect_err("a file");
        assert!(e.contains("not a directory"), "{e}");
        check_writable_dir(&dir.path().join("new/sub")).expect("created");
        assert_eq!(
            std::fs::read_dir(dir.path().join("new/sub"))
                .expect("dir")
                .count(),
            0
        );
    }
}
