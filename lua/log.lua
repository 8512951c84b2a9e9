-- sluice log: SlidingLog, with the arithmetic of ALGORITHMS.md. State: a
-- sorted set with one member per admitted request, scored by its stamp.
-- A cost k fits a log of c live units when c + k <= R.
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
--
-- Above the marks, the one definition of how the state answers a cost:
-- logRead reads it, logStamp finds when a unit leaves, logAdd charges.
-- Package redisstore puts it before take.lua, refund.lua, lease.lua and
-- this file's lean script; between the marks, the general scripts' part
-- (the give-back logGive, and the entry ALG.l, see lib.lua), before
-- take.lua, refund.lua and lease.lua only; every function a script defines
-- is a closure built on each call, so a lean script gets only its
-- algorithm's definitions. They use only their arguments: logSpan, which
-- reads a member, is passed to logStamp (span), as a local function
-- captured by another costs every call of the script an upvalue; logRead
-- and logAdd, which every admission runs, write out what logSpan and
-- logMember (with the give-backs) do, as a call costs too.

-- logSpan reads a member: its first unit's number and how many units it
-- holds; nil for a member these scripts did not write.
local function logSpan(m)
  local f = tonumber(string.sub(m, 1, 16), 16)
  if not f or #m == 16 then return f, 1 end
  if string.sub(m, 17, 17) ~= '+' then return nil end
  local w = tonumber(string.sub(m, 18), 16)
  if not w then return nil end
  return f, w
end

-- logRead reads the log at key at now, for a window of P µs: c, its live
-- units; seq, the number of the last unit (-1: none); newest, the newest
-- stamp (nil: an empty log); old, the stamps up to which count as
-- removed; live, the score bound of the live members ('[old + 1'; nil
-- when none); s0 and first, the first live unit and its member (nil when
-- members not written by these scripts are live); oldest, the oldest
-- member when it has expired; and whether the key exists.
local function logRead(key, now, P)
  local old = now - P -- stamps after old are live
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if not last[1] then return 0, -1, nil, old, nil, nil, nil, nil, false end
  local c, seq, newest, live, s0, first, oldest = 0, -1, nil, nil, nil, nil, nil
  local m = last[1] -- logSpan, written out (a call costs): its last unit
  local f = tonumber(string.sub(m, 1, 16), 16)
  if f and #m > 16 then
    if string.sub(m, 17, 17) == '+' then
      local w = tonumber(string.sub(m, 18), 16)
      if w then f = f + w - 1 else f = nil end
    else
      f = nil
    end
  end
  if f then seq = f end
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
    s0 = tonumber(string.sub(first, 1, 16), 16) -- its first unit
    if s0 and seq >= s0 then
      c = seq - s0 + 1
    else -- members not written by these scripts: one unit each
      s0, first, c = nil, nil, redis.call('ZCOUNT', key, live, '+inf')
    end
  end
  return c, seq, newest, old, live, s0, first, oldest, true
end

-- logStamp is the stamp of live unit u (0-based) of the log logRead read
-- (seq, live, s0, first): when it leaves, the unit after it may come.
local function logStamp(key, u, seq, live, s0, first, span)
  if not s0 then
    return redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', u, 1)[2] + 0
  end
  local _, w = span(first)
  if u < w then return redis.call('ZSCORE', key, first) + 0 end
  -- The member holding unit want = s0 + u: as every member holds at least
  -- one unit, it is one of the last seq - want + 1, so its rank counted
  -- from the end is at least lo (lo may lie before the set's start when
  -- members are weighted). It is the last member that starts at or before
  -- want: probe lo (the one when every member holds one unit), then
  -- search (lo, -1]; an index before the start reads as a member that
  -- starts before want.
  local want = s0 + u
  local lo, hi = -(seq - want + 1), -1
  local got = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
  local e = got[2] -- lo's member, if any, starts before want
  if got[1] then
    local f, gw = span(got[1])
    if f and f + gw > want then return e + 0 end
  end
  while lo < hi do
    local d = hi - lo
    local mid = lo + (d + math.fmod(d, 2)) / 2
    got = redis.call('ZRANGE', key, mid, mid, 'WITHSCORES')
    if not got[1] or (span(got[1]) or -1) <= want then
      lo, e = mid, got[2]
    else
      hi = mid - 1
    end
  end
  return e + 0
end

-- logAdd charges k (> 0) at stamp (the newest after the call, >= now) to
-- the log logRead read (seq, old, live, s0, oldest, exists), which then
-- holds c live units, this charge's included; pms is ceil(P / 1000) as a
-- string (its lifetime in ms after a charge at now: a number would reach
-- Redis through the slow '%.17g'). Expired entries go after the ZADD (the
-- new one is stamped after old, so they keep the lowest ranks), so that
-- the key never ceases to exist mid-script: a Cluster slot that is
-- migrating refuses a script that recreates a key. At most 1024 go per
-- call (ALGORITHMS.md).
local function logAdd(key, now, P, pms, k, stamp, c, seq, old, live, s0, oldest, exists)
  local ms = stamp - now -- PEXPIRE ceil((stamp + P - now) / 1000)
  if ms > 0 then
    ms = ms + P + 999
    ms = string.format('%d', (ms - math.fmod(ms, 1000)) / 1000)
  else
    ms = pms
  end
  -- The TTL before the ZADD on a log that exists, after it on a new one
  -- (and before the trim). If Redis refuses it (an ACL without PEXPIRE),
  -- the call fails having changed nothing: no key without a TTL, no
  -- charge.
  local r
  if exists then
    r = redis.pcall('PEXPIRE', key, ms)
    if type(r) == 'table' and r.err then error(r) end
  end
  -- the member of units seq + 1 .. seq + k: logMember, written out (a
  -- call costs)
  if k == 1 then
    redis.call('ZADD', key, string.format('%d', stamp), string.format('%016x', seq + 1))
  else
    redis.call('ZADD', key, string.format('%d', stamp), string.format('%016x+%x', seq + 1, k))
  end
  if not exists then
    r = redis.pcall('PEXPIRE', key, ms)
    if type(r) == 'table' and r.err then
      redis.pcall('DEL', key)
      error(r)
    end
    return
  end
  -- The expired members go when none was live, when they are not known
  -- to be fewer than the live units, or when members not written by these
  -- scripts leave that unknown.
  local f = oldest and tonumber(string.sub(oldest, 1, 16), 16)
  if not live or (oldest and not (f and s0 and s0 - f < c)) then
    local x = redis.call('ZCOUNT', key, '-inf', string.format('%d', old))
    if x > 1024 then x = 1024 end
    if x > 0 then redis.call('ZREMRANGEBYRANK', key, 0, x - 1) end
  end
end

-- (the general scripts' part starts here)
-- logMember is the member of w units from unit first.
local function logMember(first, w)
  if w == 1 then return string.format('%016x', first) end
  return string.format('%016x+%x', first, w)
end

-- logGive gives k units back to the log at key at now (window P µs) for a
-- charge at stamp: up to k of the units stamped s, the oldest live stamp
-- at or after the charge's (the charge's own), go, taken from the last
-- members of that stamp; the members from there on are renamed so that
-- unit numbers stay consecutive. 1 when the log changed, else 0. The work
-- grows with the members admitted after the charge.
local function logGive(key, now, P, stamp, k)
  if stamp <= now - P then return 0 end -- its entries have expired
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if not last[1] then return 0 end
  local lo = last[2] + 0
  if lo < now then lo = now end
  lo = lo - P + 1 -- the oldest live stamp
  if lo < stamp then lo = stamp end
  local es = redis.call('ZRANGEBYSCORE', key, string.format('%d', lo), '+inf', 'WITHSCORES')
  if #es == 0 then return 0 end
  local ms, s = {}, es[2] + 0
  for i = 1, #es, 2 do
    local f, w = logSpan(es[i])
    ms[#ms + 1] = { m = es[i], first = f, w = w or 1, score = es[i + 1] }
  end
  if not ms[1].first then return 0 end -- members not written by these scripts
  local j = 0 -- the members stamped s
  while j < #ms and ms[j + 1].score + 0 == s do j = j + 1 end
  for i = j, 1, -1 do
    local d = ms[i].w
    if d > k then d = k end
    ms[i].w, k = ms[i].w - d, k - d
  end
  -- Each new name is added before the old one goes: the set never empties
  -- on the way, so it keeps its TTL, and a Cluster slot that is migrating
  -- never sees the script recreate the key ("non local key"). A new name
  -- starts below every member not renamed yet, so it meets none of them.
  local nextUnit = ms[1].first
  for i = 1, #ms do
    local e = ms[i]
    local name = logMember(nextUnit, e.w)
    if e.w > 0 then
      if name ~= e.m then redis.call('ZADD', key, e.score, name) end
      nextUnit = nextUnit + e.w
    end
    if e.w == 0 or name ~= e.m then redis.call('ZREM', key, e.m) end
  end
  return 1
end

-- take replies as the lean script does, unpacked: x (c after the call
-- when allowed, else -c - 1), reset, and the retry of a denied cost up to
-- R.
ALG.l = {
  read = function(l, now)
    l.c, l.seq, l.newest, l.old, l.live, l.s0, l.first, l.oldest, l.exists = logRead(l.key, now, l.P)
  end,
  take = function(l, now, k, key)
    local R, P, c, newest = l.R, l.P, l.c, l.newest
    if c + k > R then
      local retry, reset = 0, 0
      if k <= R then -- unit c + k - R - 1 (0-based) of the live ones must leave first
        retry = logStamp(l.key, c + k - R - 1, l.seq, l.live, l.s0, l.first, logSpan) + P - now
      end
      if c > 0 then reset = newest + P - now end
      return -c - 1, reset, retry
    end
    c = c + k
    if k > 0 and (not newest or newest < now) then newest = now end
    if key then logAdd(key, now, P, px(P), k, newest, c, l.seq, l.old, l.live, l.s0, l.oldest, l.exists) end
    if c == 0 then return 0, 0, 0 end
    return c, newest + P - now, 0
  end,
  give = function(l, now, stamp, k) return logGive(l.key, now, l.P, stamp, k) end,
}

-- (the lean script starts here)
-- sluice log, lean: one SlidingLog limit without a penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs),
--          ceil(P / 1000) (the key's lifetime in ms after a charge at now)
-- Reply    c, the live units after the call, when allowed with reset P
--          (0 when c = 0); else {x, reset, retry}: x = c when allowed,
--          -c - 1 when denied (c before the call); reset in µs; retry in µs
--          when denied a cost up to R, else 0.

-- It is the body of lean.lua's lean(key, ARGV, o, pre, n) (now, num, n, k,
-- key; the call's arguments are ARGV[o + 1], ...).

local R, P = num(ARGV[o + 2]), num(ARGV[o + 3])
local c, seq, newest, old, live, s0, first, oldest, exists = logRead(key, now, P)
if c + k > R then
  local retry, reset = 0, 0
  if k <= R then -- unit c + k - R - 1 (0-based) of the live ones must leave first
    retry = logStamp(key, c + k - R - 1, seq, live, s0, first, logSpan) + P - now
  end
  if c > 0 then reset = newest + P - now end
  return { -c - 1, reset, retry }
end
c = c + k
if k > 0 and (not newest or newest < now) then newest = now end
if n > 0 then logAdd(key, now, P, ARGV[o + 4], k, newest, c, seq, old, live, s0, oldest, exists) end
if c == 0 or newest == now then return c end
return { c, newest + P - now, 0 }
