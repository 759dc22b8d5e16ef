# shellcheck shell=bash
# The preamble the benchmark scripts share (sourced, not run; bash): the tools they need,
# the binary they measure, a configuration free of LLMSURGE_* variables, a work folder
# removed on exit, and a mock server in its own process. A script sources it after
# `cd`-ing to the repository root:
#   . scripts/lib/bench.sh

# need_tools TOOL...: exits 2 with one line naming the first missing tool and its Debian
# package (TOOL_HINT, when set, is the install command to print instead).
need_tools() {
    local tool
    for tool in "$@"; do
        if ! command -v "$tool" >/dev/null; then
            echo "error: $tool is missing (Debian: ${TOOL_HINT:-apt-get install -y $tool})" >&2
            exit 2
        fi
    done
}

# bench_binary: sets BIN to BENCH_BIN (another build to compare, e.g. the code before a
# change) or to this tree's release binary, built now.
bench_binary() {
    if [[ -n ${BENCH_BIN:-} ]]; then
        BIN=$BENCH_BIN
    else
        cargo build --release --quiet --bin llmsurge
        local target_dir=${CARGO_TARGET_DIR:-target}
        [[ $target_dir == /* ]] || target_dir="$(pwd)/$target_dir"
        BIN="$target_dir/release/llmsurge"
    fi
}

# clean_env [PREFIX]: unsets every variable named PREFIX… (default LLMSURGE_): they would
# silently change the configuration under test. And SSLKEYLOGFILE: a user's key log, kept
# for curl or a browser, would get the run's TLS secrets or stop the mock (a path it
# cannot write); a script that wants one sets its own.
clean_env() {
    local var
    for var in $(env | grep -o "^${1:-LLMSURGE_}[A-Z_0-9]*" || true); do unset "$var"; done
    unset SSLKEYLOGFILE
}

# bench_workdir: a fresh WORK folder, removed on exit with the mock (see stop_mock); a
# script with more to stop defines its own EXIT trap that calls bench_cleanup.
bench_workdir() {
    WORK=$(mktemp -d)
    MOCK_PID=
    trap bench_cleanup EXIT
}

# stop_mock: stops the mock launch_mock started, if it runs.
stop_mock() {
    if [[ -n "${MOCK_PID:-}" ]]; then
        kill "$MOCK_PID" 2>/dev/null || true
        wait "$MOCK_PID" 2>/dev/null || true
        MOCK_PID=
    fi
}

bench_cleanup() {
    stop_mock
    rm -rf "$WORK"
}

# launch_mock COMMAND...: runs COMMAND (an `llmsurge mock-server --port 0 …`, perhaps
# behind taskset) in the background with its output in $WORK/mock.out and mock.err, sets
# MOCK_PID, and waits for the address it prints; sets URL, or exits 1 saying why
# (MOCK_NAME names the mock in that line).
launch_mock() {
    "$@" >"$WORK/mock.out" 2>"$WORK/mock.err" &
    MOCK_PID=$!
    URL=
    for _ in $(seq 100); do
        URL=$(head -n1 "$WORK/mock.out" 2>/dev/null | sed -n 's/^listening on //p')
        [[ -n "$URL" ]] && return 0
        sleep 0.1
    done
    echo "error: ${MOCK_NAME:-the mock} did not start: $(cat "$WORK/mock.err")" >&2
    exit 1
}

# rss_tree PID: VmRSS (KiB) of PID and its children (the workers), summed.
rss_tree() {
    local sum=0 p k v _
    for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        while read -r k v _; do
            [[ $k == VmRSS: ]] && sum=$((sum + v))
        done 2>/dev/null <"/proc/$p/status" || true
    done
    echo "$sum"
}

# cpu_ticks PID: CPU ticks (user+sys, every thread; getconf CLK_TCK a second) PID has
# used so far, with those of the children it has waited for (a worker that exited);
# fails when PID is gone. Builtins only: the samplers call it while the run they measure
# shares the machine.
cpu_ticks() {
    local line f
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    # Fields after the command name, which is in parentheses and may hold spaces: utime,
    # stime, cutime and cstime are the 12th to 15th of them.
    read -r -a f <<<"${line##*) }"
    echo $((f[11] + f[12] + f[13] + f[14]))
}

# tree_ticks PID: cpu_ticks of PID (a client's coordinator) and of its live children
# (its workers), summed; 0 once PID is gone. A worker reaped while this reads is missed
# (PID's ticks are read first, without it): of successive samples, keep the largest.
tree_ticks() {
    local sum=0 q n list ids kids=()
    for list in /proc/"$1"/task/*/children; do
        ids=()
        read -r -a ids 2>/dev/null <"$list" || true
        kids+=("${ids[@]}")
    done
    for q in "$1" "${kids[@]}"; do
        n=$(cpu_ticks "$q") && sum=$((sum + n))
    done
    echo "$sum"
}

# core_busy_ticks LIST: busy ticks so far of the cores in LIST (a taskset list: 1, 0-3,
# 0,2-5), summed: everything but idle and iowait; steal included (time the hypervisor
# gave the core to someone else).
core_busy_ticks() {
    local -A want=()
    local part lo hi c name user nice sys irq softirq steal sum=0
    for part in ${1//,/ }; do
        lo=${part%-*} hi=${part#*-}
        for ((c = lo; c <= hi; c++)); do want[cpu$c]=1; done
    done
    # One read of the whole file: `read` lines straight from /proc/stat would seek back
    # after each, and the kernel writes the file anew at that offset, shifted.
    while read -r name user nice sys _ _ irq softirq steal _; do
        if [[ $name == cpu?* && -n ${want[$name]:-} ]]; then
            sum=$((sum + user + nice + sys + irq + softirq + steal))
        fi
    done <<<"$(</proc/stat)"
    echo "$sum"
}

# make_pki: a throwaway CA ($WORK/pki/ca.pem) and a leaf for 127.0.0.1 and localhost
# ($WORK/pki/cert.pem, key.pem), made by openssl, for a mock serving HTTPS.
make_pki() {
    local d="$WORK/pki"
    mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=llmsurge bench CA" -keyout "$d/ca-key.pem" -out "$d/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$d/key.pem" -out "$d/leaf.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/ext"
    openssl x509 -req -in "$d/leaf.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
        -days 2 -extfile "$d/ext" -out "$d/cert.pem" 2>/dev/null
}

# median N...: the middle of the numbers (the lower middle of an even count).
median() {
    printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}
