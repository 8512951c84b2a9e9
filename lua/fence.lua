-- sluice fence: settles a recorded call whose reply was lost (see
-- record.lua). KEYS[1] is the call's record key; ARGV[1] its TTL in ms.
-- If the call ran, its record is returned: { µs, kind, i1, i2, ... },
-- kind 0 for an integer reply, 1 for a list. If it did not run (yet), the
-- record is set to 'f', so that it never will (record.lua refuses it),
-- and the reply is 0.

local prev = redis.call('GET', KEYS[1])
if not prev then
  redis.call('SET', KEYS[1], 'f', 'PX', ARGV[1])
  return 0
end
if prev == 'f' then return 0 end
local bar = string.find(prev, '|', 1, true)
local out = { tonumber(string.sub(prev, 1, bar - 1)), 0 }
if string.sub(prev, bar + 1, bar + 1) == 't' then out[2] = 1 end
for v in string.gmatch(string.sub(prev, bar + 2), '[^,]+') do out[#out + 1] = tonumber(v) end
return out
