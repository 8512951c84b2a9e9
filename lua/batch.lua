-- sluice batch: what both batch scripts (lean.lua's and take.lua's)
-- share; package redisstore puts it before each batch driver. A batch
-- decides each call in a pcall, so that one call's error leaves the others
-- decided, and replies with an array of the calls' replies.

-- entry returns what pcall returned, ok and r, as the call's entry of the
-- batch's reply: its reply, or the text of the error it met or returned,
-- as a string (a reply holds none): an error element inside an array
-- would cost the client its connection (go-redis reads only some as
-- elements).
local function entry(ok, r)
  if type(r) == 'table' and r.err then -- a Redis error, raised or returned
    ok, r = false, r.err
  end
  if ok then return r end
  r = tostring(r)
  if not string.find(r, '^%u+ ') then r = 'ERR ' .. r end -- no code: a Lua error
  return r
end

-- A batch's calls mostly share their cost and their limits' figures: num,
-- with which the scripts convert their numeric arguments (tonumber in one
-- call), converts each distinct argument once (a lookup costs less).
local nums = {}
num = function(s)
  local v = nums[s]
  if v == nil then
    v = tonumber(s)
    nums[s] = v
  end
  return v
end
