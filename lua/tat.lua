-- sluice tat: GCRA and LeakyBucket, with the arithmetic of ALGORITHMS.md.
-- State: "<tat>" in µs, a string key.
--
-- Above the marks, the one definition of how a state answers a cost:
-- tatTake decides, tatSet charges. Package redisstore puts it before
-- take.lua, refund.lua and this file's lean script; the give-backs
-- (tatGive), between the marks, before refund.lua only; every function a
-- script defines is a closure built on each call, so each script gets only
-- those it calls. They use only their arguments and the functions above
-- them.

-- tatTake: the state tat (nil or false: none) answering a cost k at now,
-- for a capacity lim (B, or B+1 for LeakyBucket) of interval T: used =
-- tat - now after charging k when it fits, else -(tat - now) - 1. A cost
-- beyond lim is denied by the same test, since lim·T < 2^53.
local function tatTake(tat, now, k, lim, T)
  if not tat or tat < now then tat = now end
  local used = tat - now + k * T
  if used > lim * T then return now - tat - 1 end
  return used
end

-- tatSet writes the state of used = tat - now (>= 1) at now.
local function tatSet(key, now, used)
  local ms = used + 999 -- PX ceil(used / 1000)
  redis.call('SET', key, now + used, 'PX', (ms - math.fmod(ms, 1000)) / 1000)
end

-- (the give-backs, for refund.lua only, start here)
-- tatGive gives k units (at most lim) back to the state tat (> now) at
-- now: the TAT moves back by k·T, never before now (the key goes).
local function tatGive(key, tat, now, k, T)
  local used = tat - k * T - now
  if used > 0 then tatSet(key, now, used) else redis.call('DEL', key) end
end

-- (the lean script starts here)
-- sluice tat, lean: one GCRA or LeakyBucket limit without a penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), lim (B, or B+1
--          for LeakyBucket), T (µs)
-- Reply    tatTake's: used = tat - now after the call when allowed
--          (charged when n > 0), else -(tat - now) - 1; the caller derives
--          the figures.

-- It runs after lean.lua (now, n, k, key).

local lim, T = tonumber(ARGV[2]), tonumber(ARGV[3])
local used = tatTake(tonumber(redis.call('GET', key)), now, k, lim, T)
if used >= 0 and n > 0 then tatSet(key, now, used) end
return used
