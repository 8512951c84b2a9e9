-- sluice fixed: FixedWindow, with the arithmetic of ALGORITHMS.md. State:
-- a hash from the window's index (a calendar window's: its start in µs)
-- to its count, expiring after the window's end; a field of an earlier
-- window counts for nothing and goes at the next window's first charge.
-- A cost k fits a window holding c when c + k <= R.
--
-- Above the marks, the one definition of how the state takes a charge:
-- fixedAdd charges. Package redisstore puts it before take.lua, refund.lua,
-- lease.lua and this file's lean script; between the marks, the general
-- scripts' part (the give-back fixedGive, and the entry ALG.f, see
-- lib.lua), before take.lua, refund.lua and lease.lua only; every function
-- a script defines is a closure built on each call, so a lean script gets
-- only its algorithm's definitions. fixedAdd and fixedGive use only their
-- arguments.

-- fixedAdd adds k (> 0) to the count of window win (a number, or its
-- field: take.lua writes a calendar window's start with str), c before the call,
-- which ends left µs (>= 1) from now. The window's first charge (c = 0)
-- sets the TTL at once: if Redis refuses it (an ACL without PEXPIRE), the
-- key goes (fields of earlier windows are dead) and the call fails, no
-- key left without a TTL, nothing charged. Fields of earlier windows go
-- after the HSET, never by DEL first: a Cluster slot that is migrating
-- refuses a script that recreates a key ("non local key").
local function fixedAdd(key, win, c, k, left)
  if c > 0 then
    redis.call('HINCRBY', key, win, k)
    return
  end
  redis.call('HSET', key, win, k)
  local ms = left + 999 -- PEXPIRE ceil(left / 1000)
  local r = redis.pcall('PEXPIRE', key, (ms - math.fmod(ms, 1000)) / 1000)
  if type(r) == 'table' and r.err then
    redis.pcall('DEL', key)
    error(r)
  end
  if redis.call('HLEN', key) > 1 then
    local old, w = redis.call('HKEYS', key), tonumber(win)
    for i = 1, #old do
      if tonumber(old[i]) ~= w then redis.call('HDEL', key, old[i]) end
    end
  end
end

-- (the general scripts' part starts here)
-- fixedGive gives k units back to the count of window win, the current
-- one, keeping its TTL; 1 when it held some, else 0.
local function fixedGive(key, win, k)
  local c = tonumber(redis.call('HGET', key, win))
  if not c or c <= 0 then return 0 end
  c = c - k
  if c < 0 then c = 0 end
  redis.call('HSET', key, win, c)
  return 1
end

-- The window holding now (a calendar window, B > 0, from the boundaries
-- b0, b1, b2 sent in P, B and T: see calendar in lib.lua), which ends
-- left µs from now, and its count c.
local function fixedWindow(l, now)
  if l.B > 0 then return calendar(now, l.P, l.B, l.T) end
  local win = fdiv(now, l.P)
  return win, (win + 1) * l.P - now
end

ALG.f = {
  lease = true, -- but a calendar window
  read = function(l, now)
    l.win, l.left = fixedWindow(l, now)
    l.c = tonumber(redis.call('HGET', l.key, str(l.win))) or 0
  end,
  take = function(l, now, k, key)
    local c = l.c
    if c + k > l.R then return -c - 1, l.left, 0 end
    if key then fixedAdd(key, str(l.win), c, k, l.left) end
    return c + k, l.left, 0
  end,
  -- only a charge in the current window gets something back: a stamp
  -- outside a calendar window's boundaries is of another window
  give = function(l, now, stamp, k)
    local win, wc = fixedWindow(l, now), nil
    if l.B == 0 or (stamp >= l.P and stamp < l.T) then wc = fixedWindow(l, stamp) end
    if wc ~= win then return 0 end
    return fixedGive(l.key, str(win), k)
  end,
}

-- (the lean script starts here)
-- sluice fixed, lean: one FixedWindow limit (not a calendar one) without a
-- penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    with c the window's count after the call when allowed (charged
--          when n > 0), else before it, and left = end - now in µs
--          (1..P): when (R + 1)·P <= 2^53, one integer, c·P + left - 1
--          when allowed, else -(c·P + left); otherwise {c, left} when
--          allowed, else {-c - 1, left}. A cost beyond R is denied by the
--          same test.

-- It is the body of lean.lua's lean(key, ARGV, o, pre, n) (now, num, n, k,
-- key; the call's arguments are ARGV[o + 1], ...).

local R, P = num(ARGV[o + 2]), num(ARGV[o + 3])
local e = math.fmod(now, P)
local win = (now - e) / P
local left = P - e
local c = tonumber(redis.call('HGET', key, win)) or 0
local ok = c + k <= R
if ok then
  if n > 0 then fixedAdd(key, win, c, n, left) end
  c = c + k
end
if (R + 1) * P > 9007199254740992 then
  if ok then return { c, left } end
  return { -c - 1, left }
end
if ok then return c * P + left - 1 end
return -(c * P + left)
