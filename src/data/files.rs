//! Reading dataset files into records: `.jsonl`, `.json` (a list, or an object holding
//! one), `.csv`, `.txt` (one prompt per line) and `.parquet` (with the `parquet`
//! feature). Each record keeps where it came from ("line 7", "row 3", "item 2"), so an
//! error names the file and the place.

use serde_json::{Map, Value};
use std::path::Path;

/// One record of a file, as JSON fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Where it is in its file, e.g. "line 7".
    pub at: String,
    /// Its fields (a `.txt` line is `{"prompt": line}`).
    pub fields: Map<String, Value>,
}

/// File formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Jsonl,
    /// A JSON list of objects, or an object holding one.
    Json,
    /// A header line, then rows.
    Csv,
    /// One prompt per line.
    Txt,
    /// Apache Parquet.
    Parquet,
}

impl Format {
    /// The format of `path`, from its extension.
    pub fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "jsonl" | "ndjson" => Format::Jsonl,
            "json" => Format::Json,
            "csv" => Format::Csv,
            "txt" => Format::Txt,
            "parquet" => Format::Parquet,
            _ => return None,
        })
    }
}

/// Reads up to `limit` records of `path` (all when `None`). Errors name the file and
/// the line or row.
pub fn read_records(path: &Path, limit: Option<u64>) -> Result<Vec<Record>, String> {
    let name = path.display();
    let format = Format::of(path).ok_or_else(|| {
        format!("{name}: unknown file type (expected .jsonl, .json, .csv, .txt or .parquet)")
    })?;
    let limit = limit.unwrap_or(u64::MAX) as usize;
    match format {
        Format::Parquet => read_parquet(path, limit),
        Format::Csv => read_csv(path, limit),
        _ => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
            match format {
                Format::Jsonl => read_jsonl(&name.to_string(), &text, limit),
                Format::Json => read_json(&name.to_string(), &text, limit),
                _ => Ok(read_txt(&text, limit)),
            }
        }
    }
}

fn object(file: &str, at: &str, v: Value) -> Result<Map<String, Value>, String> {
    match v {
        Value::Object(m) => Ok(m),
        // A bare string is a prompt.
        Value::String(s) => Ok(Map::from_iter([("prompt".to_string(), Value::String(s))])),
        other => Err(format!(
            "{file} {at}: expected a JSON object, got {}",
            kind(&other)
        )),
    }
}

/// A JSON value's kind, for errors.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn read_jsonl(file: &str, text: &str, limit: usize) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if out.len() >= limit {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("line {}", i + 1);
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("{file} {at}: not valid JSON ({e})"))?;
        out.push(Record {
            fields: object(file, &at, v)?,
            at,
        });
    }
    Ok(out)
}

fn read_json(file: &str, text: &str, limit: usize) -> Result<Vec<Record>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("{file}: not valid JSON ({e})"))?;
    let items = match v {
        Value::Array(items) => items,
        Value::Object(mut m) => {
            // An object holding the list, e.g. {"data": [...]}: the first list of objects.
            let key = m
                .iter()
                .find(|(_, v)| matches!(v, Value::Array(a) if a.first().is_some_and(Value::is_object)))
                .map(|(k, _)| k.clone())
                .ok_or_else(|| format!("{file}: the JSON object holds no list of records"))?;
            match m.remove(&key) {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            }
        }
        other => {
            return Err(format!(
                "{file}: expected a JSON list of records, got {}",
                kind(&other)
            ));
        }
    };
    items
        .into_iter()
        .take(limit)
        .enumerate()
        .map(|(i, v)| {
            let at = format!("item {}", i + 1);
            Ok(Record {
                fields: object(file, &at, v)?,
                at,
            })
        })
        .collect()
}

fn read_txt(text: &str, limit: usize) -> Vec<Record> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .take(limit)
        .map(|(i, l)| Record {
            at: format!("line {}", i + 1),
            fields: Map::from_iter([("prompt".to_string(), Value::String(l.to_string()))]),
        })
        .collect()
}

fn read_csv(path: &Path, limit: usize) -> Result<Vec<Record>, String> {
    let name = path.display();
    let (mut reader, headers) = open_csv(path)?;
    let mut out = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        if out.len() >= limit {
            break;
        }
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(i as u64 + 2, |p| p.line());
            format!("{name} line {line}: {}", csv_error(&e))
        })?;
        out.push(csv_record(&headers, &rec, i));
    }
    Ok(out)
}

/// A CSV file's reader (every row as long as the header) and its header row, which names
/// the columns.
pub(super) fn open_csv(
    path: &Path,
) -> Result<(csv::Reader<std::fs::File>, csv::StringRecord), String> {
    let name = path.display();
    let mut reader = csv::ReaderBuilder::new()
        .flexible(false)
        .from_path(path)
        .map_err(|e| format!("{name}: {e}"))?;
    let headers = reader
        .headers()
        .map_err(|e| format!("{name} line 1: {e}"))?
        .clone();
    Ok((reader, headers))
}

/// Row `i` (from 0, after the header) of a CSV file as a record: its fields named by
/// the header, at its line.
pub(super) fn csv_record(headers: &csv::StringRecord, rec: &csv::StringRecord, i: usize) -> Record {
    let line = rec.position().map_or(i as u64 + 2, |p| p.line());
    let fields = headers
        .iter()
        .zip(rec.iter())
        .map(|(h, v)| (h.to_string(), Value::String(v.to_string())))
        .collect();
    Record {
        at: format!("line {line}"),
        fields,
    }
}

fn csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} fields where the header has {expected_len}"),
        _ => e
            .to_string()
            .lines()
            .next()
            .unwrap_or("malformed CSV")
            .to_string(),
    }
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &Path, limit: usize) -> Result<Vec<Record>, String> {
    use parquet::file::reader::SerializedFileReader;
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let reader = SerializedFileReader::try_from(file)
        .map_err(|e| format!("{name}: not a readable parquet file ({e})"))?;
    let mut out = Vec::new();
    for (i, row) in reader.into_iter().enumerate() {
        if out.len() >= limit {
            break;
        }
        let at = format!("row {}", i + 1);
        let row = row.map_err(|e| format!("{name} {at}: {e}"))?;
        out.push(Record {
            fields: object(&name.to_string(), &at, row.to_json_value())?,
            at,
        });
    }
    Ok(out)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet(path: &Path, _limit: usize) -> Result<Vec<Record>, String> {
    Err(format!(
        "{}: this llmsurge was built without the `parquet` feature",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).expect("write");
        p
    }

    #[test]
    fn every_text_format_reads_records_with_their_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let jsonl = read_records(
            &write(d, "a.jsonl", "{\"prompt\":\"x\"}\n\n{\"prompt\":\"y\"}\n"),
            None,
        )
        .expect("jsonl");
        assert_eq!(jsonl.len(), 2);
        assert_eq!(jsonl[1].at, "line 3");
        let json = read_records(
            &write(d, "b.json", r#"{"data":[{"q":"x"},{"q":"y"}]}"#),
            Some(1),
        )
        .expect("json");
        assert_eq!(json.len(), 1);
        let csv = read_records(&write(d, "c.csv", "prompt,n\n\"a, b\",3\n"), None).expect("csv");
        assert_eq!(csv[0].fields["prompt"], "a, b");
        let txt = read_records(&write(d, "d.txt", "one\n\ntwo\n"), None).expect("txt");
        assert_eq!(txt[1].at, "line 3");
        assert_eq!(txt[1].fields["prompt"], "two");
    }

    #[test]
    fn malformed_rows_name_the_file_and_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let e = read_records(&write(d, "a.jsonl", "{\"prompt\":\"x\"}\n{oops\n"), None)
            .expect_err("bad");
        assert!(e.contains("a.jsonl line 2"), "{e}");
        let e = read_records(&write(d, "b.csv", "prompt,n\nx,1\ny,2,3\n"), None).expect_err("bad");
        assert!(e.contains("b.csv line 3"), "{e}");
        let e =
            read_records(&write(d, "c.json", "[{\"prompt\":\"x\"}, 5]"), None).expect_err("bad");
        assert!(e.contains("c.json item 2"), "{e}");
        let e = read_records(&write(d, "d.xml", "<x/>"), None).expect_err("bad");
        assert!(e.contains("d.xml"), "{e}");
    }
}
