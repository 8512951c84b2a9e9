-- sluice token: TokenBucket, with the arithmetic of ALGORITHMS.md. State:
-- "<tok>:<ts>", the tokens scaled by P at ts (µs), a string key.
--
-- Above the marks, the one definition of how a state answers a cost:
-- tokenTake decides, and charges when given the key. Package redisstore
-- puts it before take.lua, refund.lua, lease.lua and this file's lean
-- script; between the marks, the general scripts' part (the give-back
-- tokenGive, and the entry ALG.t, see lib.lua), before take.lua,
-- refund.lua and lease.lua only. Every function a script defines is a
-- closure built on each call, and each call of it costs too: a lean script
-- gets only its algorithm's definitions, and calls one.

-- tokenTake: the state tok, ts (tok nil: none, a full bucket) of a bucket
-- of B per P µs refilled at R scaled tokens per µs, answering a cost k at
-- now: the tokens refilled to now less k·P when they hold k·P, else -tok
-- - 1 with tok refilled to now. A cost beyond B is denied by the same
-- test; a negative one gives back. Given key, a cost that fits is
-- charged: the state becomes those tokens at now, until the bucket is full
-- again (ceil(need / R) µs, in whole ms), or goes when it is full.
local function tokenTake(tok, ts, now, k, R, P, B, key)
  local cap = B * P
  if not tok or tok >= cap then
    tok = cap
  else
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    -- elapsed >= ceil(need / R), compared as a product: exact below 2^53,
    -- and above it the product cannot round down to need.
    if R * elapsed >= cap - tok then tok = cap else tok = tok + R * elapsed end
  end
  if tok < k * P then return -tok - 1 end
  tok = tok - k * P
  if key then
    local need = cap - tok
    if need <= 0 then
      redis.call('DEL', key)
    else
      local fmod = math.fmod
      local r = fmod(need, R)
      local ms = (need - r) / R + 999
      if r > 0 then ms = ms + 1 end
      redis.call('SET', key, string.format('%d:%d', tok, now), 'PX', (ms - fmod(ms, 1000)) / 1000)
    end
  end
  return tok
end

-- (the general scripts' part starts here)
-- tokenGive gives k units (at most B) back to the state tok, ts at now:
-- the tokens refilled to now and k·P more, up to a full bucket (the key
-- goes).
local function tokenGive(key, tok, ts, now, k, R, P, B)
  tokenTake(tok, ts, now, -k, R, P, B, key)
end

-- The state s1, s2 is tok, ts; anything else is a full bucket.
ALG.t = {
  str = true,
  lease = true,
  take = function(l, now, k, key)
    local tok, ts
    if l.s2 and not l.s3 then tok, ts = l.s1, l.s2 end
    return tokenTake(tok, ts, now, k, l.R, l.P, l.B, key), 0, 0
  end,
  give = function(l, now, stamp, k)
    if not l.s1 then return 0 end
    local tok, ts = l.s1, l.s2
    if l.s3 or not ts then tok = nil end
    if k > l.B then k = l.B end
    tokenGive(l.key, tok, ts, now, k, l.R, l.P, l.B)
    return 1
  end,
}

-- (the lean script starts here)
-- sluice token, lean: one TokenBucket limit without a penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs), B
-- Reply    tokenTake's: tok after the call when allowed (charged when
--          n > 0), else -tok - 1 with tok refilled to now; the caller
--          derives the figures.

-- It is the body of lean.lua's lean(key, ARGV, o, pre, n) (now, num, n, k,
-- key; the call's arguments are ARGV[o + 1], ...).

local R, P, B = num(ARGV[o + 2]), num(ARGV[o + 3]), num(ARGV[o + 4])
local tok, ts
local v = pre or redis.call('GET', key)
if v then
  local x, y = string.match(v, '^(%d+):(%d+)$')
  if x then tok, ts = tonumber(x), tonumber(y) end
end
return tokenTake(tok, ts, now, k, R, P, B, n > 0 and key)
