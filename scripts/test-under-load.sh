#!/usr/bin/env bash
# The README's test command on a busy machine (a script, not a test).
#
# A shared CI runner is rarely idle: this builds the tests first (quietly, alone), then runs
# `cargo nextest run --workspace` beside one CPU-bound loop per core and a neighbour
# `llmsurge` load test (a constant rate against its own mock, over and over) until the
# tests finish. No test may depend on having the machine to itself. Every background
# process is stopped on exit, and the script exits with the test command's status.
#
# Environment: NEIGHBOUR_RATE (req/s of the neighbour load test, default 200), BUSY_LOOPS
# (CPU-bound loops, default one per core), CARGO_TARGET_DIR. Extra arguments go to
# `cargo nextest run` (e.g. `-E 'test(/engine::sessions/)'` to try a few tests).
set -euo pipefail

NEIGHBOUR_RATE=${NEIGHBOUR_RATE:-200}
BUSY_LOOPS=${BUSY_LOOPS:-$(nproc)}

cd "$(dirname "$0")/.."
if ! cargo nextest --version >/dev/null 2>&1; then
    echo "error: cargo-nextest is missing (cargo install cargo-nextest --locked)" >&2
    exit 2
fi

# Build first, with the machine to ourselves: the load is for the tests, not the compiler.
cargo nextest run --workspace --no-run "$@"
BIN="$(pwd)/${CARGO_TARGET_DIR:-target}/debug/llmsurge"

# Environment variables would change the neighbour's configuration.
. scripts/lib/bench.sh
clean_env

WORK=$(mktemp -d)
PIDS=()
NEIGHBOUR_PGID=
cleanup() {
    # The neighbour loop runs in its own process group (its llmsurge and workers too).
    if [[ -n "$NEIGHBOUR_PGID" ]]; then
        kill -TERM -- "-$NEIGHBOUR_PGID" 2>/dev/null || true
    fi
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The neighbour's own mock (zero latency: the load is the client's and the mock's CPU).
MOCK_NAME="the neighbour's mock" launch_mock "$BIN" mock-server --port 0 --instant
PIDS+=("$MOCK_PID")

# The neighbour load test, again and again, in a process group of its own.
setsid bash -c '
    while :; do
        "$0" benchmark run --target "$1" --profile constant --rate "$2" --max-seconds 30 \
            --outputs json --output-dir "$3/neighbour" >/dev/null 2>&1 || true
    done' "$BIN" "$URL" "$NEIGHBOUR_RATE" "$WORK" &
NEIGHBOUR_PGID=$!
PIDS+=($!)

# One CPU-bound loop per core.
for _ in $(seq "$BUSY_LOOPS"); do
    yes >/dev/null &
    PIDS+=($!)
done

echo "test-under-load: $BUSY_LOOPS busy loops and a neighbour load test at $NEIGHBOUR_RATE req/s against $URL"
status=0
cargo nextest run --workspace "$@" || status=$?
echo "test-under-load: the tests exited with $status"
exit "$status"
