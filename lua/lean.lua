-- sluice lean: the start every lean script shares; package lua puts it
-- before each (tat.lua, token.lua, fixed.lua, sliding.lua, log.lua), so
-- that each script Redis runs is still one program. It reads Redis' clock
-- in µs, the cost n (ARGV[1]; -n decides a cost of n and writes nothing)
-- as k, and the one key. A cost that is not a number is a call the client
-- sent again (see lua.Resent): refused, nothing read or written.

local n = tonumber(ARGV[1])
if not n then return redis.error_reply('SLUICE re-sent call refused') end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local k = n
if n < 0 then k = -n end
local key = KEYS[1]
