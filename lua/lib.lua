-- sluice lib: the helpers take.lua, refund.lua, lock.lua and lease.lua
-- share. Package lua puts this text before each of them, so that each
-- script Redis runs is still one self-contained program. How each
-- algorithm's state answers a cost is not here but in its own file
-- (tat.lua, ...); keepOnly and tokens serve lease.lua alone, which does not
-- use those files yet.
--
-- Every quantity is an integer below 2^53, so doubles hold it exactly.
-- Divisions use fmod, which is exact, and numbers reach Redis through
-- string.format('%.0f') (tostring would write 1.8e+15).

local call, tonumber, format, fmod = redis.call, tonumber, string.format, math.fmod
local INF = -1 -- the retry figure of a cost that can never pass

local function str(x) return format('%.0f', x) end

-- floor(a/b) and ceil(a/b) for integers a >= 0, b > 0: a - fmod(a, b) is
-- an exact multiple of b, so the division is exact too.
local function fdiv(a, b) return (a - fmod(a, b)) / b end
local function cdiv(a, b)
  local r = fmod(a, b)
  if r == 0 then return a / b end
  return (a - r) / b + 1
end

-- PX argument for a lifetime of ttl us: ceil(ttl/1000) ms, at least 1.
local function px(ttl)
  if ttl <= 1000 then return '1' end
  return str(cdiv(ttl, 1000))
end

-- pexpire sets the TTL (ms) of key, just written. If Redis refuses (an ACL
-- without PEXPIRE), the script fails, and a key this call created (fresh)
-- goes first: no key is ever left without a TTL, and nothing is charged.
local function pexpire(key, ms, fresh)
  local r = redis.pcall('PEXPIRE', key, ms)
  if type(r) == 'table' and r.err then
    if fresh then redis.pcall('DEL', key) end
    error(r)
  end
end

-- keepOnly removes every field of the hash at key but f, just set: the
-- fields of earlier windows. The key never ceases to exist on the way (as
-- with DEL, then HSET), since a Cluster slot that is migrating refuses a
-- script that recreates a key ("non local key").
local function keepOnly(key, f)
  if call('HLEN', key) > 1 then
    local fs = call('HKEYS', key)
    for i = 1, #fs do
      if fs[i] ~= f then call('HDEL', key, fs[i]) end
    end
  end
end

-- calendar is the window of a calendar limit (store.PerCalendar) that
-- holds now, from b0 < b1 < b2, the boundaries (us) of two consecutive
-- windows that the client computed in the limit's zone (Lua knows no
-- zones): its start, the window's number, and left = end - now. A now
-- outside [b0, b2) (Redis' clock and the client's apart by about half a
-- window or more) counts as the nearest instant inside: b0, or b2 - 1.
local function calendar(now, b0, b1, b2)
  if now < b0 then now = b0 elseif now >= b2 then now = b2 - 1 end
  if now < b1 then return b0, b1 - now end
  return b1, b2 - now
end

-- A state string: up to three integers separated by colons.
local STATE = '^(%d+):?(%d*):?(%d*)$'

-- slidingRetry is how long until a cost of n fits a sliding window of R
-- per P whose current window, e us in, holds c and the previous one p
-- (ALGORITHMS.md, SlidingWindow; n <= R).
local function slidingRetry(R, P, c, p, e, n)
  if R - c - n >= 0 and p > 0 then
    local e1 = P - fdiv((R - c - n) * P, p)
    if e1 < P then return e1 - e end
  end
  local e2 = 0
  if c > 0 then
    e2 = P - fdiv((R - n) * P, c)
    if e2 < 0 then e2 = 0 end
  end
  return (P - e) + e2
end

-- tokens is a token bucket's tokens, scaled by P, at now, from its state
-- "<tok>:<ts>" read as s1, s2, s3 (ALGORITHMS.md, TokenBucket): no state,
-- or one that does not parse, is a full bucket.
local function tokens(R, P, B, s1, s2, s3, now)
  local cap = B * P
  local tok, ts = s1, s2
  if not (tok and ts and not s3) or tok > cap then return cap end
  local need = cap - tok
  if need > 0 then
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    if elapsed >= cdiv(need, R) then tok = cap else tok = tok + R * elapsed end
  end
  return tok
end
