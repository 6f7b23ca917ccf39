-- Adds an amount to a counter only while the result stays at or below a
-- ceiling. Reading, comparing and adding in one script makes the comparison
-- and the count one atomic step: concurrent callers can never push the
-- counter past the ceiling between a read and a write.
--
-- KEYS[1]  the full key of the counter (prefix included)
-- KEYS[2]  optional: the full key of the counter's window timer, written
--          first, only when it is missing (SET NX), with ARGV[4] as its value
--          and ARGV[1] as its time to live: a rate-limit window opened and
--          counted in one step, on one node (a cluster keeps the two keys in
--          different slots and sends the timer's SET on its own). A counter
--          found full by the call that opens the timer is a leftover of an
--          ended window, and is reset before the count
-- ARGV[1]  the time to live, in whole seconds (at least 1), that a counter
--          without one gets when it counts (a new counter, or one that
--          INCRBY created without a time to live)
-- ARGV[2]  the amount to add (an integer, may be negative)
-- ARGV[3]  the ceiling (an integer)
-- ARGV[4]  with KEYS[2]: the timer's value, the end of the window
--
-- Returns "counted count", two integers in one string (a client reads one
-- string far faster than an array): counted is 1 when the amount was added
-- and count is then the new value; counted is 0 when it was not, and count
-- is the value left untouched (0 for a missing counter). A value that is
-- not an integer is an error, as for INCRBY. With KEYS[2], a third integer
-- follows: when the call did not count, the timer's value (the end of the
-- window a refusal reports, read in this same step), else 0; 0 too for a
-- timer that does not hold an integer.
--
-- Counts are compared as Lua numbers (doubles): exact up to 2^53, far beyond
-- any rate-limit count; a ceiling of 2^63 - 1 means "no ceiling". They are
-- added and returned exactly to the end of a 64-bit integer: INCRBY takes
-- the amount as the caller wrote it, and a count past 2^53, which a double
-- would round, is returned as Redis holds it.
local opened = false
if KEYS[2] then
    opened = redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[1], 'NX')
end
local current = redis.call('GET', KEYS[1])
local count = 0
local count_text = '0'
if current then
    -- Digits only, as INCRBY reads them: Lua's tonumber would also take
    -- 0x10, 1e3, ' 7' and inf, which INCRBY refuses.
    if not string.match(current, '^-?%d+$') then
        return redis.error_reply('ERR value is not an integer or out of range')
    end
    count = tonumber(current)
    count_text = current
end
local amount = tonumber(ARGV[2])
local ceiling = tonumber(ARGV[3])
if opened and current and count + amount > ceiling and amount <= ceiling then
    -- A counter left full by a window whose timer is gone (evicted, or
    -- removed alone): that window has ended, as Laravel's tooManyAttempts
    -- reads it, and the call that opens the next one counts anew.
    redis.call('DEL', KEYS[1])
    count = 0
    count_text = '0'
end
if count + amount > ceiling then
    if KEYS[2] then
        local ends = redis.call('GET', KEYS[2])
        if not (ends and string.match(ends, '^-?%d+$')) then
            ends = '0'
        end
        return string.format('0 %s %s', count_text, ends)
    end
    return '0 ' .. count_text
end
local next = redis.call('INCRBY', KEYS[1], ARGV[2])
if redis.call('TTL', KEYS[1]) < 0 then
    redis.call('EXPIRE', KEYS[1], ARGV[1])
end
local next_text
if math.abs(next) < 9007199254740992 then
    next_text = string.format('%d', next)
else
    next_text = redis.call('GET', KEYS[1])
end
if KEYS[2] then
    return '1 ' .. next_text .. ' 0'
end
return '1 ' .. next_text
