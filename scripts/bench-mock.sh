#!/usr/bin/env bash
# Speed and memory of `llmsurge mock-server` (a script, not a test).
#
# Starts the release mock pinned to core 0 (`--workers 1`, zero latency, 16 output
# tokens, streaming) and drives it with wrk pinned to core 1. Prints the streamed
# requests/s (PASS when at least 60,000/s: the mock must outrun the client, which drives
# about 59,000/s from one core) and the mock's RSS before and after a soak of at least
# 1,000,000 requests (memory must stay flat), with the mock's own CPU per request (its
# utime+stime over the requests it completed: how busy its core was, so a rate held back
# by wrk rather than the mock shows as a core not full). Then the same load with
# `--truth` (the truth file and `/stats` must stay exact at that rate: every request wrk
# read is in both, the file's completed lines and tokens equal `/stats`' counts). Then a
# row for `--workers 2`: on a machine
# with 4 cores or more the mock gets cores 0-1 and wrk (2 threads) cores 2-3, which
# shows how the workers scale; with fewer, both workers share core 0 (wrk needs the other
# core), which shows only what the multi-thread runtime costs, and the line says so.
#
# Environment: DURATION (s, throughput run, default 10), CONNECTIONS (default 64),
# SOAK_REQUESTS (default 1000000; 0 skips the soak), MOCK_CORE / LOAD_CORE (default
# 0 / 1), TRUTH (0 skips the `--truth` row), WORKERS2 (0 skips the `--workers 2` row), CARGO_TARGET_DIR (where to build,
# default ./target), BENCH_BIN (a binary to measure instead of building this tree's: how
# the "before" figures are taken). Needs wrk (`apt-get install -y wrk`), taskset, curl
# and python3.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
SOAK_REQUESTS=${SOAK_REQUESTS:-1000000}
MOCK_CORE=${MOCK_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
TRUTH=${TRUTH:-1}
WORKERS2=${WORKERS2:-1}
TARGET_RPS=60000
for var in DURATION CONNECTIONS; do
    if ! [[ ${!var} =~ ^[1-9][0-9]*$ ]]; then
        echo "error: $var=${!var}: a whole number of at least 1 is needed" >&2
        exit 2
    fi
done

cd "$(dirname "$0")/.."
. scripts/lib/bench.sh
need_tools wrk taskset curl python3
bench_binary
bench_workdir
clean_env LLMSURGE_MOCK_

MOCK_ARGS=(mock-server --port 0 --instant --ttft-ms 0 --itl-ms 0 --output-tokens 16)
launch_mock taskset -c "$MOCK_CORE" "$BIN" "${MOCK_ARGS[@]}" --workers 1

cat >"$WORK/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"llmsurge-mock","messages":[{"role":"user","content":"Say something."}],"stream":true,"max_tokens":16,"stream_options":{"include_usage":true}}'
LUA

rss_kib() { ps -o rss= -p "$MOCK_PID" | tr -d ' '; }
completed() { curl -sf "$URL/stats" | sed -n 's/.*"completed":\([0-9]*\).*/\1/p'; }
tokens_sent() { curl -sf "$URL/stats" | sed -n 's/.*"tokens_sent":\([0-9]*\).*/\1/p'; }

# wrk prints "Requests/sec: N"; errors and non-2xx lines show only when there are some.
drive() { # seconds [cores [threads]]
    taskset -c "${2:-$LOAD_CORE}" wrk -t"${3:-1}" -c"$CONNECTIONS" -d"${1}s" --timeout 10s \
        -s "$WORK/chat.lua" "$URL/v1/chat/completions"
}

# rps FILE: wrk's requests/s, whole; warns of errors wrk reported.
rps() {
    if grep -qE 'Non-2xx|Socket errors' "$1"; then
        echo "warning: $(grep -E 'Non-2xx|Socket errors' "$1" | tr '\n' ' ')" >&2
    fi
    local r
    r=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$1")
    echo "${r%.*}"
}

# wrk_count FILE: the responses wrk read in full ("N requests in Ds").
wrk_count() { sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$1"; }

drive 2 >"$WORK/warm.txt" # warm-up: connections, allocator, page faults
RSS_BEFORE=$(rss_kib)
BEFORE=$(completed)
TICKS_BEFORE=$(cpu_ticks "$MOCK_PID")

drive "$DURATION" >"$WORK/wrk.txt"
TICKS=$(($(cpu_ticks "$MOCK_PID") - TICKS_BEFORE))
DONE=$(($(completed) - BEFORE))
RPS_INT=$(rps "$WORK/wrk.txt")
VERDICT=MISS
((RPS_INT >= TARGET_RPS)) && VERDICT=PASS
echo "streamed requests/s: ${RPS_INT} (16 tokens each, mock on 1 core, ${CONNECTIONS} connections; target >= ${TARGET_RPS}): ${VERDICT}"
HZ=$(getconf CLK_TCK)
awk -v t="$TICKS" -v hz="$HZ" -v d="$DURATION" -v n="$DONE" 'BEGIN {
    if (t > 0 && n > 0)
        printf "  the mock'"'"'s core: %.0f%% busy, %.1f µs of its CPU a request (%.0f requests per CPU-second)\n", 100 * t / hz / d, 1e6 * t / hz / n, n * hz / t
}'

# Soak long enough for SOAK_REQUESTS at the measured rate (plus margin), then compare RSS.
if ((SOAK_REQUESTS > 0)); then
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
fi

# --truth: its own mock, the same load; the file is complete once the mock stopped.
if ((TRUTH > 0)); then
    stop_mock
    launch_mock taskset -c "$MOCK_CORE" "$BIN" "${MOCK_ARGS[@]}" --workers 1 --truth "$WORK/truth.jsonl"
    drive 2 >"$WORK/warm3.txt"
    drive "$DURATION" >"$WORK/wrk3.txt"
    READ=$(($(wrk_count "$WORK/warm3.txt") + $(wrk_count "$WORK/wrk3.txt")))
    STATS=$(curl -sf "$URL/stats")
    stop_mock
    READ=$READ STATS=$STATS CONNECTIONS=$CONNECTIONS python3 - "$WORK/truth.jsonl" "$(rps "$WORK/wrk3.txt")" <<'PY'
import json, os, sys
stats = json.loads(os.environ["STATS"])
read, conns = int(os.environ["READ"]), int(os.environ["CONNECTIONS"])
lines = completed = tokens = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    lines += 1
    if t["outcome"] == "completed":
        completed += 1
        tokens += t["content_tokens"] + t["reasoning_tokens"]
# wrk read every response it counts; one it cut when it stopped (at most one a connection
# a run, two runs) the mock may have finished writing first, so counted as completed.
exact = (completed == stats["completed"] and tokens == stats["tokens_sent"]
         and read <= completed <= read + 2 * conns)
print(f"with --truth: streamed requests/s: {sys.argv[2]}; truth {lines} lines, {completed} completed "
      f"with {tokens} tokens; /stats {stats['completed']} completed, {stats['tokens_sent']} tokens; "
      f"wrk read {read}: {'EXACT' if exact else 'NOT EXACT'}")
sys.exit(0 if exact else 1)
PY
fi

# --workers 2: its own mock, the same load.
if ((WORKERS2 > 0)); then
    stop_mock
    if (($(nproc) >= 4)); then
        CORES2=0-1 LOAD2=2-3 THREADS2=2
        WHERE="mock on cores 0-1, wrk (2 threads) on cores 2-3"
    else
        CORES2=$MOCK_CORE LOAD2=$LOAD_CORE THREADS2=1
        WHERE="both workers on core $MOCK_CORE: $(nproc) cores here, wrk needs the other; the multi-thread runtime's cost, not its scaling"
    fi
    launch_mock taskset -c "$CORES2" "$BIN" "${MOCK_ARGS[@]}" --workers 2
    drive 2 "$LOAD2" "$THREADS2" >/dev/null
    drive "$DURATION" "$LOAD2" "$THREADS2" >"$WORK/wrk2.txt"
    echo "--workers 2: streamed requests/s: $(rps "$WORK/wrk2.txt") (${WHERE})"
fi
