#!/usr/bin/env bash
# The verdict matrix at length: `scripts/verdict-soak.sh N [FIRST_SEED]` runs N seeded
# draws of tests/engine/verdict_matrix.rs (CI runs seeds 1..16; the soak starts after
# them unless told otherwise), JOBS at a time (default 2), and prints every broken draw
# with its seed and the command that reruns it alone. Exit 0 only when every draw held.
set -euo pipefail
cd "$(dirname "$0")/.."

n="${1:?usage: scripts/verdict-soak.sh N [FIRST_SEED]}"
first="${2:-17}"
jobs="${JOBS:-2}"
[[ "$n" =~ ^[0-9]+$ && "$first" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ ]] || {
  echo "verdict-soak: N, FIRST_SEED and JOBS must be whole numbers" >&2
  exit 2
}

cargo test --quiet --test tests --no-run
logs="$(mktemp -d)"
started=$(date +%s)
per=$(((n + jobs - 1) / jobs))
pids=()
for ((j = 0; j < jobs; j++)); do
  from=$((first + j * per))
  count=$((n - j * per < per ? n - j * per : per))
  ((count > 0)) || continue
  VERDICT_MATRIX_FROM=$from VERDICT_MATRIX_DRAWS=$count \
    cargo test --quiet --test tests -- engine::verdict_matrix::soak --exact --nocapture \
    >"$logs/$j.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done

ok=$(cat "$logs"/*.log | grep -c '^verdict matrix: seed .*: ok$' || true)
broken=$(cat "$logs"/*.log | grep -c '^verdict matrix: seed .*: BROKEN$' || true)
echo "verdict-soak: $((ok + broken)) draws from seed $first in $(($(date +%s) - started)) s: $ok held, $broken broken"
# The tight objective must be seen to pass, fail and not decide over the draws.
said() { cat "$logs"/*.log | grep '^verdict matrix: seed .*: the tight objective said' | grep -o "$1" | wc -l; }
echo "verdict-soak: the tight objective said PASS $(said PASS), FAIL $(said FAIL), INCONCLUSIVE $(said INCONCLUSIVE) times (one per benchmark)"
if ((failed)); then
  # The test's failure message lists each broken draw, its reproduction and what broke.
  sed -n '/draws, broken ones:/,/^note:\|^failures:$/p' "$logs"/*.log
  echo "verdict-soak: logs in $logs" >&2
  exit 1
fi
rm -rf "$logs"
