-- sluice log: one SlidingLog limit without a penalty, with the arithmetic
-- of ALGORITHMS.md. State: a sorted set of stamps, members the sequence
-- numbers in 16 hex digits, as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs),
--          ceil(P / 1000) (the key's lifetime in ms after a charge at now)
-- Reply    c, the live entries after the call, when allowed with reset P
--          (0 when c = 0); else {x, reset, retry}: x = c when allowed,
--          -c - 1 when denied (c before the call); reset in µs; retry in µs
--          when denied a cost up to R, else 0.
--
-- Sequence numbers are consecutive and stamps never decrease, so the live
-- entries run from the first live one to the last: c = last - first + 1
-- (two reads, no count). Expired entries are removed when an admission's
-- sequence numbers cross a multiple of 64, or when none is live, so the
-- set holds at most R + 63 entries; an entry counts when it is stamped
-- after max(now, newest) - P, which is what removing them at every
-- admission would leave (ALGORITHMS.md).

-- It runs after lean.lua (now, n, k, key).

local R, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = now - P -- stamps after old are live
local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local c, seq, newest, live = 0, -1, nil, nil
if last[1] then
  seq = tonumber(last[1], 16) or -1
  newest = last[2] + 0 -- coercion reads every form a score may take
  -- An admission at now removes the entries up to now - P, and the newest
  -- stamp is the largest now an admission has seen: after a step back of
  -- the clock, the entries up to newest - P stay removed, as in the memory
  -- store, though they may still be in the set.
  if newest > now then old = newest - P end
  if newest > old then
    live = string.format('%d', old + 1) -- stamps are integers: (old is [old + 1
    local first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', '0', '1')
    local s0 = tonumber(first[1], 16)
    if s0 and seq >= s0 then
      c = seq - s0 + 1
    else -- members not written by these scripts
      c = redis.call('ZCOUNT', key, live, '+inf')
    end
  end
end
if c + k > R then
  local retry, reset = 0, 0
  if k <= R then -- the (c+k-R)-th oldest live entry must leave first
    local e = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', c + k - R - 1, 1)
    retry = e[2] + P - now
  end
  if c > 0 then reset = newest + P - now end
  return { -c - 1, reset, retry }
end
c = c + k
if k > 0 and (not newest or newest < now) then newest = now end
if n > 0 then
  -- Expired entries go after the ZADD (the new ones are stamped after
  -- old), so that the key never ceases to exist mid-script: a Cluster
  -- slot that is migrating refuses a script that recreates a key.
  local trim = seq >= 0 and (c == k or math.fmod(seq, 64) + k >= 64)
  local stamp = string.format('%d', newest)
  if k == 1 then
    redis.call('ZADD', key, stamp, string.format('%016x', seq + 1))
  else
    while k > 0 do -- at most 500 members per ZADD (unpack's limit)
      local args, b = {}, 0
      while b < 1000 and k > 0 do
        seq, k = seq + 1, k - 1
        args[b + 1], args[b + 2], b = stamp, string.format('%016x', seq), b + 2
      end
      redis.call('ZADD', key, unpack(args))
    end
  end
  if trim then redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', old)) end
  local ms = newest - now -- PEXPIRE ceil((newest + P - now) / 1000)
  if ms > 0 then
    ms = ms + P + 999
    ms = (ms - math.fmod(ms, 1000)) / 1000
  else
    ms = ARGV[4]
  end
  redis.call('PEXPIRE', key, ms)
end
if c == 0 or newest == now then return c end
return { c, newest + P - now, 0 }
