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
--          found full (with no room for the amount: above ARGV[3]) by the
--          call that opens the timer is a leftover of an ended window, and
--          is reset before the count when a missing counter has room
--          (ARGV[3] at least 0); one with room is kept and counted on
-- ARGV[1]  the time to live, in whole seconds (at least 1), that a counter
--          without one gets when it counts (a new counter, or one that
--          INCRBY created without a time to live), and that a counter the
--          call opening the window counts on gets when its own is shorter,
--          and that a counter without one gets when the call opening the
--          window is refused
-- ARGV[2]  the amount to add (an integer, may be negative)
-- ARGV[3]  the room: the ceiling less the amount (an integer, which may lie
--          beyond a 64-bit one), which the count must not exceed
-- ARGV[4]  with KEYS[2]: the timer's value, the end of the window
--
-- Returns "counted count", two integers in one string (a client reads one
-- string far faster than an array): counted is 1 when the amount was added
-- and count is then the new value; counted is 0 when it was not, and count
-- is the value left untouched (0 for a missing counter). A value that is
-- not an integer is an error, as for INCRBY. With KEYS[2], a third integer
-- follows: when the call did not count, the timer's value (the end of the
-- window a refusal reports, read in this same step), else 0; 0 too for a
-- timer that does not hold an integer (plain, or serialized by PHP).
--
-- Counts are compared as decimal text, exactly: Lua's numbers are doubles,
-- which past 2^53 would let a count of 2^53 + 1 pass a ceiling of 2^53.
-- They are added and returned exactly to the end of a 64-bit integer:
-- INCRBY takes the amount as the caller wrote it, and a count past 2^53,
-- which a double would round, is returned as Redis holds it.

-- Whether text is an integer as INCRBY reads one: an optional '-', no
-- leading zero (nor '-0'), within a 64-bit integer.
local function is_integer(text)
    if text == '0' then
        return true
    end
    local sign, digits = string.match(text, '^(%-?)([1-9]%d*)$')
    if not digits or #digits > 19 then
        return false
    end
    if #digits < 19 then
        return true
    end
    return digits <= (sign == '-' and '9223372036854775808' or '9223372036854775807')
end

-- Whether the integer a is greater than the integer b, both written as
-- is_integer reads them (b may be longer).
local function greater(a, b)
    local a_negative = string.sub(a, 1, 1) == '-'
    local b_negative = string.sub(b, 1, 1) == '-'
    if a_negative ~= b_negative then
        return b_negative
    end
    local a_digits = a_negative and string.sub(a, 2) or a
    local b_digits = b_negative and string.sub(b, 2) or b
    if a_digits == b_digits then
        return false
    end
    local longer
    if #a_digits ~= #b_digits then
        longer = #a_digits > #b_digits
    else
        longer = a_digits > b_digits
    end
    if a_negative then
        return not longer
    end
    return longer
end

-- The timer's value as an integer's text: plain, or serialized by PHP
-- (i:<n>;, as a Laravel application with phpredis's serializer writes
-- it); '0' for anything else.
local function window_end(text)
    if not text then
        return '0'
    end
    local digits = string.match(text, '^i:(.*);$') or text
    if is_integer(digits) then
        return digits
    end
    return '0'
end

local opened = false
-- The timer is written only when it is missing: a full bucket whose
-- window is open is refused without a write, so a Redis out of memory
-- (maxmemory with noeviction refuses a script's first write) still refuses
-- it, as Laravel's tooManyAttempts, which only reads, does.
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 0 then
    opened = redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[1], 'NX')
end
local current = redis.call('GET', KEYS[1])
local count_text = '0'
if current then
    -- As INCRBY reads it: Lua's tonumber would also take 0x10, 1e3, ' 7'
    -- and inf, and digits past a 64-bit integer, which INCRBY refuses.
    if not is_integer(current) then
        return redis.error_reply('ERR value is not an integer or out of range')
    end
    count_text = current
end
local room = ARGV[3]
if opened and current and greater(count_text, room) and not greater('0', room) then
    -- A counter left full by a window whose timer is gone (evicted, or
    -- removed alone): that window has ended, as Laravel's tooManyAttempts
    -- reads a count at or above the maximum (the ceiling less the amount,
    -- plus one), and the call that opens the next one counts anew. A
    -- counter with room is counted on, as tooManyAttempts keeps it.
    redis.call('DEL', KEYS[1])
    count_text = '0'
end
-- The answer to a call that does not count. Refused when it opened the
-- window, it gives a full counter with no time to live (a plain INCRBY
-- wrote it, here or in a Laravel application) the window's, so that it
-- ends with this window; one with a time to live keeps it: it may be a
-- count an ended window left full, which, lengthened, would refuse this
-- whole window.
local function refused()
    if opened and redis.call('PTTL', KEYS[1]) == -1 then
        redis.call('EXPIRE', KEYS[1], ARGV[1])
    end
    if KEYS[2] then
        return string.format('0 %s %s', count_text, window_end(redis.call('GET', KEYS[2])))
    end
    return '0 ' .. count_text
end
if greater(count_text, room) then
    return refused()
end
local next = redis.pcall('INCRBY', KEYS[1], ARGV[2])
if type(next) == 'table' then
    -- Past a 64-bit integer ("increment or decrement would overflow"): the
    -- room bounds an increment, so only a decrement gets here, and it is
    -- refused, as the memory store refuses it, with the counter left as it
    -- was. Any other error (out of memory) is the call's error.
    if string.find(next.err, 'overflow', 1, true) then
        return refused()
    end
    return next
end
-- A counter without a time to live gets one. And a counter the call that
-- opened the window counts on (one an earlier window left under its
-- ceiling, or one put) lives at least as long as the window: ending first,
-- it would start the window's count again before the window ends.
local left = redis.call('PTTL', KEYS[1])
if left < 0 or (opened and left < tonumber(ARGV[1]) * 1000) then
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
