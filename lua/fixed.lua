-- sluice fixed: one FixedWindow limit without a penalty, with the
-- arithmetic of ALGORITHMS.md. State: "<w>:<c>", as in take.lua.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    {c, left}: c the window's count after the call when allowed
--          (charged when n > 0), else -c - 1; left = end - now in µs.
--          A cost beyond R is denied by the same test.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local n, R, P = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local k = n
if n < 0 then k = -n end
local key = KEYS[1]
local e = math.fmod(now, P)
local win = (now - e) / P
local left = P - e
local c = 0
local v = redis.call('GET', key)
if v then
  local x, y = string.match(v, '^(%d+):(%d+)$')
  if x and tonumber(x) == win then c = tonumber(y) end
end
if c + k > R then return { -c - 1, left } end
c = c + k
if n > 0 then
  local ms = left + 999 -- PX ceil(left / 1000); left >= 1
  redis.call('SET', key, string.format('%d:%d', win, c), 'PX', (ms - math.fmod(ms, 1000)) / 1000)
end
return { c, left }
