#!/usr/bin/env bash
# Soak: does the client's memory stay flat over a long run? (a script, not a test)
#
# Builds the release binary, starts `llmsurge mock-server` as its own process (zero
# latency, so the client runs as fast as it can), and sends REQUESTS requests through the
# throughput profile. Every 10 s it prints the RSS of the client's whole process tree
# (coordinator + workers) beside the requests the mock has served. The baseline is the
# first sample taken after WARMUP_REQUESTS requests (or after WARMUP_S seconds, whichever
# comes first): allocator pools, connection pools and histograms have grown to their
# working size by then. The verdict compares the highest RSS after the baseline, and the
# last one, with it: PASS when both grew less than MAX_GROWTH_PCT.
#
# The mock's RSS is printed beside each sample, for information (it is not judged).
#
# Usage: scripts/soak.sh   (no arguments; settings from the environment)
#   SOAK_REQUESTS        requests in the run (default 1000000)
#   SOAK_WARMUP_REQUESTS requests before the baseline sample (default SOAK_REQUESTS / 10)
#   SOAK_WARMUP_S        seconds before the baseline sample (default 60)
#   SOAK_CONCURRENCY     streams in flight (default 64)
#   SOAK_WORKERS         client worker processes (default 1)
#   SOAK_OUTPUT_TOKENS   tokens per response (default 16)
#   SOAK_INTERVAL_S      seconds between samples (default 10)
#   SOAK_MAX_GROWTH_PCT  the verdict's bound on growth after warm-up (default 10)
#   CARGO_TARGET_DIR     where the release build goes (default target)
# Needs curl, jq and bc. Exit code: 0 PASS, 1 FAIL or a failed run, 2 a missing tool.
set -euo pipefail

REQUESTS=${SOAK_REQUESTS:-1000000}
WARMUP_REQUESTS=${SOAK_WARMUP_REQUESTS:-$((REQUESTS / 10))}
WARMUP_S=${SOAK_WARMUP_S:-60}
CONCURRENCY=${SOAK_CONCURRENCY:-64}
WORKERS=${SOAK_WORKERS:-1}
OUTPUT_TOKENS=${SOAK_OUTPUT_TOKENS:-16}
INTERVAL_S=${SOAK_INTERVAL_S:-10}
MAX_GROWTH_PCT=${SOAK_MAX_GROWTH_PCT:-10}

cd "$(dirname "$0")/.."
. scripts/lib/bench.sh
need_tools curl jq bc
BENCH_BIN= bench_binary
clean_env
bench_workdir
CLIENT_PID=
cleanup() {
    if [[ -n "$CLIENT_PID" ]]; then
        kill "$CLIENT_PID" 2>/dev/null || true
        wait "$CLIENT_PID" 2>/dev/null || true
    fi
    bench_cleanup
}
trap cleanup EXIT

launch_mock "$BIN" mock-server --port 0 --workers 1 --instant --output-tokens "$OUTPUT_TOKENS"
served() { curl -sf "$URL/stats" | jq -r .completed; }
mb() { echo "scale=1; $1 / 1024" | bc -l; }

echo "soak: $REQUESTS requests, $CONCURRENCY streams, $WORKERS worker(s), $OUTPUT_TOKENS output tokens, mock at $URL ($(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg))"
"$BIN" benchmark run --target "$URL" --profile throughput --max-concurrency "$CONCURRENCY" \
    --workers "$WORKERS" --max-requests "$REQUESTS" --max-seconds 86400 \
    --data "prompt_tokens=16,output_tokens=$OUTPUT_TOKENS" --outputs json \
    --output-dir "$WORK/run" --disable-progress >"$WORK/client.out" 2>"$WORK/client.err" &
CLIENT_PID=$!

started=$SECONDS
base= base_at= peak=0 last=0
next=$INTERVAL_S
while kill -0 "$CLIENT_PID" 2>/dev/null; do
    sleep 1
    elapsed=$((SECONDS - started))
    ((elapsed < next)) && continue
    next=$((next + INTERVAL_S))
    rss=$(rss_tree "$CLIENT_PID")
    ((rss == 0)) && continue # the client just exited
    n=$(served || echo "?")
    note=
    if [[ -z "$base" && "$n" != "?" ]] && ((n >= WARMUP_REQUESTS || elapsed >= WARMUP_S)); then
        base=$rss base_at="${elapsed}s, $n requests"
        note="  <- baseline (after warm-up)"
    elif [[ -n "$base" ]]; then
        ((rss > peak)) && peak=$rss
    fi
    last=$rss
    mock_rss=$(rss_tree "$MOCK_PID")
    printf '%6ss  %9s requests served  client RSS %7s MB  (mock %s MB)%s\n' \
        "$elapsed" "$n" "$(mb "$rss")" "$(mb "$mock_rss")" "$note"
done
status=0
wait "$CLIENT_PID" || status=$?
CLIENT_PID=
elapsed=$((SECONDS - started))

report="$WORK/run/benchmarks.json"
# Exit 4 with a client bottleneck is what a zero-latency server makes of a saturated client
# (the soak's point is memory, not the verdict): said, not failed. Anything else fails.
if [[ $status -eq 4 ]] && jq -e '.benchmarks[0].client.bottleneck' "$report" >/dev/null 2>&1; then
    echo "note: the client was the bottleneck (expected against a zero-latency mock): $(jq -r '.benchmarks[0].client.warnings | join("; ")' "$report")"
elif [[ $status -ne 0 ]]; then
    echo "FAIL: llmsurge exited with $status: $(tail -n 3 "$WORK/client.err")"
    exit 1
fi
read -r created completed errored cancelled rps < <(jq -r '.benchmarks[0] |
    "\(.requests.created) \(.requests.completed) \(.requests.errored) \(.requests.cancelled) \(.throughput.requests_per_s)"' "$report")
printf 'run: %s s, %s created = %s completed + %s errored + %s cancelled, %.0f req/s\n' \
    "$elapsed" "$created" "$completed" "$errored" "$cancelled" "$rps"
if ((created != completed + errored + cancelled || completed != REQUESTS)); then
    echo "FAIL: the run did not complete its $REQUESTS requests cleanly"
    exit 1
fi
if [[ -z "$base" || $peak -eq 0 ]]; then
    echo "FAIL: the run ended before a baseline and a later sample (raise REQUESTS or lower INTERVAL_S)"
    exit 1
fi
peak_growth=$(echo "($peak - $base) * 100 / $base" | bc -l)
end_growth=$(echo "($last - $base) * 100 / $base" | bc -l)
verdict=PASS
(($(echo "$peak_growth >= $MAX_GROWTH_PCT || $end_growth >= $MAX_GROWTH_PCT" | bc -l))) && verdict=FAIL
printf 'RSS growth after warm-up: baseline %s MB (%s), peak %s MB (%+.1f%%), end %s MB (%+.1f%%); target < %s%%: %s\n' \
    "$(mb "$base")" "$base_at" "$(mb "$peak")" "$peak_growth" "$(mb "$last")" "$end_growth" "$MAX_GROWTH_PCT" "$verdict"
[[ $verdict == PASS ]]
