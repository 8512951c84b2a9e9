-- sluice record: the recorded twin of a charging script (take.lua, a
-- lean script): the Redis store puts this file's head before the script
-- and its tail after, the script itself running as a function. After a
-- connection to a server was lost, or a call to it ran out of time, the
-- store sends its charges to the twins for a while, so that a call whose
-- reply was lost can be sent again, and its debt settled (fence.lua),
-- without being charged twice.
--
-- KEYS and ARGV are the script's, and one more key last: the call's
-- record key (in the slot of KEYS[1]), removed before the script runs. If
-- the record holds a reply, the call ran before: that reply is returned
-- and nothing else is done. If it holds 'f', the call was fenced: refused
-- with an error, nothing read or written. Otherwise the script runs, and
-- its reply, unless an error, is kept in the record for recordTTL ms with
-- Redis' clock before it ran (at or before its charge's stamp, for a
-- refund): "<µs>|n<integer>" for an integer, "<µs>|t<i1>,<i2>,..." for a
-- list of integers.

local recordTTL = 10000 -- ms: how long a late call is recognised
local record = table.remove(KEYS)
do
  local prev = redis.call('GET', record)
  if prev == 'f' then return redis.error_reply('SLUICE fenced call refused') end
  if prev then
    local body = string.sub(prev, string.find(prev, '|', 1, true) + 1)
    if string.sub(body, 1, 1) == 'n' then return tonumber(string.sub(body, 2)) end
    local out = {}
    for v in string.gmatch(string.sub(body, 2), '[^,]+') do out[#out + 1] = tonumber(v) end
    return out
  end
end
local t = redis.call('TIME') -- before the script's own reading: at or before its charge
local at = string.format('%d', t[1] * 1000000 + t[2])
local reply = (function()
-- (the script runs here)
end)()
if type(reply) ~= 'table' then
  redis.call('SET', record, at .. string.format('|n%d', reply), 'PX', recordTTL)
elseif not reply.err then
  local parts = {}
  for i = 1, #reply do parts[i] = string.format('%d', reply[i]) end
  redis.call('SET', record, at .. '|t' .. table.concat(parts, ','), 'PX', recordTTL)
end
return reply
