#!/usr/bin/env bash
# Runs the performance measurements of docs/performance.md one after the
# other and keeps each one's output in target/perf/<bench>.txt.
#
#   benches/run.sh                 # all of them (about twenty minutes)
#   benches/run.sh redis_driver    # one: the Redis driver and facade beside
#                                  # redis-benchmark, round trips, memory per key
#   benches/run.sh http_redis_cpu  # the HTTP bench with redis-server on the
#                                  # last CPU and the bench on the others
#
# Each bench prints the machine and the load average it ran on, and a
# `target:` line for each target it checks; at the end every such line of
# the run is gathered in target/perf/targets.txt. The targets
# are ratios between contenders of one run; on a busy machine (load average
# above about 1 on two cores) the ratios are noisy, so run it on a quiet one.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
    command -v "$1" >/dev/null || { echo "missing $1: $2" >&2; exit 1; }
}
need redis-server "apt-get install redis-server"
need redis-benchmark "apt-get install redis-tools"

benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
    benches=(memory_driver slot_layout memory_footprint redis_driver middleware http http_redis_cpu)
fi

out=target/perf
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "kernel: $(uname -r)"
    echo "rustc: $(rustc --version)"
    echo "redis: $(redis-server --version)"
} | tee "$out/machine.txt"

for bench in "${benches[@]}"; do
    echo "== $bench ($(uptime | sed 's/.*load average/load average/')) =="
    case "$bench" in
    http_redis_cpu)
        cpus=$(nproc --all)
        if [ "$cpus" -lt 2 ]; then
            echo "skipped: one CPU, none to give redis-server alone" | tee "$out/$bench.txt"
            continue
        fi
        HTTP_BENCH_REDIS_CPU=$((cpus - 1)) cargo bench --bench http 2>&1 | tee "$out/$bench.txt"
        ;;
    *)
        cargo bench --bench "$bench" 2>&1 | tee "$out/$bench.txt"
        ;;
    esac
done

# Every target this run checked, one line each, met or MISSED.
files=()
for bench in "${benches[@]}"; do
    files+=("$out/$bench.txt")
done
echo "== targets =="
grep -h '^target:' "${files[@]}" | tee "$out/targets.txt" || true
