-- sluice sliding: SlidingWindow, with the arithmetic of ALGORITHMS.md.
-- State: "<w>:<cur>:<prev>", window w's count and the one before's, a
-- string key.
--
-- Above the marks, the one definition of how a state answers a cost:
-- slidingTake decides, and charges when given the key. Package redisstore
-- puts it before take.lua, refund.lua, lease.lua and this file's lean
-- script; between the marks, the general scripts' part (the give-back
-- slidingGive, and the entry ALG.w, see lib.lua), before take.lua,
-- refund.lua and lease.lua only. Every function a script defines is a
-- closure built on each call, and each call of it costs too: a lean script
-- gets only its algorithm's definitions, and calls one.

-- slidingTake: the state x, y, z (numbers, or nil: none) answering a cost
-- k at now, for R per P µs. Replies the current window's count c after
-- the call when k fits, else -c - 1 with c before it; the previous
-- window's count p; e = now - win·P. A cost beyond R is denied by the
-- same test. Given key, a cost that fits is charged: the state becomes
-- "<win>:<c>:<p>" until the end of the window after win.
local function slidingTake(x, y, z, now, k, R, P, key)
  local e = math.fmod(now, P)
  local win = (now - e) / P
  local c, p = 0, 0
  if x and y and z then
    if x == win then c, p = y, z elseif x == win - 1 then p = y end
  end
  if p * (P - e) + (c + k) * P > R * P then return -c - 1, p, e end
  c = c + k
  if key then
    local ms = 2 * P - e + 999 -- PX ceil((2P - e) / 1000)
    redis.call('SET', key, string.format('%d:%d:%d', win, c, p), 'PX', (ms - math.fmod(ms, 1000)) / 1000)
  end
  return c, p, e
end

-- (the general scripts' part starts here)
-- slidingGive gives k units back to the state x, c, p (window x's count
-- and the one before's), for a charge in window wc, keeping its TTL: off
-- c when x is wc, off p when x is the window after; 1 when the state
-- changed, else 0.
local function slidingGive(key, x, c, p, wc, k)
  if x == wc then
    c = c - k
    if c < 0 then c = 0 end
  elseif x == wc + 1 then
    p = p - k
    if p < 0 then p = 0 end
  else
    return 0
  end
  redis.call('SET', key, string.format('%d:%d:%d', x, c, p), 'KEEPTTL')
  return 1
end

-- The state s1, s2, s3 is window s1's count and the one before's.
ALG.w = {
  str = true,
  lease = true,
  take = function(l, now, k, key)
    return slidingTake(l.s1, l.s2, l.s3, now, k, l.R, l.P, key)
  end,
  -- only a charge in the current or the previous window gets something back
  give = function(l, now, stamp, k)
    local win, wc = fdiv(now, l.P), fdiv(stamp, l.P)
    if wc ~= win and wc ~= win - 1 then return 0 end
    if not (l.s1 and l.s2 and l.s3) then return 0 end
    return slidingGive(l.key, l.s1, l.s2, l.s3, wc, k)
  end,
}

-- (the lean script starts here)
-- sluice sliding, lean: one SlidingWindow limit without a penalty, its
-- state read with MGET as take.lua reads it.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    slidingTake's {c, p, e}: c the current window's count after the
--          call when allowed (charged when n > 0), else -c - 1; p the
--          previous window's count; e = now - w·P in µs.

-- It is the body of lean.lua's lean(key, ARGV, o, pre, n) (now, num, n, k,
-- key; the call's arguments are ARGV[o + 1], ...).

local R, P = num(ARGV[o + 2]), num(ARGV[o + 3])
local x, y, z
local v = pre or redis.call('MGET', key)[1]
if v then
  x, y, z = string.match(v, '^(%d+):(%d+):(%d+)$')
  x, y, z = tonumber(x), tonumber(y), tonumber(z)
end
return { slidingTake(x, y, z, now, k, R, P, n > 0 and key) }
