-- sluice log: one SlidingLog limit without a penalty, with the arithmetic
-- of ALGORITHMS.md. State: a sorted set of stamps, members the sequence
-- numbers in 16 hex digits, as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    {c, reset, retry}: c the live entries after the call when
--          allowed (charged when n > 0), else -c - 1; reset in µs;
--          retry in µs when denied a cost up to R, else 0.

-- It runs after lean.lua (now, n, k, key).

local R, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local live = string.format('(%d', now - P) -- stamps after now - P count
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local c, seq, newest = 0, -1, nil
if last[1] then
  seq = tonumber(last[1], 16) or -1
  newest = last[2] + 0 -- coercion reads every form a score may take
  if newest > now - P then c = redis.call('ZCOUNT', key, live, '+inf') end
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
  if last[1] then redis.call('ZREMRANGEBYSCORE', key, '-inf', now - P) end
  while k > 0 do -- at most 500 members per ZADD (unpack's limit)
    local args, b = {}, 0
    while b < 1000 and k > 0 do
      seq, k = seq + 1, k - 1
      args[b + 1], args[b + 2], b = newest, string.format('%016x', seq), b + 2
    end
    redis.call('ZADD', key, unpack(args))
  end
  local ms = newest + P - now + 999 -- PEXPIRE ceil((newest + P - now) / 1000)
  redis.call('PEXPIRE', key, (ms - math.fmod(ms, 1000)) / 1000)
end
local reset = 0
if c > 0 then reset = newest + P - now end
return { c, reset, 0 }
