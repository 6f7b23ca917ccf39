-- Gives a key at least a time to live: one with a shorter one, or none,
-- gets it; one with a longer one keeps its own; a missing key stays
-- missing. On a Redis Cluster, the call that opened a rate-limit window
-- sends it for the window's counter once the timer is written, so that
-- the counter, which lives in another slot and was written apart, ends no
-- earlier than the window.
--
-- KEYS[1]  the full key (prefix included)
-- ARGV[1]  the time to live, in whole seconds (at least 1)
--
-- Returns 1 when the time to live was set, else 0.
local left = redis.call('PTTL', KEYS[1])
if left == -2 then
    return 0
end
if left == -1 or left < tonumber(ARGV[1]) * 1000 then
    redis.call('EXPIRE', KEYS[1], ARGV[1])
    return 1
end
return 0
