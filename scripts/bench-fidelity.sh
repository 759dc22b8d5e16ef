#!/usr/bin/env bash
# How close llmsurge's measurements are to the truth at scale (a script, not a test).
#
# Builds the release binary, starts `llmsurge mock-server --truth` (TTFT 50 ms, ITL 10 ms,
# 100 tokens a response, one token a chunk, no jitter from load) on MOCK_CORES and runs
# `llmsurge benchmark run --profile concurrent` pinned to one client core (CLIENT_CORE;
# its workers inherit the affinity) at each level of streams. Each request of the
# client's --request-log is joined with the mock's truth line on its x-request-id, and
# for every level the script prints, each with its target and PASS or MISS:
#   1. TTFT error (client's first content token − the instant the mock handed that chunk
#      to the connection): mean and p99 over the completed requests; target mean ≤ 1 ms
#      and p99 ≤ 5 ms at 1,000 streams (printed, without a target, at the other levels);
#   2. ITL standard deviation: the report's (every token gap the client saw) against the
#      mock's own (every gap between the chunks it sent, from its truth file); target
#      within 0.1 ms at every level.
# See docs/performance.md ("Fidelity against the truth").
#
# Environment: LEVELS (streams, default "1 100 1000 5000"), DURATION (s per level,
# default 10), MOCK_CORES (default 0), MOCK_THREADS (mock server threads, default 1),
# CLIENT_CORE (default 1), WORKERS (client worker processes, default: llmsurge's own
# choice; 50,000 streams need several where a process may hold only 20,000 files),
# CARGO_TARGET_DIR, BENCH_BIN (a binary to measure instead of building this tree's),
# TRANSPORT (how the client reaches the mock, default http: `http` HTTP/1.1, `https`
# HTTP/1.1 over TLS, `h2c` HTTP/2 with prior knowledge, `h2` HTTP/2 over TLS; the TLS
# ones with a throwaway CA and certificate made by openssl at run time).
# Needs taskset and python3 (and openssl for https and h2).
set -euo pipefail

LEVELS=${LEVELS:-"1 100 1000 5000"}
DURATION=${DURATION:-10}
MOCK_CORES=${MOCK_CORES:-0}
MOCK_THREADS=${MOCK_THREADS:-1}
CLIENT_CORE=${CLIENT_CORE:-1}
WORKERS=${WORKERS:-}
TRANSPORT=${TRANSPORT:-http}

# Targets (issue 22).
TARGET_TTFT_MEAN_MS=1
TARGET_TTFT_P99_MS=5
TARGET_TTFT_AT_STREAMS=1000
TARGET_ITL_STD_MS=0.1

cd "$(dirname "$0")/.."
. scripts/lib/bench.sh
TOOL_HINT="apt-get install -y util-linux python3" need_tools taskset python3
case $TRANSPORT in
    http | h2c) ;;
    https | h2) need_tools openssl ;;
    *)
        echo "error: TRANSPORT=$TRANSPORT: the transports are http, https, h2c and h2" >&2
        exit 2
        ;;
esac
bench_binary

# Thousands of streams need thousands of sockets in the client and in the mock.
ulimit -n "$(ulimit -Hn)"

clean_env
bench_workdir

# The mock's TLS flags and the client's for TRANSPORT.
serve_tls=() client_tls=()
if [[ $TRANSPORT == https || $TRANSPORT == h2 ]]; then
    make_pki
    serve_tls=(--tls-cert "$WORK/pki/cert.pem" --tls-key "$WORK/pki/key.pem")
    client_tls=(--ca-cert "$WORK/pki/ca.pem")
fi
[[ $TRANSPORT == h2c || $TRANSPORT == h2 ]] && client_tls+=(--http2)

echo "fidelity against the truth: mock TTFT 50 ms, ITL 10 ms, 100 tokens; client on core $CLIENT_CORE, mock on $MOCK_CORES; $DURATION s a level; transport $TRANSPORT"
for streams in $LEVELS; do
    rm -f "$WORK"/truth.jsonl "$WORK"/mock.out
    # The truth file is complete once the mock stopped (SIGTERM flushes it).
    launch_mock taskset -c "$MOCK_CORES" "$BIN" mock-server --port 0 --workers "$MOCK_THREADS" \
        --ttft-ms 50 --ttft-ms-std 0 --ttft-ms-per-prompt-token 0 \
        --itl-ms 10 --itl-ms-std 0 --itl-ms-per-active 0 \
        --output-tokens 100 --output-tokens-std 0 --truth "$WORK/truth.jsonl" "${serve_tls[@]}"
    out="$WORK/run-$streams"
    rm -rf "$out"
    code=0
    taskset -c "$CLIENT_CORE" "$BIN" benchmark run --target "$URL" \
        --profile concurrent --rate "$streams" --max-seconds "$DURATION" \
        --data "prompt_tokens=32,output_tokens=100" \
        --request-log requests.jsonl --outputs json --output-dir "$out" \
        ${WORKERS:+--workers "$WORKERS"} "${client_tls[@]}" \
        --disable-progress >"$WORK/run.out" 2>"$WORK/run.err" || code=$?
    stop_mock
    if [[ ! -f "$out/benchmarks.json" ]]; then
        echo "error: the run at $streams streams wrote no report (exit $code): $(tail -n3 "$WORK/run.err")" >&2
        exit 1
    fi
    python3 - "$out/requests.jsonl" "$WORK/truth.jsonl" "$out/benchmarks.json" "$streams" \
        "$TARGET_TTFT_MEAN_MS" "$TARGET_TTFT_P99_MS" "$TARGET_TTFT_AT_STREAMS" "$TARGET_ITL_STD_MS" <<'EOF'
import json, math, statistics, sys

log_path, truth_path, report_path, streams = sys.argv[1:5]
mean_target, p99_target, at_streams, itl_target = map(float, sys.argv[5:9])
streams = int(streams)
truth = {}
for line in open(truth_path):
    t = json.loads(line)
    if t.get("request_id"):
        truth[t["request_id"]] = t  # a resent request: its last attempt is the answer
errors, truth_gaps = [], []
for line in open(log_path):
    r = json.loads(line)
    t = truth.get(r.get("request_id"))
    if r["status"] != "completed" or t is None or r.get("first_content_time") is None:
        continue
    chunks = [c for c in t["chunks"] if c.get("content", 0) + c.get("reasoning", 0) > 0]
    first = next(c["time"] for c in chunks if c.get("content", 0) > 0)
    errors.append((r["first_content_time"] - first) * 1e3)
    for a, b in zip(chunks, chunks[1:]):
        k = b.get("content", 0) + b.get("reasoning", 0)
        truth_gaps += [(b["time"] - a["time"]) * 1e3 / k] * k
report = json.load(open(report_path))
itl = report["benchmarks"][0]["metrics"].get("itl", {}).get("successful", {})
if not errors or not truth_gaps or "std" not in itl:
    print(f"{streams:>6} streams: no completed request to compare (raise DURATION)")
    sys.exit(0)
errors.sort()
mean = statistics.fmean(errors)
p99 = errors[min(len(errors) - 1, math.ceil(0.99 * len(errors)) - 1)]
truth_std = statistics.pstdev(truth_gaps)
itl_diff = abs(itl["std"] - truth_std)

def verdict(ok):
    return "PASS" if ok else "MISS"

ttft = f"TTFT error mean {mean:.3f} ms, p99 {p99:.3f} ms"
if streams == at_streams:
    ttft += (f" (targets ≤ {mean_target:g} / ≤ {p99_target:g} ms: "
             f"{verdict(mean <= mean_target)} / {verdict(p99 <= p99_target)})")
print(f"{streams:>6} streams, {len(errors)} requests: {ttft}; ITL std {itl['std']:.3f} ms "
      f"against the mock's {truth_std:.3f} ms, off by {itl_diff:.3f} ms "
      f"(target ≤ {itl_target:g} ms: {verdict(itl_diff <= itl_target)})")
EOF
done
