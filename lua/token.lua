-- sluice token: TokenBucket, with the arithmetic of ALGORITHMS.md. State:
-- "<tok>:<ts>", the tokens scaled by P at ts (µs), a string key.
--
-- Above the marks, the one definition of how a state answers a cost:
-- tokenTake decides, tokenSet charges. Package redisstore puts it before
-- take.lua, refund.lua and this file's lean script; the give-backs
-- (tokenGive), between the marks, before refund.lua only; every function
-- a script defines is a closure built on each call, so each script gets
-- only those it calls. They use only their arguments and the functions
-- above them.

-- tokenTake: the state tok, ts (tok nil: none, a full bucket) of a bucket
-- of B per P µs refilled at R scaled tokens per µs, answering a cost k at
-- now: the tokens refilled to now less k·P when they hold k·P, else -tok
-- - 1 with tok refilled to now. A cost beyond B is denied by the same
-- test.
local function tokenTake(tok, ts, now, k, R, P, B)
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
  return tok - k * P
end

-- tokenSet writes the state of tok (< B·P) tokens at now, until the bucket
-- is full again: ceil(need / R) µs, in whole ms.
local function tokenSet(key, now, tok, R, P, B)
  local fmod = math.fmod
  local need = B * P - tok
  local r = fmod(need, R)
  local ms = (need - r) / R + 999
  if r > 0 then ms = ms + 1 end
  redis.call('SET', key, string.format('%d:%d', tok, now), 'PX', (ms - fmod(ms, 1000)) / 1000)
end

-- (the give-backs, for refund.lua only, start here)
-- tokenGive gives k units (at most B) back to the state tok, ts at now:
-- the tokens refilled to now and k·P more, up to a full bucket (the key
-- goes).
local function tokenGive(key, tok, ts, now, k, R, P, B)
  tok = tokenTake(tok, ts, now, -k, R, P, B)
  if tok >= B * P then redis.call('DEL', key) else tokenSet(key, now, tok, R, P, B) end
end

-- (the lean script starts here)
-- sluice token, lean: one TokenBucket limit without a penalty.
--
-- KEYS[1]  state key
-- ARGV     n (the cost; -n decides n and writes nothing), R, P (µs), B
-- Reply    tokenTake's: tok after the call when allowed (charged when
--          n > 0), else -tok - 1 with tok refilled to now; the caller
--          derives the figures.

-- It runs after lean.lua (now, n, k, key).

local R, P, B = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tok, ts
local v = redis.call('GET', key)
if v then
  local x, y = string.match(v, '^(%d+):(%d+)$')
  if x then tok, ts = tonumber(x), tonumber(y) end
end
tok = tokenTake(tok, ts, now, k, R, P, B)
if tok >= 0 and n > 0 then tokenSet(key, now, tok, R, P, B) end
return tok
