#!/usr/bin/env bash
# Instructions per request of each in-process server (benches/instructions.rs),
# counted by valgrind's callgrind: the same count on a busy machine as on a
# quiet one, for the same binary. Each server runs twice, 20,000 and 40,000
# requests; the difference over 20,000 is one request, without start-up.
#
#   benches/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "missing valgrind: apt-get install valgrind" >&2; exit 1; }
bin=$(cargo bench --bench instructions --no-run 2>&1 |
    grep -o 'target/release/deps/instructions-[0-9a-f]*' | tail -1)

count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        awk '/Collected/ { print $4 }'
}

printf '%-16s %12s %12s\n' server "per request" "over none"
none=""
for server in none pass_through driver_memory throttle_memory; do
    short=$(count "$server" 20000)
    long=$(count "$server" 40000)
    per=$(((long - short) / 20000))
    none=${none:-$per}
    printf '%-16s %12d %12d\n' "$server" "$per" "$((per - none))"
done
