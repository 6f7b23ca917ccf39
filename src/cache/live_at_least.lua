-- Gives a key that exists at least a time to live: one with a shorter one,
-- or none, gets it; one with a longer one keeps its own; a missing key
-- stays missing. A window's counter is given its window's time to live
-- this way where the two were written apart (a Redis Cluster), and by a
-- count in no window that a window's timer keeps.
--
-- KEYS[1]  the full key (prefix included)
-- ARGV[1]  the time to live, in milliseconds (at least 1)
--
-- Returns 1 when the time to live was set, else 0.
local left = redis.call('PTTL', KEYS[1])
if left == -2 then
    return 0
end
if left == -1 or left < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return 1
end
return 0
