//! The sweep's parameter files and the commands built from them: a server command per
//! serve configuration, a `benchmark run` command line per benchmark configuration.
//!
//! Benchmark configurations are checked with the real `benchmark run` definition (the
//! same clap command a user's flags go through), so a typo in any entry fails before a
//! server starts.

use crate::cli::UsageError;
use crate::cli::scenario::flag_text;
use llmsurge_proto::inert::terminal;
use serde_json::{Map, Value};
use std::path::Path;

/// One configuration: a file's entry, keys in file order.
pub type Params = Map<String, Value>;

/// `benchmark run` settings the sweep sets itself per point; a parameter file may not.
pub const SWEEP_OWNED: &[&str] = &["target", "output_dir", "repeat", "dry_run", "scenario"];

/// One entry of a parameter file: its name, when the file gives it one (vLLM's named
/// form, or a `_benchmark_name` key), and its parameters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// The configuration's name, as written.
    pub name: Option<String>,
    /// Its parameters.
    pub params: Params,
}

/// The key vLLM's list form names an entry by.
const NAME_KEY: &str = "_benchmark_name";

/// An object's members in file order (serde_json's maps sort their keys; the named
/// form's order is the order of its configurations).
struct Ordered(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Loads `--serve-params`/`--bench-params` (JSON, or YAML when the file ends in
/// .yaml/.yml) in either of vLLM's forms: a list of objects (an entry may name itself
/// with `_benchmark_name`), or an object of named objects (`{"NAME": {...}, ...}`, in
/// file order).
pub fn load_list(flag: &str, path: &Path) -> Result<Vec<Entry>, UsageError> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| UsageError(format!("{flag} {shown}: {e}")))?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let parse = |text: &str| -> Result<Value, UsageError> {
        if yaml {
            serde_saphyr::from_str(text).map_err(|e| {
                UsageError(format!(
                    "{flag} {shown}: not valid YAML ({})",
                    e.to_string().lines().next().unwrap_or_default()
                ))
            })
        } else {
            serde_json::from_str(text)
                .map_err(|e| UsageError(format!("{flag} {shown}: not valid JSON ({e})")))
        }
    };
    let shape = || {
        UsageError(format!(
            "{flag} {shown}: expected a list of objects, one per configuration, or an object of named ones ({{\"NAME\": {{...}}, ...}})"
        ))
    };
    let items: Vec<(Option<String>, Value)> = match parse(&text)? {
        Value::Array(items) => items.into_iter().map(|v| (None, v)).collect(),
        Value::Object(_) => {
            let ordered: Result<Ordered, String> = if yaml {
                serde_saphyr::from_str(&text).map_err(|e| e.to_string())
            } else {
                serde_json::from_str(&text).map_err(|e| e.to_string())
            };
            let Ordered(members) = ordered.map_err(|_| shape())?;
            members.into_iter().map(|(k, v)| (Some(k), v)).collect()
        }
        _ => return Err(shape()),
    };
    if items.is_empty() {
        return Err(UsageError(format!("{flag} {shown}: the list is empty")));
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (i, (name, item)) in items.into_iter().enumerate() {
        let at = match &name {
            Some(n) => format!("{flag} {shown}: entry {}", terminal(&format!("{n:?}"))),
            None => format!("{flag} {shown}: entry {i}"),
        };
        let Value::Object(mut params) = item else {
            return Err(UsageError(format!("{at} is not an object")));
        };
        let name = match (name, params.remove(NAME_KEY)) {
            (Some(n), _) => Some(n),
            (None, Some(Value::String(n))) => Some(n),
            (None, Some(_)) => {
                return Err(UsageError(format!("{at}: {NAME_KEY} is not a string")));
            }
            (None, None) => None,
        };
        for (k, v) in &params {
            if v.is_null() {
                return Err(UsageError(format!("{at}: key {k:?} is null")));
            }
        }
        if let Some(n) = &name {
            if folder_name(n).is_empty() {
                return Err(UsageError(format!("{at}: the name is empty")));
            }
            if entries.iter().any(|e| e.name.as_ref() == Some(n)) {
                return Err(UsageError(format!(
                    "{at}: the name is given twice (each configuration needs its own)"
                )));
            }
        }
        entries.push(Entry { name, params });
    }
    Ok(entries)
}

/// A configuration's name as a folder name: letters, digits, `-`, `_` and `.` kept,
/// anything else `_`, no leading `.` (no `..`, no hidden folder), at most 80 characters.
pub fn folder_name(name: &str) -> String {
    let mut out: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    out
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
/// are filled (`{port}` with `port`), every other key becomes a flag as vLLM's sweep
/// writes it ([`serve_flag`]: `--key value`, `true` a bare flag, `false` `--no-key`).
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
                terminal(&format!("{key:?}"))
            )));
        }
        let text = serve_value(label, key, value).map_err(UsageError)?;
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
        cmd.push(' ');
        cmd.push_str(&serve_flag(key, value, text));
    }
    Ok(cmd)
}

/// A serve parameter written as vLLM's sweep writes it: `_` becomes `-` before the first
/// `.` (a nested config's inner keys are kept), `true` a bare flag, `false` the flag's
/// `--no-` form (how vLLM's default-on flags are switched off), a nested key's boolean
/// `--a.b=true|false`, any other value (`text`) one quoted word after the flag.
fn serve_flag(key: &str, value: &Value, text: &str) -> String {
    let (head, tail) = key.split_at(key.find('.').unwrap_or(key.len()));
    let name = format!("{}{tail}", head.replace('_', "-"));
    match value {
        Value::Bool(b) if !tail.is_empty() => format!("--{name}={b}"),
        Value::Bool(true) => format!("--{name}"),
        Value::Bool(false) => format!("--no-{name}"),
        _ => format!("--{name} {}", shell_quote(text)),
    }
}

/// The text of a serve parameter's value: a list or an object is its JSON text, one
/// word (vLLM writes a list as Python's text of it, the same for numbers).
fn serve_value(label: &str, key: &str, value: &Value) -> Result<String, String> {
    match value {
        Value::Array(_) => Ok(value.to_string()),
        other => flag_text(label, key, other),
    }
}

/// vLLM's `bench serve` keys that `benchmark run` names otherwise, and its name.
const VLLM_BENCH_KEYS: [(&str, &str); 7] = [
    ("num_prompts", "max_requests"),
    (
        "random_input_len",
        "data (e.g. \"data\": \"prompt_tokens=1024,output_tokens=128\")",
    ),
    (
        "random_output_len",
        "data (e.g. \"data\": \"prompt_tokens=1024,output_tokens=128\")",
    ),
    (
        "dataset_name",
        "data (a file, a Hugging Face id, or prompt_tokens=N,output_tokens=M)",
    ),
    ("dataset_path", "data (a file or a Hugging Face id)"),
    (
        "burstiness",
        "profile (\"poisson\" is vLLM's burstiness 1, \"constant\" evenly spaced)",
    ),
    (
        "num_runs",
        "the sweep's --num-runs (--repeat), not a benchmark key",
    ),
];

/// The `benchmark run` flags of one benchmark configuration, each key looked up in the
/// real definition (`run`): its long flag, a bare flag for a `true` switch. Keys may be
/// written with `-` (as vLLM allows). vLLM's `request_rate` is `--rate`: with Poisson
/// arrivals (vLLM's) unless the configuration or the shared flags choose a profile
/// (`shared_profile`), and `"inf"` is `--profile throughput`.
pub fn bench_flags(
    run: &clap::Command,
    params: &Params,
    label: &str,
    shared_profile: bool,
) -> Result<Vec<String>, UsageError> {
    let mut out = Vec::new();
    let has = |k: &str| params.keys().any(|p| p.replace('-', "_") == k);
    for (written, value) in params {
        let key = written.replace('-', "_");
        if key == "request_rate" {
            if has("rate") {
                return Err(UsageError(format!(
                    "{label}: both rate and request_rate (vLLM's name for rate): give one"
                )));
            }
            let inf = value
                .as_str()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("inf"));
            if inf {
                out.extend(["--profile".into(), "throughput".into()]);
            } else {
                if !has("profile") && !shared_profile {
                    out.extend(["--profile".into(), "poisson".into()]);
                }
                out.push("--rate".into());
                out.push(flag_text(label, &key, value).map_err(UsageError)?);
            }
            continue;
        }
        let arg = run
            .get_arguments()
            .find(|a| a.get_id().as_str() == key.as_str() && !a.is_positional());
        let Some(arg) = arg else {
            return Err(UsageError(
                match VLLM_BENCH_KEYS.iter().find(|(k, _)| *k == key) {
                    Some((_, ours)) => {
                        format!("{label}: key {written:?} is vLLM's; llmsurge's is {ours}")
                    }
                    None => format!(
                        "{label}: unknown key {written:?} (keys are benchmark run flag names with _, e.g. max_seconds)"
                    ),
                },
            ));
        };
        if SWEEP_OWNED.contains(&key.as_str()) {
            return Err(UsageError(format!(
                "{label}: key {written:?} is set by the sweep itself (use the sweep's own flag)"
            )));
        }
        let Some(long) = arg.get_long() else {
            return Err(UsageError(format!("{label}: key {written:?} has no flag")));
        };
        let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        match (switch, value) {
            (true, Value::Bool(true)) => out.push(format!("--{long}")),
            (true, Value::Bool(false)) => {}
            (true, _) => {
                return Err(UsageError(format!(
                    "{label}: key {written:?} is a switch; give it true or false"
                )));
            }
            _ => {
                out.push(format!("--{long}"));
                out.push(flag_text(label, &key, value).map_err(UsageError)?);
            }
        }
    }
    Ok(out)
}

/// `common` (the flags after `--`) less every flag `own` (a configuration's flags) sets,
/// with its value: a configuration's own value wins over the shared one, as vLLM's sweep
/// replaces a flag of its bench command. Flags are named as `run` defines them (long,
/// alias or short).
pub fn without_overridden(run: &clap::Command, common: &[String], own: &[String]) -> Vec<String> {
    let find = |word: &str| -> Option<&clap::Arg> {
        let name = word.split_once('=').map_or(word, |(n, _)| n);
        if let Some(long) = name.strip_prefix("--") {
            run.get_arguments().find(|a| {
                a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|v| v.contains(&long))
            })
        } else {
            let c = name.strip_prefix('-')?.chars().next()?;
            run.get_arguments().find(|a| a.get_short() == Some(c))
        }
    };
    let own_ids: Vec<&str> = own
        .iter()
        .filter(|w| w.starts_with('-'))
        .filter_map(|w| find(w).map(|a| a.get_id().as_str()))
        .collect();
    let mut out = Vec::new();
    let mut words = common.iter();
    while let Some(word) = words.next() {
        let arg = word.starts_with('-').then(|| find(word)).flatten();
        match arg {
            Some(a) if own_ids.contains(&a.get_id().as_str()) => {
                // `--flag=V` and `-nV` hold their value; `--flag` and `-n` are followed by it.
                let inline =
                    word.contains('=') || (!word.starts_with("--") && word.chars().count() > 2);
                let takes_value = !matches!(
                    a.get_action(),
                    clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
                );
                if takes_value && !inline {
                    words.next();
                }
            }
            _ => out.push(word.clone()),
        }
    }
    out
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
        assert_eq!(
            cmd,
            "serve 'm 1' --port 8123 --eager --max-num-seqs 32 --no-quiet"
        );
    }

    #[test]
    fn serve_values_are_written_as_vllms_sweep_writes_them() {
        let p = params(
            r#"{"compilation_config.use_cudagraph": false, "compilation_config.mode": 3,
                "enable_chunked_prefill": false, "sizes": [1, 2], "kw": {"a": 1}}"#,
        );
        let cmd = serve_command("serve", &p, 1, "entry 0").expect("ok");
        assert_eq!(
            cmd,
            "serve --compilation-config.mode 3 --compilation-config.use_cudagraph=false --no-enable-chunked-prefill --kw '{\"a\":1}' --sizes '[1,2]'"
        );
    }

    #[test]
    fn a_configurations_flag_replaces_the_shared_one_with_its_value() {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let run = cli
            .find_subcommand("benchmark")
            .and_then(|b| b.find_subcommand("run"))
            .expect("benchmark run");
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let common = words("--rate 1 --max-requests=20 --stream --profile concurrent");
        assert_eq!(
            without_overridden(run, &common, &words("--rate 8 --max-requests 6")),
            words("--stream --profile concurrent")
        );
        assert_eq!(without_overridden(run, &common, &[]), common);
    }

    #[test]
    fn both_of_vllms_forms_load_with_their_names_in_file_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            load_list("--serve-params", &p)
        };
        let names = |entries: &[Entry]| -> Vec<Option<String>> {
            entries.iter().map(|e| e.name.clone()).collect()
        };
        let named = file("n.json", r#"{"zeta": {"a": 1}, "alpha": {"a": 2}}"#).expect("named");
        assert_eq!(names(&named), [Some("zeta".into()), Some("alpha".into())]);
        assert_eq!(named[1].params["a"], 2);
        let yaml = file("n.yaml", "zeta:\n  a: 1\nalpha:\n  a: 2\n").expect("yaml");
        assert_eq!(names(&yaml), names(&named));
        let list = file("l.json", r#"[{"_benchmark_name": "x", "a": 1}, {"a": 2}]"#).expect("list");
        assert_eq!(names(&list), [Some("x".into()), None]);
        assert!(!list[0].params.contains_key("_benchmark_name"));
        let twice = file(
            "t.json",
            r#"[{"_benchmark_name": "x"}, {"_benchmark_name": "x"}]"#,
        );
        assert!(twice.expect_err("twice").0.contains("given twice"));
        let bare = file("b.json", r#"{"a": 1}"#);
        assert!(bare.expect_err("bare").0.contains("is not an object"));
    }

    #[test]
    fn names_become_safe_folder_names() {
        assert_eq!(folder_name("big/one"), "big_one");
        assert_eq!(folder_name(".."), "_.");
        assert_eq!(folder_name(" tp=2, pp=1 "), "tp_2__pp_1");
        assert_eq!(folder_name(&"x".repeat(200)).len(), 80);
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
