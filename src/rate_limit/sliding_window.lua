-- One sliding-window decision for one key, atomically.
--
-- The bucket is a sorted set: one member per admitted hit, whose score and
-- member are the same integer, the Redis TIME of the hit in microseconds.
-- Integer members keep the set small (listpack-encoded integers) and unique
-- (ZADD NX refuses a stamp that is taken, and the hit takes the next free
-- microsecond). The time is Redis's own, so application servers with skewed
-- clocks agree on one window.
--
-- KEYS[1]  the bucket
-- ARGV[1]  max_requests: the most hits the window holds (an integer >= 1)
-- ARGV[2]  the window in microseconds (an integer >= 1000)
-- ARGV[3]  '1' to admit and record the call when the window has room,
--          '0' to only read (for retry_after)
--
-- The window is (now - window, now]: a hit exactly one window old is out.
--
-- Returns one string of four integers separated by spaces,
-- "admitted count gate now" (a client reads one string far faster than an
-- array of four):
--   admitted  1 when this call was admitted and recorded, else 0
--   count     the hits in the window after the call
--   gate      when not admitted: the time (us) of the hit whose leaving
--             frees a place, the hit at index count - max_requests, or the
--             oldest hit when the bucket is under its limit; 0 when the
--             bucket is empty, and 0 for an admitted call (a caller that got
--             in needs no time to come back, and the lookup is saved)
--   now       Redis TIME in microseconds

-- Redis before 5 must be told to replicate a script's writes rather than
-- the script itself, since the script reads TIME; later versions always do.
if redis.replicate_commands then
  redis.replicate_commands()
end

local key = KEYS[1]
local max = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local admit = ARGV[3] == '1'

-- Microseconds since the epoch, about 1.8e15: exact in a Lua double. Every
-- number sent back to Redis is formatted with %d, because tostring would
-- print 1.8e+15.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
local count = redis.call('ZCARD', key)

-- The stamp of the hit at `index` (0 the oldest, -1 the newest). A hit's
-- member is its stamp, so the member is read, not the score: half the
-- reply, and no float for Redis to format.
local function stamp_at(index)
  return tonumber(redis.call('ZRANGE', key, index, index)[1])
end

-- Adds a hit stamped `stamp`, or the next free microsecond after it;
-- returns the stamp it took.
local function add_hit(stamp)
  local member = string.format('%d', stamp)
  while redis.call('ZADD', key, 'NX', member, member) == 0 do
    stamp = stamp + 1
    member = string.format('%d', stamp)
  end
  return stamp
end

-- The key lives until its newest hit, stamped `newest`, leaves the window,
-- then Redis drops it by itself. (A refused call changes no hit, so it
-- keeps this expiry.)
local function expire_with(newest)
  redis.call('PEXPIRE', key, string.format('%d', math.ceil((newest + window - now) / 1000)))
end

-- After a step back of Redis's clock (NTP, an operator, a restored
-- snapshot), the key's newest hit is stamped later than now. Every hit of
-- the key is then moved back by the same amount, so that the newest is
-- now: their order, spacing and count are kept, none holds a place longer
-- than one window from now (not for the step and a window), and the
-- expiry, which Redis keeps as a time of its clock, is set again from the
-- moved hits. Each hit is moved back by no more than the clock stepped, so
-- it stays at or after the time it was really made: the limit holds in
-- real time. Every call looks (one command: the newest hit), before it
-- admits, so that hits stamped before the step and after it never mix,
-- as the memory driver moves a key's hits on the first call after a step.
-- Moving them reads and writes each hit, which only a step back asks for.
-- A hit at most `count` microseconds later than now is no step: calls in
-- one microsecond take the next free ones (add_hit).
local newest = nil
if count > 0 then
  newest = stamp_at(-1)
  if newest > now + count then
    local hits = redis.call('ZRANGE', key, 0, -1)
    redis.call('DEL', key)
    local shift = newest - now
    local top = now
    for _, hit in ipairs(hits) do
      top = math.max(top, add_hit(tonumber(hit) - shift))
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
    expire_with(top)
    count = redis.call('ZCARD', key)
    newest = top
  end
end

-- Records the call as a hit at now, and answers. A hit stamped later than
-- now (one microsecond later, when another call took now) goes with the
-- key's expiry, which the newest hit sets.
local function record()
  expire_with(math.max(add_hit(now), newest or now))
  return string.format('1 %d 0 %d', count + 1, now)
end

if admit and count < max then
  return record()
end

-- Under a limit of 1 the newest hit is also the one whose leaving frees the
-- place, so a refusal there reads no more than the step's check did.
local gate = nil
if count >= max and max == 1 then
  gate = newest
end

if gate == nil then
  gate = 0
  if count > 0 then
    gate = stamp_at(math.max(count - max, 0))
  end
end

return string.format('0 %d %d %d', count, gate, now)
