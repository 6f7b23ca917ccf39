#!/usr/bin/env bash
# Instructions per request of each in-process server and of the same servers
# over HTTP on loopback (server and client together), of the servers on a
# redis-server the bench starts (this process only), per decision of the
# memory driver and governor over 100,000 keys and on one hot key, and per
# decision of the memory driver through `Arc<dyn RateLimiterDriver>`, and per
# response of a decision's two headers
# (benches/instructions.rs),
# counted by valgrind's callgrind: the same count on a busy machine as on a
# quiet one, for the same binary. Each subject runs for two counts, with
# instructions collected only inside the bench's `measured` function (the
# counted requests or decisions); the difference divided by the difference
# in count is one request or decision, without start-up, warm-up or filling.
#
#   benches/instructions.sh
#   benches/instructions.sh --cache   # the servers only, with the cache
#                                     # lines each request fetches
#
# With --cache, callgrind also simulates a processor's caches (32 KiB
# 8-way instruction and data caches and a 512 KiB 8-way second level: a
# Zen 3 core's) and the script prints, beside each server's instructions a
# request, the lines it fetched into the first-level instruction and data
# caches. A request in process runs the same code thousands of times in a
# row, and its lines stay in the caches; served over HTTP, the request's
# code alternates with hyper's and the client's, and every line a limiter
# adds is fetched again for each request. The count depends on where the
# linker put each function, so it moves by a few percent between builds.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "missing valgrind: apt-get install valgrind" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "missing redis-server: apt-get install redis-server" >&2; exit 1; }
bin=$(cargo bench --bench instructions --no-run 2>&1 |
    grep -o 'target/release/deps/instructions-[0-9a-f]*' | tail -1)

# collected <subject> <count> [valgrind options]: callgrind's line of the
# counts collected inside `measured` (instructions, then with --cache-sim
# the cache accesses and misses)
collected() {
    local subject=$1 units=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" \
        --collect-atstart=no --toggle-collect='instructions::measured*' "$bin" "$subject" "$units" 2>&1 |
        grep Collected
}

count() {
    collected "$1" "$2" | awk '{ print $4 }'
}

# cache_counts <subject> <count>: instructions, instruction-cache misses and
# data-cache misses (reads and writes) inside `measured`
cache_counts() {
    collected "$1" "$2" --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64 |
        awk '{ print $4, $7, $8 + $9 }'
}

# cache_per <subject> <smaller count>: the three counts per unit between the
# count and twice the count
cache_per() {
    local short long
    read -r -a short <<<"$(cache_counts "$1" "$2")"
    read -r -a long <<<"$(cache_counts "$1" $(($2 * 2)))"
    echo $(((long[0] - short[0]) / $2)) $(((long[1] - short[1]) / $2)) $(((long[2] - short[2]) / $2))
}

if [ "${1:-}" = "--cache" ]; then
    for group in "in process" "over HTTP"; do
        printf '%-22s %12s %12s %12s %14s %14s\n' "$group" instructions "code lines" "data lines" "code over none" "data over none"
        base=()
        for server in none pass_through driver_memory throttle_memory; do
            if [ "$group" = "over HTTP" ]; then subject=http_$server count=2000; else subject=$server count=5000; fi
            read -r -a n <<<"$(cache_per "$subject" "$count")"
            [ ${#base[@]} -eq 0 ] && base=("${n[@]}")
            printf '%-22s %12d %12d %12d %14d %14d\n' "$server" "${n[0]}" "${n[1]}" "${n[2]}" \
                $((n[1] - base[1])) $((n[2] - base[2]))
        done
        echo
    done
    exit 0
fi

# per <subject> <smaller count>: instructions per unit between the count and
# twice the count
per() {
    local short long
    short=$(count "$1" "$2")
    long=$(count "$1" $(($2 * 2)))
    echo $(((long - short) / $2))
}

printf '%-22s %12s %12s\n' server "per request" "over none"
none=""
for server in none pass_through driver_memory throttle_memory throttle_named_memory; do
    n=$(per "$server" 20000)
    none=${none:-$n}
    in_process_none=$none
    printf '%-22s %12d %12d\n' "$server" "$n" "$((n - none))"
done
printf '\n%-22s %12s %12s\n' "over HTTP" "per request" "over none"
none=""
for server in none pass_through driver_memory throttle_memory; do
    n=$(per "http_$server" 5000)
    none=${none:-$n}
    printf '%-22s %12d %12d\n' "$server" "$n" "$((n - none))"
done
printf '\n%-22s %12s %12s %12s\n' "on Redis, in process" "per request" "over none" "over ping"
ping=""
for server in ping_redis driver_redis throttle_redis; do
    n=$(per "$server" 5000)
    ping=${ping:-$n}
    printf '%-22s %12d %12d %12d\n' "$server" "$n" "$((n - in_process_none))" "$((n - ping))"
done
printf '\n%-28s %12s\n' "headers, on a new response" "per response"
for writes in headers_limit_60 headers_limit_1000000; do
    printf '%-28s %12d\n' "$writes" "$(per "$writes" 100000)"
done
printf '\n%-28s %12s\n' limiter "per decision"
for decider in driver_decision governor_decision driver_hot_key governor_hot_key driver_dyn_async driver_dyn_without_waiting; do
    printf '%-28s %12d\n' "$decider" "$(per "$decider" 300000)"
done
