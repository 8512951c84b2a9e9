-- sluice lean: what every lean script shares; package lua puts each
-- algorithm's definitions (tat.lua, token.lua, fixed.lua, sliding.lua,
-- log.lua) before it and the algorithm's lean part inside it, so that
-- each script Redis runs is still one program. It reads Redis' clock in
-- µs once; lean decides one call: key, and its arguments ARGV[o + 1],
-- ARGV[o + 2], ..., the first the cost n (-n decides a cost of n and
-- writes nothing), seen as k; pre, when not nil or false, is key's value,
-- read by the batch's MGET (a lean part whose state is a string reads it
-- itself otherwise). A cost that is not a number is a call the client sent
-- again (see package lua): refused (resent), nothing read or written. A
-- lean part reads its numeric arguments with num: tonumber, which a batch
-- replaces (see batch.lua).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local num = tonumber
local resent = 'SLUICE re-sent call refused'

local function lean(key, ARGV, o, pre, n)
  local k = n
  if n < 0 then k = -n end
-- (the algorithm's lean part runs here)
end

-- (one call)
-- The lean script: KEYS[1] and ARGV are the call's; the reply is lean's.
local n = num(ARGV[1])
if not n then return redis.error_reply(resent) end
return lean(KEYS[1], ARGV, 0, nil, n)
-- (a batch)
-- The batch script: the calls of one lean script and one limit on keys of
-- one Cluster slot, decided in order at one reading of the clock, each
-- exactly as it would be alone. KEYS[i] is call i's key; ARGV the limit's
-- arguments after the cost (per of them), then call i's cost at per + i.
-- When the state is a string (mget, set by the
-- Redis store before this line), one MGET reads every key, and each key's
-- first call gets its value (any later one reads what the calls before
-- it wrote). The reply's entry i is call i's reply, or the text of the
-- error it met (see entry in batch.lua).
local out, per, seen, pre = {}, #ARGV - #KEYS, {}, {}
if mget then pre = redis.call('MGET', unpack(KEYS)) end
for i = 1, #KEYS do
  local key = KEYS[i]
  local n = num(ARGV[per + i])
  if n then
    out[i] = entry(pcall(lean, key, ARGV, -1, not seen[key] and pre[i], n))
  else
    out[i] = resent
  end
  seen[key] = true
end
return out
