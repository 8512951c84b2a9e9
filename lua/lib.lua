-- sluice lib: the helpers take.lua, refund.lua, lock.lua and lease.lua
-- share. Package lua puts this text before each of them, so that each
-- script Redis runs is still one self-contained program. How each
-- algorithm's state answers a cost is not here but in its own file
-- (tat.lua, ...), which the take, refund and lease scripts run after; ALG
-- is filled there, when a call first names an algorithm (alg).
--
-- Every quantity is an integer below 2^53, so doubles hold it exactly.
-- Divisions use fmod, which is exact, and numbers reach Redis through
-- string.format('%.0f') (tostring would write 1.8e+15).

local call, tonumber, format, fmod = redis.call, tonumber, string.format, math.fmod

local function str(x) return format('%.0f', x) end

-- floor(a/b) and ceil(a/b) for integers a >= 0, b > 0: a - fmod(a, b) is
-- an exact multiple of b, so the division is exact too.
local function fdiv(a, b) return (a - fmod(a, b)) / b end
local function cdiv(a, b)
  local r = fmod(a, b)
  if r == 0 then return a / b end
  return (a - r) / b + 1
end

-- PX argument for a lifetime of ttl us: ceil(ttl/1000) ms, at least 1.
local function px(ttl)
  if ttl <= 1000 then return '1' end
  return str(cdiv(ttl, 1000))
end

-- pexpire sets the TTL (ms) of key, just written. If Redis refuses (an ACL
-- without PEXPIRE), the script fails, and a key this call created (fresh)
-- goes first: no key is ever left without a TTL, and nothing is charged.
local function pexpire(key, ms, fresh)
  local r = redis.pcall('PEXPIRE', key, ms)
  if type(r) == 'table' and r.err then
    if fresh then redis.pcall('DEL', key) end
    error(r)
  end
end

-- calendar is the window of a calendar limit (store.PerCalendar) that
-- holds now, from b0 < b1 < b2, the boundaries (us) of two consecutive
-- windows that the client computed in the limit's zone (Lua knows no
-- zones): its start, the window's number, and left = end - now. A now
-- outside [b0, b2) (Redis' clock and the client's apart by about half a
-- window or more) counts as the nearest instant inside: b0, or b2 - 1.
local function calendar(now, b0, b1, b2)
  if now < b0 then now = b0 elseif now >= b2 then now = b2 - 1 end
  if now < b1 then return b0, b1 - now end
  return b1, b2 - now
end

-- A state string: up to three integers separated by colons.
local STATE = '^(%d+):?(%d*):?(%d*)$'

-- ALG maps each algorithm's code (ARGV of take.lua, refund.lua and
-- lease.lua) to its entry, which its file fills in its general part
-- (tat.lua: g and k, ...) and through which those scripts dispatch:
--   str   true when the state is a string key: take.lua reads it with
--         MGET, and take.lua and refund.lua parse it (STATE) into the
--         limit's s1, s2, s3 (nil: none)
--   read  otherwise, read(l, now) reads the state into the limit l
--   take  take(l, now, k, key): the reply of a cost k (0 peeks), three
--         integers, the first < 0 when denied: the lean script's (fixed
--         and log unpacked), from which core/redisstore derives the
--         figures; given key, an allowed cost is charged
--   give  give(l, now, stamp, k): gives back k units of a charge at stamp;
--         1 when the state changed, else 0
--   holds when set, holds(l, id) tells whether the state holds slot id
--         (InFlight: a call takes one slot id for every such limit)
--   lease true when lease.lua may serve it (see core/redisstore's leasable)
-- l is the limit: a (its code), R, P, B, T, L (ARGV), key (its state key),
-- and what read or STATE set.
--
-- An algorithm's entry is made when a call first names it (alg): package
-- redisstore puts every algorithm file's definitions and general part in
-- define, a branch per file, which fills the entries of the codes given.
-- Every function a script defines is a closure built on each call, so a
-- call builds those of the algorithms it uses only.
local ALG, define = {}, nil

-- alg is the entry of code a (nil: no such algorithm).
local function alg(a)
  local e = ALG[a]
  if e == nil then
    define(a)
    e = ALG[a]
  end
  return e
end
