-- Counts in a rate-limit window while one is open on the counter: a count
-- in no window (a window of 0 seconds or less, which opens none), as
-- Laravel's hit with a decay of 0 counts. Reading the counter, the timer
-- and counting in one script makes it one atomic step: callers at the same
-- moment on a key with no window never see each other's count, which
-- Laravel's INCRBY and later removal would let them see.
--
-- KEYS[1]  the full key of the counter (prefix included)
-- KEYS[2]  optional: the full key of the counter's window timer (on one
--          node; a cluster keeps the two keys in different slots)
-- ARGV[1]  the amount to add (an integer, may be negative)
-- ARGV[2]  without KEYS[2], optional: the timer's time to live in
--          milliseconds as the caller read it (PTTL: -2 for no timer, -1
--          for one without a time to live)
--
-- A counter holding a count other than 0 is counted in, as INCRBY counts,
-- and keeps its time to live. A missing counter, or one at 0, is counted
-- in only while the timer has a time to live (a window whose count was
-- reset, or taken back to 0), and then lives at least as long as the
-- timer; otherwise nothing is stored (a counter at 0 is removed).
--
-- Returns "kept count", two integers in one string: kept is 1 when the
-- counter holds count after the call, 0 when the call stored nothing and
-- count is the amount. Without KEYS[2] nor ARGV[2], a missing counter or
-- one at 0 answers "2 0": the caller reads the timer and calls again with
-- its time to live. A value that is not an integer, or a sum past a 64-bit
-- integer, is an error, as for INCRBY.

-- The amount added, and the new count as Redis holds it: exact past 2^53,
-- where Lua's doubles would round it.
local function counted()
    local next = redis.call('INCRBY', KEYS[1], ARGV[1])
    if math.abs(next) < 9007199254740992 then
        return string.format('1 %d', next)
    end
    return '1 ' .. redis.call('GET', KEYS[1])
end

local current = redis.call('GET', KEYS[1])
-- INCRBY reads 0 only as '0'.
if current and current ~= '0' then
    return counted()
end
local left
if KEYS[2] then
    left = redis.call('PTTL', KEYS[2])
elseif ARGV[2] then
    left = tonumber(ARGV[2])
else
    return '2 0'
end
if left > 0 then
    local reply = counted()
    -- -1 (no time to live) is below too.
    if redis.call('PTTL', KEYS[1]) < left then
        redis.call('PEXPIRE', KEYS[1], left)
    end
    return reply
end
if current then
    redis.call('DEL', KEYS[1])
end
return '0 ' .. ARGV[1]
