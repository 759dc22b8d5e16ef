//! `--filter`: which points of a sweep its charts show. The grammar: conditions
//! separated by `,`, all of which must hold; each `KEY OP VALUE` with OP one of `<=`,
//! `>=`, `<`, `>`, `==` (or `=`), `!=`. KEY is a parameter (`serve.KEY`, `bench.KEY`, or
//! a bare KEY: the serve parameter, else the bench one) or a headline figure
//! (`tpot_p50`, `output_tokens_per_s`, …). VALUE is a number, or for `==` and `!=` also
//! text (`bench.profile==constant`). A point without the key does not match.

use super::report::Row;
use serde_json::Value;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Le,
    Ge,
    Lt,
    Gt,
    Eq,
    Ne,
}

/// One condition.
#[derive(Clone, Debug, PartialEq)]
struct Cond {
    key: String,
    op: Op,
    value: String,
}

/// A parsed `--filter`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    conds: Vec<Cond>,
}

/// A value of a point: a parameter or a figure.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A number.
    Num(f64),
    /// Anything else, as written.
    Text(String),
}

/// The key of a point's server configuration (its name, else `s{S}`).
pub const SERVER: &str = "server";

/// A row's value of `key`: `serve.K`, `bench.K`, a bare K (serve, then bench), a
/// figure, or [`SERVER`].
pub fn cell(row: &Row, key: &str) -> Option<Cell> {
    if key == SERVER {
        return row.at.server.clone().map(Cell::Text);
    }
    let param = |v: &Value| match v {
        Value::Number(n) => n.as_f64().map(Cell::Num),
        Value::String(s) => Some(s.trim().parse().map_or(Cell::Text(s.clone()), Cell::Num)),
        other => Some(Cell::Text(other.to_string())),
    };
    // A benchmark's `rate` is its own load: each rate of a list (`"rate": [6, 10]`) is a
    // benchmark of the point at that rate, not the list.
    let bench = |k: &str| match row.load {
        Some(load) if k == "rate" && rate_is_load(row) => Some(Cell::Num(load.value)),
        _ => row.at.bench_params.get(k).and_then(param),
    };
    if let Some(k) = key.strip_prefix("serve.") {
        return row.at.serve_params.get(k).and_then(param);
    }
    if let Some(k) = key.strip_prefix("bench.") {
        return bench(k);
    }
    match row.at.serve_params.get(key) {
        Some(v) => param(v),
        None => bench(key),
    }
    .or_else(|| row.figures.get(key).map(|v| Cell::Num(*v)))
}

/// Whether `row`'s `rate` is its benchmark's own load (the load it ran at, in its unit).
pub fn rate_is_load(row: &Row) -> bool {
    row.load.is_some() && row.at.bench_params.contains_key("rate")
}

impl Filter {
    /// Parses `spec`; `known(key)` says whether a key names a parameter or a figure.
    pub fn parse(spec: &str, known: impl Fn(&str) -> bool) -> Result<Filter, String> {
        let mut conds = Vec::new();
        for raw in spec.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let ops = [
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("<", Op::Lt),
                (">", Op::Gt),
                ("=", Op::Eq),
            ];
            let Some((at, sym, op)) = ops
                .iter()
                .filter_map(|(s, o)| raw.find(s).map(|i| (i, *s, *o)))
                .min_by_key(|(i, s, _)| (*i, usize::MAX - s.len()))
            else {
                return Err(format!(
                    "--filter: {raw:?}: expected KEY OP VALUE, e.g. max_num_seqs>=32 (OP: <=, >=, <, >, ==, !=)"
                ));
            };
            let key = raw[..at].trim().to_string();
            let value = raw[at + sym.len()..].trim().to_string();
            if key.is_empty() || value.is_empty() {
                return Err(format!("--filter: {raw:?}: a key and a value are needed"));
            }
            if !known(&key) {
                return Err(format!(
                    "--filter: {raw:?}: no parameter or figure {key:?} (a key of --serve-params or --bench-params, serve.KEY, bench.KEY, or a figure such as tpot_p50)"
                ));
            }
            if !matches!(op, Op::Eq | Op::Ne) && value.parse::<f64>().is_err() {
                return Err(format!(
                    "--filter: {raw:?}: {value:?} is not a number ({sym} compares numbers)"
                ));
            }
            conds.push(Cond { key, op, value });
        }
        if conds.is_empty() {
            return Err("--filter: no condition given".into());
        }
        Ok(Filter { conds })
    }

    /// Whether `row` meets every condition.
    pub fn keeps(&self, row: &Row) -> bool {
        self.conds.iter().all(|c| {
            let Some(have) = cell(row, &c.key) else {
                return false;
            };
            match (have, c.value.parse::<f64>()) {
                (Cell::Num(x), Ok(v)) => match c.op {
                    Op::Le => x <= v,
                    Op::Ge => x >= v,
                    Op::Lt => x < v,
                    Op::Gt => x > v,
                    Op::Eq => x == v,
                    Op::Ne => x != v,
                },
                (Cell::Text(t), _) => match c.op {
                    Op::Eq => t == c.value,
                    Op::Ne => t != c.value,
                    _ => false,
                },
                (Cell::Num(x), Err(_)) => match c.op {
                    Op::Eq => x.to_string() == c.value,
                    Op::Ne => x.to_string() != c.value,
                    _ => false,
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::report::{Outcome, Status};

    fn row(serve: &str, bench: &str) -> Row {
        let at = crate::sweep::report::Point {
            point: "s0-b0".into(),
            serve_index: Some(0),
            server: Some("s0".into()),
            bench_index: 0,
            serve_params: serde_json::from_str(serve).expect("json"),
            bench_params: serde_json::from_str(bench).expect("json"),
        };
        let mut row = Row::new(at, Status::Ok, Outcome::Ok);
        row.exit_code = Some(0);
        row.figures = [("tpot_p50".to_string(), 12.5)].into_iter().collect();
        row
    }

    #[test]
    fn conditions_compare_parameters_and_figures() {
        let known = |_: &str| true;
        let r = row(
            r#"{"max_num_seqs": 32}"#,
            r#"{"profile": "constant", "rate": "8"}"#,
        );
        for (spec, keeps) in [
            ("max_num_seqs>=32", true),
            ("max_num_seqs>32", false),
            ("serve.max_num_seqs==32", true),
            ("bench.rate<10, profile==constant", true),
            ("profile!=constant", false),
            ("tpot_p50<=12.5", true),
            ("tpot_p50<12.5", false),
            ("missing==1", false),
        ] {
            let f = Filter::parse(spec, known).expect(spec);
            assert_eq!(f.keeps(&r), keeps, "{spec}");
        }
    }

    #[test]
    fn bad_filters_name_the_flag() {
        let known = |k: &str| k != "nope";
        for spec in ["", "max_num_seqs", "max_num_seqs>=", "nope>1", "a<=fast"] {
            let e = Filter::parse(spec, known).expect_err(spec);
            assert!(e.starts_with("--filter"), "{spec}: {e}");
        }
    }
}
