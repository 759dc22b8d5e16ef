//! Multimodal chat (generated images and audio) and `transcription`, end to end against
//! the mock: what the mock received (its `/stats` and `--record` of the bodies) agrees
//! with the spec and the report, bad transcription responses are errors of their kind,
//! and no report or log ever holds the media bytes.

use crate::scenario::Bench;
use crate::support::{Finished, assert_identity, mock, ok_report, recorded, recording};
use base64::Engine;
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge_coordinator::BenchmarkResult;
use std::path::Path;

/// `n` requests of `format` with `data`, 4 at a time, logged to `requests.jsonl` and
/// written in every output.
fn bench_media(server: &MockServer, format: &str, stream: bool, data: &str, n: u64) -> Bench {
    Bench::on(server)
        .format(format)
        .stream(stream)
        .concurrent(4)
        .max_requests(n)
        .request_timeout("10s")
        .data(data)
        .request_log("requests.jsonl")
        .outputs("json,csv,html,md,console")
}

fn error_count(b: &BenchmarkResult, kind: &str) -> u64 {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or(0, |e| e.count)
}

/// The `--record` lines of the mock: one JSON body per request.
fn recorded_bodies(path: &Path) -> Vec<serde_json::Value> {
    recorded(path)
        .into_iter()
        .map(|mut l| l["body"].take())
        .collect()
}

/// The first value under `key` anywhere in `v`.
fn find_key<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .filter(|v| v.is_object())
            .or_else(|| m.values().find_map(|v| find_key(v, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

fn decode(b64: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("valid base64")
}

/// No file the run wrote (report in every format, request log) and none of its output
/// holds media bytes: no data URL, no long base64 run.
fn assert_no_media_in_outputs(run: &Finished) {
    let mut texts = vec![run.stdout.clone(), run.stderr.clone()];
    for entry in std::fs::read_dir(run.dir.path()).expect("output dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            texts.push(String::from_utf8_lossy(&std::fs::read(&path).expect("read")).into_owned());
        }
    }
    assert!(
        run.dir.path().join("requests.jsonl").is_file(),
        "the request log was written"
    );
    for text in &texts {
        assert!(!text.contains(";base64,"), "a data URL in the outputs");
        // The longest run of base64 characters: media would be thousands long; the HTML
        // report's embedded script and the histograms are well below this.
        let longest = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/'))
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest < 2000, "a base64 run of {longest} characters");
    }
}

#[test]
fn image_chat_sends_data_urls_of_the_asked_size_and_the_mock_counts_them() {
    let (server, _dir, record) = recording(MockConfig::instant());
    let run = bench_media(
        &server,
        "chat",
        true,
        "prompt_tokens=8,output_tokens=4,images=3,image_size=64x32,image_format=png",
        10,
    )
    .run();
    let report = ok_report(&run);
    assert_identity(&report);
    let b = &report.benchmarks[0];
    let stats = server.stats();
    assert_eq!(b.requests.completed, 10, "{:?}", b.errors);
    assert_eq!(stats.requests.chat_completions, 10);
    assert_eq!(stats.images, 10 * 3, "the mock's image count");
    // Each 64×32 image costs ceil(64/28)·ceil(32/28) = 6 prompt tokens on top of the text
    // as the mock's tokenizer counts it (the prompts are exact under the client's
    // cl100k_base; the mock counts words and marks, which for some seeds' prompts is one
    // fewer), and the report's prompt tokens are the server's usage.
    let prompt = &b.metrics["prompt_tokens"].successful;
    assert_eq!((prompt.mean * 10.0).round() as u64, stats.prompt_tokens);
    let text_tokens: u64 = recorded_bodies(&record)
        .iter()
        .flat_map(|body| {
            body["messages"][0]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|part| part["text"].as_str().map(llmsurge::mock::count_tokens))
        .sum();
    assert_eq!(stats.prompt_tokens, text_tokens + 10 * 3 * 6);
    let t = &b.throughput;
    let images = t.images_per_s.expect("images/s");
    assert!((images - 3.0 * t.requests_per_s).abs() < 1e-6 * images);
    assert!(t.audio_seconds_per_s.is_none());
    // The report records the media sizes: per request, pixel size, format, bytes.
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("json")).expect("JSON");
    let media = find_key(&raw, "media").expect("the data summary's media");
    assert_eq!(media["images"], 3, "{media}");
    assert_eq!(media["image_size"], "64x32");
    assert_eq!(media["image_format"], "png");
    assert!(
        media["image_bytes"].as_u64().is_some_and(|b| b > 100),
        "{media}"
    );
    let bodies = recorded_bodies(&record);
    assert_eq!(bodies.len(), 10);
    for body in &bodies {
        let parts = body["messages"][0]["content"]
            .as_array()
            .expect("content parts");
        assert_eq!(parts[0]["type"], "text");
        let images: Vec<_> = parts.iter().filter(|p| p["type"] == "image_url").collect();
        assert_eq!(images.len(), 3, "{parts:?}");
        for p in images {
            let url = p["image_url"]["url"].as_str().expect("url");
            let png = decode(
                url.strip_prefix("data:image/png;base64,")
                    .expect("a PNG data URL"),
            );
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
            assert_eq!(&png[12..16], b"IHDR");
            let be = |i: usize| u32::from_be_bytes([png[i], png[i + 1], png[i + 2], png[i + 3]]);
            assert_eq!((be(16), be(20)), (64, 32), "the decoded size");
        }
    }
    assert_no_media_in_outputs(&run);
}

#[test]
fn input_audio_chat_sends_wav_clips_the_mock_times() {
    let (server, _dir, record) = recording(MockConfig::instant());
    let run = bench_media(
        &server,
        "chat",
        false,
        "prompt_tokens=8,output_tokens=4,audio_seconds=2",
        6,
    )
    .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let stats = server.stats();
    assert_eq!(b.requests.completed, 6, "{:?}", b.errors);
    assert_eq!(stats.audio_ms, 6 * 2000, "the mock's audio time");
    assert_eq!(stats.images, 0);
    // 25 prompt tokens per second of audio, on top of the text as the mock's tokenizer
    // counts it (the prompts are exact under the client's cl100k_base; the mock counts
    // words and marks, which for some seeds' prompts is one fewer, as in the image test).
    let text_tokens: u64 = recorded_bodies(&record)
        .iter()
        .flat_map(|body| {
            body["messages"][0]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|part| part["text"].as_str().map(llmsurge::mock::count_tokens))
        .sum();
    assert_eq!(stats.prompt_tokens, text_tokens + 6 * 50);
    let audio = b.throughput.audio_seconds_per_s.expect("audio s/s");
    assert!((audio - 2.0 * b.throughput.requests_per_s).abs() < 1e-6 * audio);
    for body in recorded_bodies(&record) {
        let parts = body["messages"][0]["content"].as_array().expect("parts");
        let audio = parts
            .iter()
            .find(|p| p["type"] == "input_audio")
            .expect("an input_audio part");
        assert_eq!(audio["input_audio"]["format"], "wav");
        let wav = decode(audio["input_audio"]["data"].as_str().expect("data"));
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..12], b"WAVE");
        // 16 kHz mono 16-bit: 64,000 bytes of samples after the 44-byte header.
        assert_eq!(wav.len(), 44 + 64_000);
    }
    assert_no_media_in_outputs(&run);
}

#[test]
fn transcription_streamed_and_whole_agree_with_the_mock() {
    for stream in [true, false] {
        let server = mock(MockConfig::instant());
        let run = bench_media(&server, "transcription", stream, "audio_seconds=3", 8).run();
        let report = ok_report(&run);
        let b = &report.benchmarks[0];
        let stats = server.stats();
        assert_eq!(b.requests.completed, 8, "stream={stream}: {:?}", b.errors);
        assert_eq!(stats.requests.transcriptions, 8, "stream={stream}");
        assert_eq!(stats.requests.chat_completions, 0);
        assert_eq!(stats.audio_ms, 8 * 3000, "stream={stream}");
        assert_eq!(stats.completed, 8);
        let audio = b.throughput.audio_seconds_per_s.expect("audio s/s");
        assert!(
            (audio - 3.0 * b.throughput.requests_per_s).abs() < 1e-6 * audio,
            "stream={stream}: {audio}"
        );
        assert!(b.metrics.contains_key("request_latency"));
        if stream {
            // Streamed: a time to first token, and vLLM's usage chunk (75 prompt tokens
            // for 3 s of audio) with the output the mock sent.
            assert_eq!(b.metrics["ttft"].successful.count, 8);
            assert_eq!(b.metrics["prompt_tokens"].successful.mean, 75.0);
            let out = &b.metrics["output_tokens"].successful;
            assert_eq!((out.mean * 8.0).round() as u64, stats.tokens_sent);
            assert_eq!(b.token_sources.expect("token sources").usage, 8);
        }
        assert_no_media_in_outputs(&run);
    }
}

#[test]
fn transcription_bad_responses_are_errors_of_their_kind() {
    // A 400 with its error body: 3 s of audio is 75 prompt tokens, over a 50-token window.
    let server = mock(MockConfig {
        max_model_len: 50,
        ..MockConfig::instant()
    });
    let run = bench_media(&server, "transcription", false, "audio_seconds=3", 4).run();
    let report = run.report();
    assert_identity(&report);
    let b = &report.benchmarks[0];
    assert_eq!(error_count(b, "http_400"), 4, "{:?}", b.errors);
    assert!(
        b.errors[0].samples[0].contains("maximum context length is 50"),
        "{:?}",
        b.errors
    );
    // A body that is not JSON.
    let server = mock(MockConfig {
        garbage_rate: 1.0,
        ..MockConfig::instant()
    });
    let run = bench_media(&server, "transcription", false, "audio_seconds=1", 4).run();
    let b = &run.report().benchmarks[0];
    assert_eq!(error_count(b, "malformed_response"), 4, "{:?}", b.errors);
    assert!(b.errors[0].samples[0].contains("malformed JSON"));
    // A stream that ends cleanly without its finishing chunk and [DONE].
    let server = mock(MockConfig {
        no_final_event: true,
        ..MockConfig::instant()
    });
    let run = bench_media(&server, "transcription", true, "audio_seconds=1", 4).run();
    let b = &run.report().benchmarks[0];
    assert_eq!(error_count(b, "stream_broken"), 4, "{:?}", b.errors);
    assert_eq!(b.requests.completed, 0);
    assert_eq!(b.errors[0].samples[0], "stream ended before [DONE]");
    assert_eq!(server.stats().requests.transcriptions, 4);
}

#[test]
fn media_spec_keys_of_the_wrong_format_are_usage_errors() {
    let server = mock(MockConfig::instant());
    for (format, data, needle) in [
        (
            "completions",
            "prompt_tokens=8,output_tokens=2,images=1",
            "images",
        ),
        (
            "transcription",
            "prompt_tokens=8,output_tokens=2",
            "audio_seconds",
        ),
        (
            "embeddings",
            "prompt_tokens=8,batch_size=2,audio_seconds=1",
            "audio_seconds",
        ),
        (
            "chat",
            "prompt_tokens=8,output_tokens=2,images=1,image_size=12",
            "image_size",
        ),
    ] {
        let run = bench_media(&server, format, true, data, 1).run();
        assert_eq!(run.code(), 2, "{format} {data}: {}", run.stderr);
        let line = run.stderr.trim();
        assert!(
            line.contains("--data") && line.contains(needle),
            "{format} {data}: {line}"
        );
    }
    assert_eq!(server.stats().requests_total, 0);
}

#[test]
fn a_dataset_image_column_sends_files_as_data_urls_and_urls_as_they_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let png = llmsurge::data::media::encode_image(40, 30, llmsurge_proto::ImageFormat::Png, 9)
        .expect("png");
    std::fs::write(dir.path().join("cat.png"), &png).expect("write png");
    let data = dir.path().join("rows.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\":\"what is this?\",\"images\":[\"cat.png\",\"https://example.com/dog.jpg\"],\"output_tokens_count\":3}\n\
         {\"prompt\":\"and this?\",\"image\":\"cat.png\",\"output_tokens_count\":3}\n",
    )
    .expect("write rows");
    let record = dir.path().join("record.jsonl");
    let server = mock(MockConfig {
        record: Some(record.clone()),
        ..MockConfig::instant()
    });
    let run = bench_media(&server, "chat", true, data.to_str().expect("utf8"), 4).run();
    let report = ok_report(&run);
    assert_eq!(report.benchmarks[0].requests.completed, 4);
    let stats = server.stats();
    // Rows cycle: 2 + 1 + 2 + 1 images.
    assert_eq!(stats.images, 6);
    let want = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let mut urls: Vec<String> = recorded_bodies(&record)
        .iter()
        .flat_map(|b| {
            b["messages"][0]["content"]
                .as_array()
                .expect("parts")
                .iter()
                .filter_map(|p| p["image_url"]["url"].as_str().map(String::from))
                .collect::<Vec<_>>()
        })
        .collect();
    urls.sort();
    urls.dedup();
    assert_eq!(urls, vec![want, "https://example.com/dog.jpg".to_string()]);
    assert_no_media_in_outputs(&run);
}

/// The request log's lines.
fn log_entries(run: &Finished) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.dir.path().join("requests.jsonl"))
        .expect("request log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_request_log_records_each_requests_media_sizes_never_the_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let png = llmsurge::data::media::encode_image(40, 30, llmsurge_proto::ImageFormat::Png, 9)
        .expect("png");
    let jpg = llmsurge::data::media::encode_image(64, 48, llmsurge_proto::ImageFormat::Jpeg, 9)
        .expect("jpeg");
    std::fs::write(dir.path().join("a.png"), &png).expect("write png");
    std::fs::write(dir.path().join("b.jpg"), &jpg).expect("write jpg");
    let data = dir.path().join("rows.jsonl");
    // Rows of 0, 1 and 3 images; the third's last image is a URL the server fetches.
    std::fs::write(
        &data,
        "{\"prompt\":\"no picture\",\"output_tokens_count\":2}\n\
         {\"prompt\":\"one\",\"images\":[\"a.png\"],\"output_tokens_count\":2}\n\
         {\"prompt\":\"three\",\"images\":[\"b.jpg\",\"a.png\",\"https://example.com/c.jpg\"],\"output_tokens_count\":2}\n",
    )
    .expect("write rows");
    let server = mock(MockConfig::instant());
    let run = bench_media(&server, "chat", true, data.to_str().expect("utf8"), 6).run();
    let report = ok_report(&run);
    assert_eq!(report.benchmarks[0].requests.completed, 6);
    assert_eq!(server.stats().images, 2 * (1 + 3));
    let entries = log_entries(&run);
    assert_eq!(entries.len(), 6);
    let image = |format: &str, w: u32, h: u32, bytes: usize| serde_json::json!({"format": format, "width": w, "height": h, "bytes": bytes});
    let url = serde_json::json!({"format": "url", "bytes": 0});
    for e in &entries {
        let slot = e["slot"].as_u64().expect("slot");
        let want = match slot % 3 {
            0 => serde_json::Value::Null,
            1 => serde_json::json!({"images": [image("png", 40, 30, png.len())]}),
            _ => serde_json::json!({"images": [
                image("jpeg", 64, 48, jpg.len()),
                image("png", 40, 30, png.len()),
                url.clone(),
            ]}),
        };
        assert_eq!(e["media"], want, "slot {slot}: {e}");
    }
    assert_no_media_in_outputs(&run);
}

#[test]
fn the_request_log_records_generated_audio_and_images_per_request() {
    let server = mock(MockConfig::instant());
    let run = bench_media(&server, "chat", false, "prompt_tokens=8,output_tokens=2,images=2,image_size=48x32,image_format=png,audio_seconds=1", 3).run();
    assert_eq!(ok_report(&run).benchmarks[0].requests.completed, 3);
    let entries = log_entries(&run);
    assert_eq!(entries.len(), 3);
    for e in &entries {
        let media = &e["media"];
        let images = media["images"].as_array().expect("images");
        assert_eq!(images.len(), 2, "{e}");
        for i in images {
            assert_eq!(
                (&i["format"], &i["width"], &i["height"]),
                (&"png".into(), &48.into(), &32.into())
            );
            assert!(i["bytes"].as_u64().is_some_and(|b| b > 100), "{i}");
        }
        // 16 kHz mono 16-bit: 32,000 bytes of samples after the 44-byte header.
        assert_eq!(
            media["audio"],
            serde_json::json!({"seconds": 1.0, "bytes": 44 + 32_000})
        );
    }
    assert_no_media_in_outputs(&run);
}
