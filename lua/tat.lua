-- sluice tat: GCRA and LeakyBucket, with the arithmetic of ALGORITHMS.md.
-- State: "<tat>" in µs, a string key.
--
-- Above the marks, the one definition of how a state answers a cost:
-- tatTake decides, and charges when given the key. Package redisstore puts
-- it before take.lua, refund.lua, lease.lua and this file's lean script;
-- between the marks, the general scripts' part (the give-back tatGive, and
-- the entries ALG.g and ALG.k, see lib.lua), before take.lua, refund.lua
-- and lease.lua only. Every function a script defines is a closure built
-- on each call, and each call of it costs too: a lean script gets only its
-- algorithm's definitions, and calls one.

-- tatTake: the state tat (nil or false: none) answering a cost k at now,
-- for a capacity lim (B, or B+1 for LeakyBucket) of interval T: used =
-- tat - now after charging k when it fits, else -(tat - now) - 1. A cost
-- beyond lim is denied by the same test, since lim·T < 2^53. Given key
-- (when used > 0), a cost that fits is charged: the state becomes
-- now + used until then.
local function tatTake(tat, now, k, lim, T, key)
  if not tat or tat < now then tat = now end
  local used = tat - now + k * T
  if used > lim * T then return now - tat - 1 end
  if key then
    local ms = used + 999 -- PX ceil(used / 1000)
    redis.call('SET', key, now + used, 'PX', (ms - math.fmod(ms, 1000)) / 1000)
  end
  return used
end

-- (the general scripts' part starts here)
-- tatGive gives k units (at most lim) back to the state tat (> now) at
-- now: the TAT moves back by k·T, never before now (the key goes). The
-- state is written by tatTake at no cost and with no bound.
local function tatGive(key, tat, now, k, T)
  tat = tat - k * T
  if tat > now then tatTake(tat, now, 0, math.huge, T, key) else redis.call('DEL', key) end
end

-- GCRA's state, s1, is the TAT; LeakyBucket's capacity is B + 1.
ALG.g = {
  str = true,
  lease = true,
  take = function(l, now, k, key)
    local lim = l.B
    if l.a == 'k' then lim = lim + 1 end
    return tatTake(not l.s2 and l.s1, now, k, lim, l.T, key), 0, 0
  end,
  give = function(l, now, stamp, k)
    local tat, lim = l.s1, l.B
    if not tat or l.s2 or tat <= now then return 0 end
    if l.a == 'k' then lim = lim + 1 end
    if k > lim then k = lim end
    tatGive(l.key, tat, now, k, l.T)
    return 1
  end,
}
ALG.k = { str = true, take = ALG.g.take, give = ALG.g.give } -- not leased

-- (the lean script starts here)
-- sluice tat, lean: one GCRA or LeakyBucket limit without a penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), lim (B, or B+1
--          for LeakyBucket), T (µs)
-- Reply    tatTake's: used = tat - now after the call when allowed
--          (charged when n > 0), else -(tat - now) - 1; the caller derives
--          the figures.

-- It is the body of lean.lua's lean(key, ARGV, o, pre, n) (now, num, n, k,
-- key; the call's arguments are ARGV[o + 1], ...).

local lim, T = num(ARGV[o + 2]), num(ARGV[o + 3])
return tatTake(tonumber(pre or redis.call('GET', key)), now, k, lim, T, n > 0 and key)
