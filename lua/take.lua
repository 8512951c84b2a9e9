-- sluice take: charge n units against any number of limits of one key,
-- atomically, with the arithmetic of ALGORITHMS.md. Runs on Redis >= 7.0
-- (Lua 5.1) and on miniredis (gopher-lua). A Take of one limit without a
-- penalty is served by its family's lean script instead (tat.lua, ...),
-- which reads and writes the same states.
--
-- KEYS, per limit i = 1..m:
--   KEYS[2i-1]  state key            (string; a hash for fixed_window, a
--                                     sorted set for sliding_log and
--                                     in_flight)
--   KEYS[2i]    penalty lock key     (state key .. ":x"; read only when L > 0)
-- ARGV:
--   ARGV[1]     n, the cost (0 peeks; the caller clamps it to 2^53); -n
--               decides a cost of n exactly as n would, writing nothing
--               (a dry run: no state, no penalty lock); lua.Resent (not a
--               number): refused with an error, nothing read or written
--   ARGV[6i-4]  algorithm: g gcra, k leaky_bucket, t token_bucket,
--               f fixed_window, w sliding_window, l sliding_log,
--               i in_flight
--   ARGV[6i-3]  R, rate per period
--   ARGV[6i-2]  P, period in microseconds
--   ARGV[6i-1]  B, burst after defaults (0 for the window algorithms)
--   ARGV[6i]    T, interval ceil(P/R) in microseconds (gcra, leaky_bucket)
--               A calendar window (a fixed_window, f, with B > 0) sends in
--               P, B and T the boundaries b0 < b1 < b2 (us) of two
--               consecutive windows instead (see calendar in lib.lua)
--   ARGV[6i+1]  L, penalty in microseconds (0: none)
-- Reply, per limit i, six integers from index 6i-5:
--   allowed (0/1), limit, remaining, retry us (-1: never), reset us, delay us
-- and, when some limit is in_flight, one more integer: the id of the slot
-- the call took (0: none).
--
-- It runs after lib.lua (str, fdiv, cdiv, px, pexpire, calendar, STATE,
-- slidingRetry) and each algorithm's definitions (tat.lua: tatTake;
-- token.lua: tokenTake; fixed.lua: fixedAdd; sliding.lua: slidingTake;
-- log.lua: logSpan, logRead, logStamp, logAdd), which the lean
-- scripts share.

-- One more argument, 's', asks for Redis' clock at the call (µs) as one
-- more integer after the reply (a charge that may be refunded).
local stamped = #ARGV == 2 + 3 * #KEYS and ARGV[#ARGV] == 's'
if #KEYS % 2 ~= 0 or (#ARGV ~= 1 + 3 * #KEYS and not stamped) then
  return redis.error_reply('ERR sluice: want 2 keys and 6 arguments per limit')
end

local n = tonumber(ARGV[1])
if not n then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local write = n > 0
if n < 0 then n = -n end

-- A number read back from Redis. Arithmetic coercion accepts every form a
-- score may take ("1.7e+15" on some servers), where gopher-lua's tonumber
-- does not.
local function num(s) return s + 0 end

local m = #KEYS / 2

-- trim removes an in_flight set's members scored up to cut, at most 1024
-- (as logAdd does a log's).
local function trim(key, cut)
  local x = call('ZCOUNT', key, '-inf', str(cut))
  if x > 1024 then x = 1024 end
  if x > 0 then call('ZREMRANGEBYRANK', key, 0, x - 1) end
end

-- Parse the limits; read every string key (states and locks) in one MGET.
local lims, reads = {}, {}
for i = 1, m do
  local j = 6 * i - 4
  local l = {
    a = ARGV[j], R = tonumber(ARGV[j + 1]), P = tonumber(ARGV[j + 2]),
    B = tonumber(ARGV[j + 3]), T = tonumber(ARGV[j + 4]), L = tonumber(ARGV[j + 5]),
    key = KEYS[2 * i - 1], lock = KEYS[2 * i],
  }
  if l.a ~= 'l' and l.a ~= 'f' and l.a ~= 'i' then
    reads[#reads + 1] = l.key
    l.si = #reads
  end
  if l.L > 0 then
    reads[#reads + 1] = l.lock
    l.li = #reads
  end
  lims[i] = l
end
local vals = {}
for first = 1, #reads, 1000 do -- Lua 5.1's unpack stops near 8000 values
  local last = first + 999
  if last > #reads then last = #reads end
  local got = call('MGET', unpack(reads, first, last))
  for k = 1, #got do vals[first + k - 1] = got[k] end
end

-- Decode each state. A value that does not parse counts as absent.
local inflights = false
for i = 1, m do
  local l = lims[i]
  if l.li and vals[l.li] then l.lockUntil = tonumber(vals[l.li]) end
  if l.a == 'l' then
    l.c, l.seq, l.newest, l.old, l.live, l.s0, l.first, l.oldest, l.exists = logRead(l.key, now, l.P)
  elseif l.a == 'i' then
    -- a sorted set of slot ids scored by the instant (us) each expires;
    -- live: later than now
    l.c = call('ZCOUNT', l.key, '(' .. str(now), '+inf')
    if l.c > 0 then
      l.earliest = num(call('ZRANGEBYSCORE', l.key, '(' .. str(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
      l.latest = num(call('ZRANGE', l.key, -1, -1, 'WITHSCORES')[2])
    end
    inflights = true
  elseif l.a == 'f' then
    -- a hash from the window's index to its count (see fixed.lua); a
    -- calendar window's index is its start
    if l.B > 0 then
      l.win, l.left = calendar(now, l.P, l.B, l.T)
    else
      l.win = fdiv(now, l.P)
      l.left = (l.win + 1) * l.P - now
    end
    l.c = tonumber(call('HGET', l.key, str(l.win))) or 0
  else
    local v = vals[l.si]
    if v then
      local a, b, c = string.match(v, STATE)
      l.s1, l.s2, l.s3 = tonumber(a), tonumber(b), tonumber(c)
    end
  end
end

-- Each evaluation returns allowed, limit, remaining, retry, reset, delay
-- and what to write when the call is charged (nil: nothing).

local function tat(l, cost, leaky)
  local lim, T = l.B, l.T
  if leaky then lim = l.B + 1 end
  local tol = lim * T
  local used = tatTake(not l.s2 and l.s1, now, cost, lim, T)
  local ok, retry, delay, w = 0, 0, 0, nil
  if used >= 0 then
    ok, w = 1, lim
    if leaky and cost > 0 then delay = used - T end
  else
    used = -used - 1
    if cost > lim then retry = INF else retry = used + cost * T - tol end
  end
  local rem = 0
  if tol - used > 0 then rem = fdiv(tol - used, T) end
  return ok, lim, rem, retry, used, delay, w
end

local function token(l, cost)
  local R, P, B = l.R, l.P, l.B
  if l.s2 and not l.s3 then l.tok, l.ts = l.s1, l.s2 end
  local tok = tokenTake(l.tok, l.ts, now, cost, R, P, B)
  local ok, retry, w = 0, 0, nil
  if tok >= 0 then
    ok, w = 1, true
  else
    tok = -tok - 1
    if cost > B then retry = INF else retry = cdiv(cost * P - tok, R) end
  end
  return ok, B, fdiv(tok, P), retry, cdiv(B * P - tok, R), 0, w
end

local function fixed(l, cost)
  local R, left = l.R, l.left
  local c = l.c
  local ok, retry, w = 0, 0, nil
  if cost > R then
    retry = INF
  elseif c + cost <= R then
    ok, c, w = 1, c + cost, true
  else
    retry = left
  end
  local reset = 0
  if c > 0 then reset = left end
  return ok, R, R - c, retry, reset, 0, w
end

local function sliding(l, cost)
  local R, P = l.R, l.P
  local c, p, e = slidingTake(l.s1, l.s2, l.s3, now, cost, R, P)
  local ok, retry, w = 0, 0, nil
  if c >= 0 then
    ok, w = 1, true
  else
    c = -c - 1
    if cost > R then retry = INF else retry = slidingRetry(R, P, c, p, e, cost) end
  end
  local pw = p * (P - e)
  local rem = R * P - pw - c * P
  if rem > 0 then rem = fdiv(rem, P) else rem = 0 end
  local reset = 0
  if c > 0 then reset = 2 * P - e elseif p > 0 then reset = P - e end
  return ok, R, rem, retry, reset, 0, w
end

local function log(l, cost)
  local R, P = l.R, l.P
  local c, newest = l.c, l.newest
  local ok, retry, w = 0, 0, nil
  if cost > R then
    retry = INF
  elseif c + cost <= R then
    ok, c = 1, c + cost
    if cost > 0 then
      if not newest or newest < now then newest = now end
      w = newest
    end
  else
    -- unit c+cost-R-1 (0-based) of the live ones must leave first
    retry = logStamp(l.key, c + cost - R - 1, l.seq, l.live, l.s0, l.first, logSpan) + P - now
  end
  local reset = 0
  if c > 0 then reset = newest + P - now end
  return ok, R, R - c, retry, reset, 0, w
end

-- inflight: any cost of 1 or more takes one slot while fewer than R are
-- live; a refusal's retry is the earliest expiry, at most 1 s.
local function inflight(l, cost)
  local R, c, latest = l.R, l.c, l.latest
  local ok, retry, w = 0, 0, nil
  if cost == 0 then
    ok = 1
  elseif c < R then
    ok, c, latest, w = 1, c + 1, now + l.P, true
  else
    retry = l.earliest - now
    if retry > 1000000 then retry = 1000000 end
  end
  local reset = 0
  if c > 0 then reset = latest - now end
  return ok, R, R - c, retry, reset, 0, w
end

local function eval(l, cost)
  local a = l.a
  if a == 'g' then return tat(l, cost, false) end
  if a == 'k' then return tat(l, cost, true) end
  if a == 't' then return token(l, cost) end
  if a == 'f' then return fixed(l, cost) end
  if a == 'w' then return sliding(l, cost) end
  if a == 'l' then return log(l, cost) end
  if a == 'i' then return inflight(l, cost) end
  error('sluice: unknown algorithm ' .. tostring(a))
end

-- Evaluate every limit against the state before the call.
local out, all = {}, true
for i = 1, m do
  local l = lims[i]
  local k = 6 * i - 5
  if l.lockUntil and now < l.lockUntil then
    -- locked: denied, nothing charged, the lock is not extended
    local _, lim, _, _, reset = eval(l, 0)
    local left = l.lockUntil - now
    if reset < left then reset = left end
    out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = 0, lim, 0, left, reset, 0
    l.locked = true
    all = false
  else
    local ok, lim, rem, retry, reset, delay, w = eval(l, n)
    if ok == 0 then
      all = false
      if l.L > 0 then
        if retry ~= INF and retry < l.L then retry = l.L end
        if reset < l.L then reset = l.L end
      end
    end
    out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = ok, lim, rem, retry, reset, delay
    l.w = w
  end
end

-- the slot an allowed, charged call takes: the first id from now on that
-- no in_flight limit of the call holds, one id for all of them
local slot = 0
if inflights and n > 0 and all and write then
  slot = now
  local again = true
  while again do
    again = false
    for i = 1, m do
      local l = lims[i]
      if l.a == 'i' and call('ZSCORE', l.key, str(slot)) then
        slot, again = slot + 1, true
      end
    end
  end
end

if n > 0 then
  if all then
    local seen = {} -- a limit given twice is one state, charged once
    for i = 1, m do
      if not write then break end -- a dry run
      local l = lims[i]
      local w = l.w
      if seen[l.key] then -- charged already
      elseif l.a == 'l' then
        logAdd(l.key, now, l.P, px(l.P), n, w, l.c + n, l.seq, l.old, l.live, l.s0, l.oldest, l.exists)
      elseif l.a == 'i' then
        -- A refused PEXPIRE (see pexpire) changes nothing of a set with
        -- live slots, and deletes a set that had none (its expired slots
        -- are nothing to keep).
        if l.c > 0 then pexpire(l.key, px(l.P), false) end
        call('ZADD', l.key, str(now + l.P), str(slot))
        trim(l.key, now) -- after the ZADD (see fixedAdd); at most 1024
        if l.c == 0 then pexpire(l.key, px(l.P), true) end
      elseif l.a == 'f' then
        fixedAdd(l.key, str(l.win), l.c, n, l.left)
      elseif l.a == 't' then -- each decides again, charging
        tokenTake(l.tok, l.ts, now, n, l.R, l.P, l.B, l.key)
      elseif l.a == 'w' then
        slidingTake(l.s1, l.s2, l.s3, now, n, l.R, l.P, l.key)
      else
        tatTake(not l.s2 and l.s1, now, n, w, l.T, l.key)
      end
      seen[l.key] = true
    end
  else
    for i = 1, m do
      local l = lims[i]
      local k = 6 * i - 5
      if out[k] == 1 then
        -- allowed but not charged: report what a peek sees
        out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = eval(l, 0)
      elseif write and l.L > 0 and not l.locked then
        call('SET', l.lock, str(now + l.L), 'PX', px(l.L))
      end
    end
  end
end

if inflights then out[#out + 1] = slot end
if stamped then out[#out + 1] = now end
return out
