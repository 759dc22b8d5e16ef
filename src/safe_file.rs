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

/// Creates or truncates a file the run writes as it goes (the request log) without
/// writing through another user's symlink: a link planted by someone else (in a shared
/// output directory) anywhere on the way, in a folder of the path or at its end, is
/// refused; the user's own and root's (`/dev/stdout`) are followed.
pub fn create_log(path: &Path) -> std::io::Result<File> {
    let (resolved, magic) = resolve_trusted(path)?;
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if !magic {
        // Resolved: no link is left to follow (one swapped in since is refused).
        options.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC);
    }
    options.open(resolved)
}

/// Most symbolic links one path may go through (Linux's own limit).
const MAX_LINKS: usize = 40;

/// `path` with every symbolic link on it followed, each checked to be the user's or
/// root's. `true` with a path under `/proc` whose link may name no file
/// (`/proc/self/fd/1` of a pipe): the kernel opens such a link itself.
fn resolve_trusted(path: &Path) -> std::io::Result<(std::path::PathBuf, bool)> {
    use std::collections::VecDeque;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Component, PathBuf};
    let me = nix::unistd::geteuid().as_raw();
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut pending: VecDeque<PathBuf> = absolute
        .components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut out = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        match part.components().next() {
            Some(Component::RootDir) => out = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::Normal(name)) => {
                let next = out.join(name);
                let link = std::fs::symlink_metadata(&next)
                    .ok()
                    .filter(|m| m.file_type().is_symlink());
                let Some(link) = link else {
                    out = next;
                    continue;
                };
                let owner = link.uid();
                if owner != me && owner != 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!(
                            "{} is a symbolic link of another user (uid {owner}); llmsurge does not write through it",
                            next.display()
                        ),
                    ));
                }
                if next.starts_with("/proc") {
                    let rest: PathBuf = pending.iter().collect();
                    return Ok((next.join(rest), true));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ELOOP));
                }
                for c in std::fs::read_link(&next)?.components().rev() {
                    pending.push_front(PathBuf::from(c.as_os_str()));
                }
            }
            _ => {}
        }
    }
    Ok((out, false))
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

/// Whether `path`'s extension is `ext` (any case).
fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Whether `path` is a markup document (HTML, SVG, XML) by its extension.
fn is_markup(path: &Path) -> bool {
    ["html", "svg", "xml"]
        .iter()
        .any(|e| has_extension(path, e))
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the new one. The
/// temporary file beside it is created exclusively (random name, mode 0600, no symlink
/// followed) and renamed over `path` (a symlink there is replaced, not followed); the
/// finished file gets the usual mode (0644 less the umask). Whatever writer made it,
/// text is scrubbed of the run's registered secrets on the way, and a markup document
/// (`.html`, `.svg`, `.xml`) gets the control characters XML forbids as visible escapes
/// ([`llmsurge_proto::inert::xml_chars`]): its templates and libraries escape the
/// entities but pass those through (a model id, a label), which leaves SVG and JUnit
/// ill-formed. A JSON document gets the characters its encoder leaves raw (DEL, C1, the
/// bidirectional overrides) as `\u` escapes, which read back the same.
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
    let inert = match std::str::from_utf8(&bytes) {
        Ok(text) if is_markup(path) => llmsurge_proto::inert::xml_chars(text),
        Ok(text) if has_extension(path, "json") => llmsurge_proto::inert::json_chars(text),
        _ => std::borrow::Cow::Borrowed(""),
    };
    let bytes = match inert {
        std::borrow::Cow::Owned(clean) => std::borrow::Cow::Owned(clean.into_bytes()),
        std::borrow::Cow::Borrowed(_) => bytes,
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
    fn a_log_writes_through_the_users_own_link_never_another_users() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let link = dir.path().join("requests.jsonl");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        // The user's own link (`--request-log` through a link they made) is followed.
        create_log(&link)
            .and_then(|mut f| f.write_all(b"log"))
            .expect("own link");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "log");
        // Another user's: refused, the victim untouched. Only root can make a link
        // another user owns; elsewhere the own-link half above is what runs.
        if nix::unistd::geteuid().is_root() {
            std::fs::write(&victim, "precious").expect("victim");
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).expect("lchown");
            assert_eq!(std::fs::symlink_metadata(&link).expect("meta").uid(), 65534);
            let e = create_log(&link).expect_err("another user's link");
            assert!(
                e.to_string().contains("symbolic link of another user"),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
            // Behind a link of the user's own, and as a folder of the path: refused too.
            let chain = dir.path().join("chain.jsonl");
            std::os::unix::fs::symlink(&link, &chain).expect("symlink");
            assert!(
                create_log(&chain).is_err(),
                "a chain through another user's link"
            );
            let elsewhere = dir.path().join("elsewhere");
            std::fs::create_dir(&elsewhere).expect("dir");
            std::fs::write(elsewhere.join("log.jsonl"), "precious").expect("file");
            let folder = dir.path().join("sub");
            std::os::unix::fs::symlink(&elsewhere, &folder).expect("symlink");
            std::os::unix::fs::lchown(&folder, Some(65534), Some(65534)).expect("lchown");
            assert!(
                create_log(&folder.join("log.jsonl")).is_err(),
                "another user's folder link"
            );
            assert_eq!(
                std::fs::read_to_string(elsewhere.join("log.jsonl")).expect("read"),
                "precious"
            );
            assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
        }
        // `/dev/stdout` (root's links down to the process's descriptor) is opened.
        create_log(Path::new("/dev/stdout")).expect("/dev/stdout");
        // A plain path is created, then truncated when used again.
        let plain = dir.path().join("plain.jsonl");
        create_log(&plain)
            .and_then(|mut f| f.write_all(b"12345"))
            .expect("new");
        create_log(&plain).expect("again");
        assert_eq!(std::fs::read(&plain).expect("read").len(), 0);
    }

    #[test]
    fn a_link_planted_at_a_guessable_temporary_name_is_not_written_through() {
        // The names a report's temporary file once had (`.NAME.PID.tmp`): a link there
        // to a victim must leave the victim as it was.
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        let planted = dir
            .path()
            .join(format!(".benchmarks.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).expect("symlink");
        write_atomic(&dir.path().join("benchmarks.json"), b"report").expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
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
