-- sluice log: one SlidingLog limit without a penalty, with the arithmetic
-- of ALGORITHMS.md. State: a sorted set with one member per admitted
-- request, scored by its stamp, as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs),
--          ceil(P / 1000) (the key's lifetime in ms after a charge at now)
-- Reply    c, the live units after the call, when allowed with reset P
--          (0 when c = 0); else {x, reset, retry}: x = c when allowed,
--          -c - 1 when denied (c before the call); reset in µs; retry in µs
--          when denied a cost up to R, else 0.
--
-- Units are numbered consecutively; a request of cost k takes the next k
-- numbers and is one member: its first number in 16 hex digits, followed,
-- when k > 1, by '+' and k in hex ("00000000000000a1+3e8"). Stamps never
-- decrease, so the live units run from the first live member's first
-- number to the last member's last: c = last - first + 1 (two reads, no
-- count), whatever the costs. An admission writes one member (the work
-- and memory of a Take do not grow with its cost) and removes the expired
-- members, at most 1024 (nor does its work grow with the log), once they
-- may be as many as the live units: an admission leaves fewer expired
-- members than live units, unless it removed 1024, so the set holds at
-- most 2R - 1 members (ALGORITHMS.md). The oldest member tells: when it
-- is live, none has expired and it is the first live one; else the units
-- before the first live one bound the expired members. A unit counts when
-- it is stamped after max(now, newest) - P, which is what removing them at
-- every admission would leave.

-- It runs after lean.lua (now, n, k, key).

local R, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = now - P -- stamps after old are live
local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local c, seq, newest, live, s0, first, oldest = 0, -1, nil, nil, nil, nil, nil
if last[1] then
  local m = last[1]
  seq = tonumber(string.sub(m, 1, 16), 16) or -1
  if string.sub(m, 17, 17) == '+' then seq = seq + (tonumber(string.sub(m, 18), 16) or 1) - 1 end
  newest = last[2] + 0 -- coercion reads every form a score may take
  -- An admission at now removes the entries up to now - P, and the newest
  -- stamp is the largest now an admission has seen: after a step back of
  -- the clock, the entries up to newest - P stay removed, as in the memory
  -- store, though they may still be in the set.
  if newest > now then old = newest - P end
  if newest > old then
    live = string.format('%d', old + 1) -- stamps are integers: (old is [old + 1
    local o = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    if o[2] + 0 > old then
      first = o[1]
    else -- some have expired
      oldest = o[1]
      first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', '0', '1')[1]
    end
    s0 = tonumber(string.sub(first, 1, 16), 16)
    if s0 and seq >= s0 then
      c = seq - s0 + 1
    else -- members not written by these scripts: one unit each
      s0, c = nil, redis.call('ZCOUNT', key, live, '+inf')
    end
  end
end
if c + k > R then
  local retry, reset = 0, 0
  if k <= R then -- unit u (0-based) of the live ones must leave first
    local u = c + k - R - 1
    local e
    if not s0 then
      e = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', u, 1)[2]
    else
      local w = 1 -- the units of the first live member
      if string.sub(first, 17, 17) == '+' then w = tonumber(string.sub(first, 18), 16) or 1 end
      if u < w then
        e = redis.call('ZSCORE', key, first)
      else
        -- The member holding unit want = s0 + u: as every member holds at
        -- least one unit, it is one of the last seq - want + 1, so its rank
        -- counted from the end is at least lo (lo may lie before the set's
        -- start when members are weighted). It is the last member that
        -- starts at or before want: probe lo (the one when every member
        -- holds one unit), then search (lo, -1]; an index before the start
        -- reads as a member that starts before want.
        local want = s0 + u
        local lo, hi = -(seq - want + 1), -1
        local got = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
        w = 1
        if got[1] and string.sub(got[1], 17, 17) == '+' then w = tonumber(string.sub(got[1], 18), 16) or 1 end
        if got[1] and tonumber(string.sub(got[1], 1, 16), 16) + w > want then
          e = got[2]
        else
          e = got[2] -- lo's member, if any, starts before want
          while lo < hi do
            local d = hi - lo
            local mid = lo + (d + math.fmod(d, 2)) / 2
            got = redis.call('ZRANGE', key, mid, mid, 'WITHSCORES')
            if not got[1] or (tonumber(string.sub(got[1], 1, 16), 16) or -1) <= want then
              lo, e = mid, got[2]
            else
              hi = mid - 1
            end
          end
        end
      end
    end
    retry = e + P - now
  end
  if c > 0 then reset = newest + P - now end
  return { -c - 1, reset, retry }
end
c = c + k
if k > 0 and (not newest or newest < now) then newest = now end
if n > 0 then
  -- Expired entries go after the ZADD (the new one is stamped after
  -- old, so they keep the lowest ranks), so that the key never ceases to
  -- exist mid-script: a Cluster slot that is migrating refuses a script
  -- that recreates a key. At most 1024 go per call (ALGORITHMS.md).
  local stamp = string.format('%d', newest)
  local ms = newest - now -- PEXPIRE ceil((newest + P - now) / 1000)
  if ms > 0 then
    ms = ms + P + 999
    ms = (ms - math.fmod(ms, 1000)) / 1000
  else
    ms = ARGV[4]
  end
  -- The TTL before the ZADD on a log that exists, after it on a new one
  -- (and before the trim). If Redis refuses it (an ACL without PEXPIRE),
  -- the call fails having changed nothing: no key without a TTL, no
  -- charge.
  local r
  if last[1] then
    r = redis.pcall('PEXPIRE', key, ms)
    if type(r) == 'table' and r.err then return r end
  end
  if k == 1 then
    redis.call('ZADD', key, stamp, string.format('%016x', seq + 1))
  else
    redis.call('ZADD', key, stamp, string.format('%016x+%x', seq + 1, k))
  end
  if not last[1] then
    r = redis.pcall('PEXPIRE', key, ms)
    if type(r) == 'table' and r.err then
      redis.pcall('DEL', key)
      return r
    end
  end
  -- The expired members go when none was live, when they are not known
  -- to be fewer than the live units (c, this admission's included), or
  -- when members not written by these scripts leave that unknown.
  local f = oldest and tonumber(string.sub(oldest, 1, 16), 16)
  if last[1] and (not live or (oldest and not (f and s0 and s0 - f < c))) then
    local x = redis.call('ZCOUNT', key, '-inf', string.format('%d', old))
    if x > 1024 then x = 1024 end
    if x > 0 then redis.call('ZREMRANGEBYRANK', key, 0, x - 1) end
  end
end
if c == 0 or newest == now then return c end
return { c, newest + P - now, 0 }
