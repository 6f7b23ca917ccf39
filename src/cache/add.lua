-- Stores a value only when the key is absent, with a time to live: the
-- `add` of Laravel's Redis cache store, which runs this same EXISTS-then-SETEX
-- step as one script so that two racing writers cannot both win.
--
-- KEYS[1]  the full key (prefix included)
-- ARGV[1]  the value, stored as given (integers as decimal strings)
-- ARGV[2]  the time to live in whole seconds, at least 1
--
-- Returns 1 when the value was stored, 0 when the key already existed (its
-- value and time to live are left as they were).
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
end
redis.call('SETEX', KEYS[1], ARGV[2], ARGV[1])
return 1
