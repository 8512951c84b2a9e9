-- sluice refund: give back n units that a charge made at stamp took from
-- each limit of one key (store.Refunder.Refund), with the give-back of
-- ALGORITHMS.md ("Giving back a charge"), at one now. Runs on Redis >= 7.0
-- and on miniredis. It reads and writes the states take.lua and the lean
-- scripts keep, every key keeping a TTL; penalty locks are never read nor
-- written.
--
-- KEYS[i]      limit i's state key (the same key take.lua uses)
-- ARGV[1]      n, the units to give back (> 0); lua.Resent: refused with
--              an error, nothing read or written (a call sent again)
-- ARGV[2]      stamp, Redis' clock in µs when the charge was decided (the
--              last integer of take.lua's reply when asked for it)
-- ARGV[6i-3 .. 6i+2]  limit i as in take.lua: code, R, P, B, T, L
-- Reply        the number of limits that got something back
--
-- It runs after lib.lua (str, fdiv, cdiv, px, calendar, STATE,
-- slidingRetry, tokens).

if #ARGV ~= 2 + 6 * #KEYS then
  return redis.error_reply('ERR sluice refund: want 6 arguments per key after n and stamp')
end

local n, stamp = tonumber(ARGV[1]), tonumber(ARGV[2])
if not n then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function num(s) return s + 0 end

local function parse(key)
  local v = call('GET', key)
  if not v then return nil end
  local x, y, z = string.match(v, STATE)
  return tonumber(x), tonumber(y), tonumber(z)
end

-- gcra, leaky_bucket: the TAT moves back by n·T, never before now.
local function tat(key, lim, T)
  local s1, s2 = parse(key)
  if not s1 or s2 or s1 <= now then return 0 end
  if n < lim then lim = n end
  local v = s1 - lim * T
  if v > now then call('SET', key, str(v), 'PX', px(v - now)) else call('DEL', key) end
  return 1
end

-- token_bucket: n tokens back after the refill to now, up to the burst.
local function token(key, R, P, B)
  local s1, s2, s3 = parse(key)
  if not s1 then return 0 end
  local cap = B * P
  local k = n
  if k > B then k = B end
  local tok = tokens(R, P, B, s1, s2, s3, now) + k * P
  if tok >= cap then
    call('DEL', key)
  else
    call('SET', key, str(tok) .. ':' .. str(now), 'PX', px(cdiv(cap - tok, R)))
  end
  return 1
end

-- fixed_window: n off the count of the charge's window, if it is current.
-- A calendar window (B > 0) sends the boundaries b0, b1, b2 in P, B, T
-- (take.lua); a stamp outside them is of another window.
local function fixed(key, P, B, T)
  local win, wc
  if B > 0 then
    win = calendar(now, P, B, T)
    if stamp >= P and stamp < T then wc = calendar(stamp, P, B, T) end
  else
    win, wc = fdiv(now, P), fdiv(stamp, P)
  end
  if wc ~= win then return 0 end
  local c = tonumber(call('HGET', key, str(win)))
  if not c or c <= 0 then return 0 end
  c = c - n
  if c < 0 then c = 0 end
  call('HSET', key, str(win), str(c))
  return 1
end

-- sliding_window: n off the count of the charge's window, if it is the
-- current or the previous one.
local function sliding(key, P)
  local win, wc = fdiv(now, P), fdiv(stamp, P)
  if wc ~= win and wc ~= win - 1 then return 0 end
  local x, c, p = parse(key)
  if not (x and c and p) then return 0 end
  if x == wc then
    c = c - n
    if c < 0 then c = 0 end
  elseif x == wc + 1 then
    p = p - n
    if p < 0 then p = 0 end
  else
    return 0
  end
  call('SET', key, str(x) .. ':' .. str(c) .. ':' .. str(p), 'KEEPTTL')
  return 1
end

-- sliding_log: up to n of the units stamped s, the oldest live stamp at
-- or after the charge's (the charge's own), go, taken from the last
-- members of that stamp; the members from there on are renamed so that
-- unit numbers stay consecutive. A member is its first unit's number in 16
-- hex digits, followed, when it holds w > 1 units, by '+' and w in hex
-- (log.lua). The work grows with the members admitted after the charge.
local function member(first, w)
  if w == 1 then return string.format('%016x', first) end
  return string.format('%016x+%x', first, w)
end

local function log(key, P)
  if stamp <= now - P then return 0 end -- its entries have expired
  local last = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if not last[1] then return 0 end
  local lo = num(last[2])
  if lo < now then lo = now end
  lo = lo - P + 1 -- the oldest live stamp
  if lo < stamp then lo = stamp end
  local es = call('ZRANGEBYSCORE', key, str(lo), '+inf', 'WITHSCORES')
  if #es == 0 then return 0 end
  local ms, s = {}, num(es[2])
  for i = 1, #es, 2 do
    local m = es[i]
    local w = 1
    if string.sub(m, 17, 17) == '+' then w = tonumber(string.sub(m, 18), 16) or 1 end
    ms[#ms + 1] = { m = m, first = tonumber(string.sub(m, 1, 16), 16), w = w, score = num(es[i + 1]) }
  end
  if not ms[1].first then return 0 end -- members not written by these scripts
  local j = 0 -- the members stamped s
  while j < #ms and ms[j + 1].score == s do j = j + 1 end
  local k = n
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
    local name = member(nextUnit, e.w)
    if e.w > 0 then
      if name ~= e.m then call('ZADD', key, str(e.score), name) end
      nextUnit = nextUnit + e.w
    end
    if e.w == 0 or name ~= e.m then call('ZREM', key, e.m) end
  end
  return 1
end

local done, seen = 0, {}
for i = 1, #KEYS do
  local key, j = KEYS[i], 6 * i - 3
  if not seen[key] then -- an identical limit given twice is one state
    seen[key] = true
    local a = ARGV[j]
    local R, P, B, T = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
    if a == 'g' then done = done + tat(key, B, T)
    elseif a == 'k' then done = done + tat(key, B + 1, T)
    elseif a == 't' then done = done + token(key, R, P, B)
    elseif a == 'f' then done = done + fixed(key, P, B, T)
    elseif a == 'w' then done = done + sliding(key, P)
    elseif a == 'l' then done = done + log(key, P)
    elseif a == 'i' then -- in_flight: its slot is given back by Release, not here
    else return redis.error_reply('ERR sluice refund: unknown algorithm ' .. tostring(a)) end
  end
end
return done
