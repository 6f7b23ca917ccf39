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
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "missing valgrind: apt-get install valgrind" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "missing redis-server: apt-get install redis-server" >&2; exit 1; }
bin=$(cargo bench --bench instructions --no-run 2>&1 |
    grep -o 'target/release/deps/instructions-[0-9a-f]*' | tail -1)

count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        --collect-atstart=no --toggle-collect='instructions::measured*' "$bin" "$1" "$2" 2>&1 |
        awk '/Collected/ { print $4 }'
}

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
