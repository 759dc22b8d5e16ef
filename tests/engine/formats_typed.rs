//! The typed-event generation formats, `responses` (OpenAI Responses) and `anthropic`
//! (Anthropic Messages), end to end against the mock: streamed and whole, the report's
//! counts held to the mock's `/stats`, and every bad response an error of its kind with
//! a sample message.

use crate::scenario::Bench;
use crate::support::{assert_identity, mock};
use llmsurge::mock::{MockConfig, MockServer, MockStats};
use llmsurge_coordinator::BenchmarkResult;

const FORMATS: [&str; 2] = ["responses", "anthropic"];

/// Requests of `format` the mock received.
fn endpoint_count(stats: &MockStats, format: &str) -> u64 {
    match format {
        "responses" => stats.requests.responses,
        "anthropic" => stats.requests.messages,
        other => panic!("no endpoint for {other}"),
    }
}

/// `n` requests of `format`, 4 at a time, 16 tokens in and 8 out.
fn bench_format(server: &MockServer, format: &str, stream: bool, n: u64) -> Bench {
    Bench::on(server)
        .format(format)
        .stream(stream)
        .concurrent(4)
        .max_requests(n)
        .request_timeout("10s")
        .data("prompt_tokens=16,output_tokens=8")
}

fn error_count(b: &BenchmarkResult, kind: &str) -> u64 {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or(0, |e| e.count)
}

/// Every error kind of the benchmark has a non-empty sample message.
fn assert_samples(b: &BenchmarkResult) {
    for e in &b.errors {
        assert!(
            e.samples.first().is_some_and(|s| !s.is_empty()),
            "{}: no sample message",
            e.kind
        );
    }
}

#[test]
fn responses_and_anthropic_streamed_and_whole_agree_with_the_mock() {
    for format in FORMATS {
        for stream in [true, false] {
            let server = mock(MockConfig {
                reasoning_tokens: 2,
                ..MockConfig::instant()
            });
            let report = bench_format(&server, format, stream, 24).ok_report();
            assert_identity(&report);
            let b = &report.benchmarks[0];
            let stats = server.stats();
            let what = format!("{format} stream={stream}");
            assert_eq!(b.requests.completed, 24, "{what}: {:?}", b.errors);
            assert_eq!(b.requests.errored, 0, "{what}: {:?}", b.errors);
            assert_eq!(endpoint_count(&stats, format), 24, "{what}");
            assert_eq!(stats.requests.chat_completions, 0, "{what}");
            assert_eq!(stats.completed, 24, "{what}");
            // Usage is read from the format's own fields: 8 tokens out (2 of reasoning,
            // which these APIs count inside the cap), the server's prompt count in.
            assert_eq!(
                b.token_sources.expect("token sources").usage,
                24,
                "{what}: {:?}",
                b.token_sources
            );
            let out = &b.metrics["output_tokens"].successful;
            assert_eq!((out.min, out.max), (8.0, 8.0), "{what}");
            assert_eq!(
                (out.mean * 24.0).round() as u64,
                stats.tokens_sent,
                "{what}"
            );
            let prompt = &b.metrics["prompt_tokens"].successful;
            assert_eq!(
                (prompt.mean * 24.0).round() as u64,
                stats.prompt_tokens,
                "{what}"
            );
            let ttft = &b.metrics["ttft"].successful;
            assert_eq!(ttft.count, 24, "{what}: TTFT of every request");
            if stream {
                // Reasoning then content: the first token comes no later than the first
                // content token, and every token is a gap.
                assert!(b.metrics["ttft_any"].successful.mean <= ttft.mean, "{what}");
                assert!(b.metrics["itl"].successful.count > 0, "{what}");
            }
        }
    }
}

#[test]
fn unknown_event_types_are_skipped_where_the_api_says_so() {
    // Both APIs say clients must tolerate event types added later: a stream with one
    // is a complete, correct request.
    for format in FORMATS {
        let server = mock(MockConfig {
            unknown_events: true,
            ..MockConfig::instant()
        });
        let report = bench_format(&server, format, true, 12).ok_report();
        let b = &report.benchmarks[0];
        assert_eq!(b.requests.completed, 12, "{format}: {:?}", b.errors);
        assert_eq!(
            b.token_sources.expect("token sources").usage,
            12,
            "{format}"
        );
        assert_eq!(
            b.metrics["output_tokens"].successful.mean, 8.0,
            "{format}: the unknown event adds no token"
        );
        assert_eq!(endpoint_count(&server.stats(), format), 12);
    }
}

#[test]
fn a_400_with_an_error_body_is_an_http_error_with_its_message() {
    for format in FORMATS {
        for stream in [true, false] {
            // 8 output tokens do not fit a 6-token context: the mock answers 400.
            let server = mock(MockConfig {
                max_model_len: 6,
                ..MockConfig::instant()
            });
            let report = Bench::on(&server)
                .format(format)
                .stream(stream)
                .max_requests(5)
                .data("prompt_tokens=2,output_tokens=8")
                .run()
                .report();
            let b = &report.benchmarks[0];
            assert_eq!(error_count(b, "http_400"), 5, "{format}: {:?}", b.errors);
            assert_eq!(b.requests.completed, 0);
            let sample = &b.errors[0].samples[0];
            assert!(sample.contains("max_tokens must be in"), "{sample}");
            assert_eq!(server.stats().responses_4xx, 5, "{format}");
        }
    }
}

#[test]
fn garbage_drops_and_server_errors_are_errors_of_their_kind() {
    for format in FORMATS {
        for stream in [true, false] {
            let server = mock(MockConfig {
                garbage_rate: 0.25,
                drop_rate: 0.25,
                error_rate: 0.2,
                seed: 11,
                ..MockConfig::instant()
            });
            let report = bench_format(&server, format, stream, 60).run().report();
            assert_identity(&report);
            let b = &report.benchmarks[0];
            let faults = server.stats().faults;
            let what = format!("{format} stream={stream}");
            assert!(faults.garbage > 0 && faults.drop > 0, "{what}: {faults:?}");
            // A cut-in-half event or body is not JSON; a dropped stream ends without its
            // final event (a dropped whole body is cut JSON, also malformed).
            if stream {
                assert_eq!(
                    error_count(b, "malformed_response"),
                    faults.garbage,
                    "{what}: {:?}",
                    b.errors
                );
                assert_eq!(
                    error_count(b, "stream_broken"),
                    faults.drop,
                    "{what}: {:?}",
                    b.errors
                );
            } else {
                assert_eq!(
                    error_count(b, "malformed_response") + error_count(b, "stream_broken"),
                    faults.garbage + faults.drop,
                    "{what}: {:?}",
                    b.errors
                );
            }
            let server_errors = faults.error_500 + faults.error_429;
            assert_eq!(
                error_count(b, "http_500") + error_count(b, "http_429"),
                server_errors,
                "{what}: {:?}",
                b.errors
            );
            assert_eq!(
                b.requests.errored,
                faults.garbage + faults.drop + server_errors,
                "{what}"
            );
            assert_eq!(b.requests.completed + b.requests.errored, 60, "{what}");
            assert_samples(b);
        }
    }
}

#[test]
fn a_stream_without_its_final_event_is_broken() {
    // Every event but the last, then a clean end: not a complete response, whatever
    // the tokens and usage before it said.
    for (format, last) in [
        ("responses", "response.completed"),
        ("anthropic", "message_stop"),
    ] {
        let server = mock(MockConfig {
            no_final_event: true,
            ..MockConfig::instant()
        });
        let report = bench_format(&server, format, true, 6).run().report();
        let b = &report.benchmarks[0];
        assert_eq!(
            error_count(b, "stream_broken"),
            6,
            "{format}: {:?}",
            b.errors
        );
        assert_eq!(b.requests.completed, 0, "{format}");
        let sample = &b.errors[0].samples[0];
        assert_eq!(sample, &format!("stream ended before {last}"), "{format}");
        assert_eq!(endpoint_count(&server.stats(), format), 6);
    }
}
