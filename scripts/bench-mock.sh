#!/usr/bin/env bash
# Speed and memory of `llmsurge mock-server` on one core (a script, not a test).
#
# Starts the release mock pinned to core 0 (zero latency, 16 output tokens, streaming)
# and drives it with wrk pinned to core 1. Prints the streamed requests/s (PASS when at
# least 10,000/s) and the mock's RSS before and after a soak of at least 1,000,000
# requests (memory must stay flat).
#
# Environment: DURATION (s, throughput run, default 10), CONNECTIONS (default 64),
# SOAK_REQUESTS (default 1000000), MOCK_CORE / LOAD_CORE (default 0 / 1),
# CARGO_TARGET_DIR (where to build, default ./target). Needs wrk
# (`apt-get install -y wrk`) and taskset.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
SOAK_REQUESTS=${SOAK_REQUESTS:-1000000}
MOCK_CORE=${MOCK_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
TARGET_RPS=10000

cd "$(dirname "$0")/.."
. scripts/lib/bench.sh
need_tools wrk taskset curl
BENCH_BIN= bench_binary
bench_workdir
clean_env LLMSURGE_MOCK_

launch_mock taskset -c "$MOCK_CORE" "$BIN" mock-server --port 0 --workers 1 --instant \
    --ttft-ms 0 --itl-ms 0 --output-tokens 16

cat >"$WORK/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"llmsurge-mock","messages":[{"role":"user","content":"Say something."}],"stream":true,"max_tokens":16,"stream_options":{"include_usage":true}}'
LUA

rss_kib() { ps -o rss= -p "$MOCK_PID" | tr -d ' '; }
completed() { curl -sf "$URL/stats" | sed -n 's/.*"completed":\([0-9]*\).*/\1/p'; }
tokens_sent() { curl -sf "$URL/stats" | sed -n 's/.*"tokens_sent":\([0-9]*\).*/\1/p'; }

# wrk prints "Requests/sec: N"; errors and non-2xx lines show only when there are some.
drive() { # seconds
    taskset -c "$LOAD_CORE" wrk -t1 -c"$CONNECTIONS" -d"${1}s" --timeout 10s \
        -s "$WORK/chat.lua" "$URL/v1/chat/completions"
}

drive 2 >/dev/null # warm-up: connections, allocator, page faults
RSS_BEFORE=$(rss_kib)
BEFORE=$(completed)

drive "$DURATION" >"$WORK/wrk.txt"
RPS=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$WORK/wrk.txt")
if grep -qE 'Non-2xx|Socket errors' "$WORK/wrk.txt"; then
    echo "warning: $(grep -E 'Non-2xx|Socket errors' "$WORK/wrk.txt" | tr '\n' ' ')" >&2
fi
RPS_INT=${RPS%.*}
VERDICT=MISS
((RPS_INT >= TARGET_RPS)) && VERDICT=PASS
echo "streamed requests/s: ${RPS_INT} (16 tokens each, mock on 1 core, ${CONNECTIONS} connections; target >= ${TARGET_RPS}): ${VERDICT}"

# Soak long enough for SOAK_REQUESTS at the measured rate (plus margin), then compare RSS.
SOAK_SECONDS=$(((SOAK_REQUESTS * 12 / 10) / (RPS_INT > 0 ? RPS_INT : 1) + 1))
drive "$SOAK_SECONDS" >/dev/null
AFTER=$(completed)
RSS_AFTER=$(rss_kib)
SERVED=$((AFTER - BEFORE))
TOKENS=$(tokens_sent)
echo "mock RSS: ${RSS_BEFORE} KiB before, ${RSS_AFTER} KiB after ${SERVED} more requests (${SOAK_SECONDS}s soak; $((TOKENS / (AFTER > 0 ? AFTER : 1))) tokens per request)"
if ((SERVED < SOAK_REQUESTS)); then
    echo "warning: the soak served fewer than ${SOAK_REQUESTS} requests" >&2
fi
