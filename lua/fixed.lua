-- sluice fixed: one FixedWindow limit without a penalty, with the
-- arithmetic of ALGORITHMS.md. State: a hash from the window's index to
-- its count, expiring after the window's end, as in take.lua; a field of
-- an earlier window counts for nothing and goes at the next window's
-- first charge.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs)
-- Reply    with c the window's count after the call when allowed (charged
--          when n > 0), else before it, and left = end - now in µs
--          (1..P): when (R + 1)·P <= 2^53, one integer, c·P + left - 1
--          when allowed, else -(c·P + left); otherwise {c, left} when
--          allowed, else {-c - 1, left}. A cost beyond R is denied by the
--          same test.

-- It runs after lean.lua (now, n, k, key).

local R, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local e = math.fmod(now, P)
local win = (now - e) / P
local left = P - e
local c = tonumber(redis.call('HGET', key, win)) or 0
local ok = c + k <= R
if ok then
  c = c + k
  if n > 0 and c == n then -- the window's first charge
    redis.call('HSET', key, win, c)
    -- The TTL at once. If Redis refuses it (an ACL without PEXPIRE), the
    -- key goes (fields of earlier windows are dead) and the call fails:
    -- no key without a TTL, nothing charged.
    local ms = left + 999 -- PEXPIRE ceil(left / 1000); left >= 1
    local r = redis.pcall('PEXPIRE', key, (ms - math.fmod(ms, 1000)) / 1000)
    if type(r) == 'table' and r.err then
      redis.pcall('DEL', key)
      return r
    end
    -- Fields of earlier windows go after the HSET, never by DEL first:
    -- a Cluster slot that is migrating refuses a script that recreates a
    -- key.
    if redis.call('HLEN', key) > 1 then
      local old = redis.call('HKEYS', key)
      for i = 1, #old do
        if tonumber(old[i]) ~= win then redis.call('HDEL', key, old[i]) end
      end
    end
  elseif n > 0 then
    redis.call('HINCRBY', key, win, n)
  end
end
if (R + 1) * P > 9007199254740992 then
  if ok then return { c, left } end
  return { -c - 1, left }
end
if ok then return c * P + left - 1 end
return -(c * P + left)
