-- sluice token: one TokenBucket limit without a penalty, with the
-- arithmetic of ALGORITHMS.md. State: "<tok>:<ts>", as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs), B
-- Reply    tok after the call when allowed (charged when n > 0), else
--          -tok - 1 with tok refilled to now; the caller derives the
--          figures. A cost beyond B is denied by the same test.

-- It runs after lean.lua (now, n, k, key).

local R, P, B = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cap = B * P
local tok, ts = cap, now
local v = redis.call('GET', key)
if v then
  local x, y = string.match(v, '^(%d+):(%d+)$')
  if x then tok, ts = tonumber(x), tonumber(y) end
end
if tok < cap then
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end
  -- elapsed >= ceil(need / R), compared as a product: exact below 2^53,
  -- and above it the product cannot round down to need.
  if R * elapsed >= cap - tok then tok = cap else tok = tok + R * elapsed end
else
  tok = cap
end
if tok < k * P then return -tok - 1 end
tok = tok - k * P
if n > 0 then
  local fmod = math.fmod
  local need = cap - tok -- >= P: the ttl, ceil(need / R) µs, in whole ms
  local r = fmod(need, R)
  local ms = (need - r) / R + 999
  if r > 0 then ms = ms + 1 end
  redis.call('SET', key, string.format('%d:%d', tok, now), 'PX', (ms - fmod(ms, 1000)) / 1000)
end
return tok
