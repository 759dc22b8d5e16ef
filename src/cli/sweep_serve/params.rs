//! The sweep's parameter files and the commands built from them: a server command per
//! serve configuration, a `benchmark run` command line per benchmark configuration.
//!
//! Benchmark configurations are checked with the real `benchmark run` definition (the
//! same clap command a user's flags go through), so a typo in any entry fails before a
//! server starts.

use crate::cli::UsageError;
use crate::cli::scenario::flag_text;
use serde_json::{Map, Value};
use std::path::Path;

/// One configuration: a file's entry, keys in file order.
pub type Params = Map<String, Value>;

/// `benchmark run` settings the sweep sets itself per point; a parameter file may not.
pub const SWEEP_OWNED: &[&str] = &["target", "output_dir", "repeat", "dry_run", "scenario"];

/// Loads `--serve-params`/`--bench-params`: a JSON or YAML list of objects (YAML when
/// the file ends in .yaml/.yml).
pub fn load_list(flag: &str, path: &Path) -> Result<Vec<Params>, UsageError> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| UsageError(format!("{flag} {shown}: {e}")))?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let value: Value = if yaml {
        serde_saphyr::from_str(&text).map_err(|e| {
            UsageError(format!(
                "{flag} {shown}: not valid YAML ({})",
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?
    } else {
        serde_json::from_str(&text)
            .map_err(|e| UsageError(format!("{flag} {shown}: not valid JSON ({e})")))?
    };
    let Value::Array(items) = value else {
        return Err(UsageError(format!(
            "{flag} {shown}: expected a list of objects, one per configuration"
        )));
    };
    if items.is_empty() {
        return Err(UsageError(format!("{flag} {shown}: the list is empty")));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(map) => {
                for (k, v) in &map {
                    if v.is_null() {
                        return Err(UsageError(format!(
                            "{flag} {shown}: entry {i}: key {k:?} is null"
                        )));
                    }
                }
                Ok(map)
            }
            _ => Err(UsageError(format!(
                "{flag} {shown}: entry {i} is not an object"
            ))),
        })
        .collect()
}

/// Quotes `s` for `sh` when it holds anything a shell would interpret: one word, taken
/// literally.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Whether `key` is a plain flag name (`^[A-Za-z0-9][A-Za-z0-9_.-]*$`): the only keys a
/// serve configuration may have, since a key becomes a `--flag` of a shell command and
/// names a `{placeholder}`.
pub fn plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// A piece of a `--serve-cmd` template.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    /// The user's shell text, kept as written.
    Text(&'a str),
    /// `{name}`: filled with a value.
    Placeholder(&'a str),
}

/// The template cut into text and `{name}` placeholders, in one pass. Braces around
/// anything but a plain name (`awk '{print $1}'`), and `${NAME}` (the shell's own
/// expansion), are text.
fn pieces(template: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let (mut text_from, mut at) = (0, 0);
    while let Some(found) = template[at..].find('{') {
        let open = at + found;
        let name_from = open + 1;
        let close = template[name_from..].find('}').map(|c| name_from + c);
        match close {
            Some(close)
                if !template[..open].ends_with('$') && plain_key(&template[name_from..close]) =>
            {
                if text_from < open {
                    out.push(Piece::Text(&template[text_from..open]));
                }
                out.push(Piece::Placeholder(&template[name_from..close]));
                text_from = close + 1;
                at = close + 1;
            }
            _ => at = name_from,
        }
    }
    if text_from < template.len() {
        out.push(Piece::Text(&template[text_from..]));
    }
    out
}

/// What `sh` is inside of at a point of the template: the quotes a placeholder's value
/// must close and reopen, or a construct where no quoting keeps a value data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    Single,
    Double,
    /// `$(…)` (with the parentheses open inside it), `${…}`, `` `…` ``: their text is
    /// parsed again, so a quoted value there is code.
    Subst(u32),
    Brace,
    Backtick,
}

/// The template read as `sh` reads it, as far as quoting goes.
#[derive(Debug, Default)]
struct Shell {
    frames: Vec<Frame>,
    /// A here-document was opened (`<<`): its body expands `$(…)` whatever the quotes.
    heredoc: bool,
}

/// Where a placeholder may stand, and how its value is written there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Word,
    InSingle,
    InDouble,
    /// Inside `$(…)`, `${…}`, backquotes or a here-document.
    Unsafe,
}

impl Shell {
    /// Reads `text`: a backslash escapes the next character outside single quotes;
    /// nothing does inside them.
    fn read(&mut self, text: &str) {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let top = self.frames.last().copied();
            if top == Some(Frame::Single) {
                if c == '\'' {
                    self.frames.pop();
                }
                continue;
            }
            match c {
                '\\' => {
                    chars.next();
                }
                '$' if chars.peek() == Some(&'(') => {
                    chars.next();
                    self.frames.push(Frame::Subst(0));
                }
                '$' if chars.peek() == Some(&'{') => {
                    chars.next();
                    self.frames.push(Frame::Brace);
                }
                '`' if top == Some(Frame::Backtick) => {
                    self.frames.pop();
                }
                '`' => self.frames.push(Frame::Backtick),
                '"' if top == Some(Frame::Double) => {
                    self.frames.pop();
                }
                // Inside double quotes only `$`, backquotes and `\` mean anything.
                _ if top == Some(Frame::Double) => {}
                '"' => self.frames.push(Frame::Double),
                '\'' => self.frames.push(Frame::Single),
                '(' => {
                    if let Some(Frame::Subst(depth)) = self.frames.last_mut() {
                        *depth += 1;
                    }
                }
                ')' => match self.frames.last_mut() {
                    Some(Frame::Subst(0)) => {
                        self.frames.pop();
                    }
                    Some(Frame::Subst(depth)) => *depth -= 1,
                    _ => {}
                },
                '}' if top == Some(Frame::Brace) => {
                    self.frames.pop();
                }
                '<' if chars.peek() == Some(&'<') => self.heredoc = true,
                _ => {}
            }
        }
    }

    /// Where a placeholder at this point stands.
    fn slot(&self) -> Slot {
        let nested = self
            .frames
            .iter()
            .any(|f| matches!(f, Frame::Subst(_) | Frame::Brace | Frame::Backtick));
        match self.frames.last() {
            _ if nested || self.heredoc => Slot::Unsafe,
            None => Slot::Word,
            Some(Frame::Single) => Slot::InSingle,
            Some(_) => Slot::InDouble,
        }
    }
}

/// The server command of one serve configuration: `{key}` placeholders in `template`
/// are filled (`{port}` with `port`), every other key becomes `--key value` (`_` in the
/// key becomes `-`; `true` is a bare flag, `false` is left out).
///
/// The template is the user's shell text; the values are data. Each value is quoted
/// once, as one word, and placeholders are filled in one pass over the template, so
/// text that came from a value is never read again (a `{b}` inside the value of `a`
/// stays those three characters). A key that is not a plain flag name is refused.
pub fn serve_command(
    template: &str,
    params: &Params,
    port: u16,
    label: &str,
) -> Result<String, UsageError> {
    let mut texts = Vec::with_capacity(params.len());
    for (key, value) in params {
        if !plain_key(key) {
            return Err(UsageError(format!(
                "{label}: key {} is not a plain flag name (letters, digits, _ . -, starting with a letter or digit): keys become --flags of the server command",
                llmsurge_proto::inert::terminal(&format!("{key:?}"))
            )));
        }
        let text = flag_text(label, key, value).map_err(UsageError)?;
        if text.contains('\0') {
            return Err(UsageError(format!(
                "{label}: key {key:?}: the value holds a NUL character, which no command line can carry"
            )));
        }
        texts.push(text);
    }
    let text_of = |name: &str| {
        params
            .keys()
            .position(|k| k == name)
            .map(|i| texts[i].as_str())
    };
    let mut cmd = String::with_capacity(template.len());
    let mut filled: Vec<&str> = Vec::new();
    // Where the template's own quotes stand: a placeholder the user wrote inside quotes
    // (`"{name}"`, vLLM's habit) closes them around its quoted value and reopens them.
    // Inside `$(…)`, `${…}`, backquotes or a here-document the shell parses the text
    // again, so no quoting keeps a value data there: refused.
    let mut shell = Shell::default();
    for piece in pieces(template) {
        match piece {
            Piece::Text(t) => {
                cmd.push_str(t);
                shell.read(t);
            }
            Piece::Placeholder("port") => cmd.push_str(&port.to_string()),
            Piece::Placeholder(name) => match text_of(name) {
                Some(text) => {
                    let quoted = shell_quote(text);
                    match shell.slot() {
                        Slot::Word => cmd.push_str(&quoted),
                        Slot::InSingle => cmd.push_str(&format!("'{quoted}'")),
                        Slot::InDouble => cmd.push_str(&format!("\"{quoted}\"")),
                        Slot::Unsafe => {
                            return Err(UsageError(format!(
                                "--serve-cmd: placeholder {{{name}}} stands inside $(…), ${{…}}, backquotes or a here-document, where the shell reads a value again as code; put it where a word of the command goes (e.g. --name {{{name}}})"
                            )));
                        }
                    }
                    filled.push(name);
                }
                None => {
                    return Err(UsageError(format!(
                        "--serve-cmd: placeholder {{{name}}} has no value in {label} (give it a key {name:?})"
                    )));
                }
            },
        }
    }
    for ((key, value), text) in params.iter().zip(&texts) {
        if filled.contains(&key.as_str()) {
            continue;
        }
        let flag = format!("--{}", key.replace('_', "-"));
        match value {
            Value::Bool(true) => cmd.push_str(&format!(" {flag}")),
            Value::Bool(false) => {}
            _ => cmd.push_str(&format!(" {flag} {}", shell_quote(text))),
        }
    }
    Ok(cmd)
}

/// The `benchmark run` flags of one benchmark configuration, each key looked up in the
/// real definition (`run`): its long flag, a bare flag for a `true` switch.
pub fn bench_flags(
    run: &clap::Command,
    params: &Params,
    label: &str,
) -> Result<Vec<String>, UsageError> {
    let mut out = Vec::new();
    for (key, value) in params {
        let arg = run
            .get_arguments()
            .find(|a| a.get_id().as_str() == key.as_str() && !a.is_positional());
        let Some(arg) = arg else {
            return Err(UsageError(format!(
                "{label}: unknown key {key:?} (keys are benchmark run flag names with _, e.g. max_seconds)"
            )));
        };
        if SWEEP_OWNED.contains(&key.as_str()) {
            return Err(UsageError(format!(
                "{label}: key {key:?} is set by the sweep itself (use the sweep's own flag)"
            )));
        }
        let Some(long) = arg.get_long() else {
            return Err(UsageError(format!("{label}: key {key:?} has no flag")));
        };
        let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        match (switch, value) {
            (true, Value::Bool(true)) => out.push(format!("--{long}")),
            (true, Value::Bool(false)) => {}
            (true, _) => {
                return Err(UsageError(format!(
                    "{label}: key {key:?} is a switch; give it true or false"
                )));
            }
            _ => {
                out.push(format!("--{long}"));
                out.push(flag_text(label, key, value).map_err(UsageError)?);
            }
        }
    }
    Ok(out)
}

/// A short name for a configuration in reports: `key=value` pairs.
pub fn describe(params: &Params) -> String {
    params
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> Params {
        serde_json::from_str(json).expect("json")
    }

    #[test]
    fn serve_keys_fill_placeholders_or_become_flags() {
        let p = params(r#"{"model": "m 1", "max_num_seqs": 32, "eager": true, "quiet": false}"#);
        let cmd = serve_command("serve {model} --port {port}", &p, 8123, "entry 0").expect("ok");
        // serde_json's maps keep keys sorted.
        assert_eq!(cmd, "serve 'm 1' --port 8123 --eager --max-num-seqs 32");
    }

    #[test]
    fn an_unfilled_placeholder_is_named() {
        let e = serve_command("serve {model}", &Params::new(), 1, "entry 0").expect_err("unfilled");
        assert!(e.0.contains("{model}"), "{}", e.0);
    }

    #[test]
    fn a_key_that_is_not_a_plain_flag_name_is_refused() {
        for key in [
            "a;touch PWNED;b",
            "c$(id)",
            "-x",
            "a b",
            "`id`",
            "k\u{1b}[2J",
            "",
        ] {
            let mut p = Params::new();
            p.insert(key.to_string(), Value::Bool(true));
            let e =
                serve_command("serve --port {port}", &p, 1, "serve.json: entry 3").expect_err(key);
            assert!(
                e.0.starts_with("serve.json: entry 3: key ") && e.0.contains("plain flag name"),
                "{}",
                e.0
            );
            assert!(!e.0.contains('\u{1b}') && !e.0.contains('\n'), "{:?}", e.0);
        }
        for key in ["max_num_seqs", "tensor-parallel-size", "a.b", "9x"] {
            assert!(plain_key(key), "{key}");
        }
    }

    #[test]
    fn braces_around_no_plain_name_and_shell_expansions_are_the_users_text() {
        let cmd = serve_command(
            "echo ${HOME} {} '{print $1}' {port}",
            &Params::new(),
            80,
            "entry 0",
        )
        .expect("ok");
        assert_eq!(cmd, "echo ${HOME} {} '{print $1}' 80");
    }

    /// What `sh` makes of `cmd`: each word it would pass on, one per line.
    fn words(cmd: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{cmd}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    #[test]
    fn a_placeholder_the_shell_would_read_again_is_refused() {
        let mut p = Params::new();
        p.insert("v".into(), Value::String("$(touch PWNED)".into()));
        for template in [
            "serve --name \"$(basename {v})\"",
            "serve --name $(basename {v})",
            "serve --name \"${X:-{v}}\"",
            "serve --name `echo {v}`",
            "serve --name \"`echo {v}`\"",
            "serve --name \"$(echo \"{v}\")\"",
            "cat <<E\n{v}\nE",
        ] {
            let e = serve_command(template, &p, 1, "entry 0").expect_err(template);
            assert!(
                e.0.contains("placeholder {v} stands inside"),
                "{template}: {}",
                e.0
            );
        }
        // Closed constructs before it do not count.
        serve_command("serve --a \"$(date)\" --b `id` --name \"{v}\"", &p, 1, "e")
            .expect("after closed constructs");
    }

    #[test]
    fn every_value_reaches_the_command_as_one_literal_word() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hostile = [
            "x'; touch PWNED; echo '",
            "$(touch PWNED)",
            "`touch PWNED`",
            "a b\tc\nd",
            "'",
            "\\'\"",
            "{b}",
            "{port}",
            "![x](http://e/i.png) <img> | \u{1b}[2J",
            "",
            "-starts-with-a-dash",
        ];
        for v in hostile {
            let mut p = Params::new();
            p.insert("a".into(), Value::String(v.into()));
            // `b` appears in `a`'s value as `{b}` (a placeholder after the first
            // substitution if filling were repeated) and is appended as a flag.
            p.insert("b".into(), Value::String(format!("{v}|b")));
            // The placeholder bare, and inside the template's own quotes (vLLM's habit:
            // `--served-model-name "{name}"`), alone or among other text.
            for (quoted, word) in [
                ("{a}", v.to_string()),
                ("\"{a}\"", v.to_string()),
                ("'{a}'", v.to_string()),
                ("\"x {a} y\"", format!("x {v} y")),
                ("'x\"{a}'", format!("x\"{v}")),
            ] {
                let template = format!("cd {} && printf '%s\\n' {quoted}", dir.path().display());
                let cmd = serve_command(&template, &p, 9, "entry 0").expect("ok");
                // The appended `--b VALUE` is printed too: printf's format is reused.
                assert_eq!(words(&cmd), format!("{word}\n--b\n{v}|b\n"), "{cmd}");
            }
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert!(left.is_empty(), "a value ran as shell code: {left:?}");
    }
}
