-- sluice sliding: one SlidingWindow limit without a penalty, with the
-- arithmetic of ALGORITHMS.md. State: "<w>:<cur>:<prev>", as in take.lua,
-- read with MGET as take.lua reads it.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    {c, p, e}: c the current window's count after the call when
--          allowed (charged when n > 0), else -c - 1; p the previous
--          window's count; e = now - w·P in µs. A cost beyond R is denied
--          by the same test.

-- It runs after lean.lua (now, n, k, key).

local R, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local e = math.fmod(now, P)
local win = (now - e) / P
local c, p = 0, 0
local v = redis.call('MGET', key)[1]
if v then
  local x, y, z = string.match(v, '^(%d+):(%d+):(%d+)$')
  if x then
    x = tonumber(x)
    if x == win then c, p = tonumber(y), tonumber(z) elseif x == win - 1 then p = tonumber(y) end
  end
end
if p * (P - e) + (c + k) * P > R * P then return { -c - 1, p, e } end
c = c + k
if n > 0 then
  local ms = 2 * P - e + 999 -- PX ceil((2P - e) / 1000)
  redis.call('SET', key, string.format('%d:%d:%d', win, c, p), 'PX', (ms - math.fmod(ms, 1000)) / 1000)
end
return { c, p, e }
