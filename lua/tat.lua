-- sluice tat: one GCRA or LeakyBucket limit without a penalty, with the
-- arithmetic of ALGORITHMS.md. State: "<tat>" in µs, as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), lim (B, or B+1
--          for LeakyBucket), T (µs)
-- Reply    used = tat - now after the call when allowed (charged when
--          n > 0), else -(tat - now) - 1; the caller derives the figures.
--          A cost beyond lim is denied by the same test, since lim·T < 2^53.

-- It runs after lean.lua (now, n, k, key).

local lim, T = tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', key))
if not tat or tat < now then tat = now end
local used = tat - now + k * T
if used > lim * T then return now - tat - 1 end
if n > 0 then
  local ms = used + 999 -- PX ceil(used / 1000); used >= T >= 1
  redis.call('SET', key, now + used, 'PX', (ms - math.fmod(ms, 1000)) / 1000)
end
return used
