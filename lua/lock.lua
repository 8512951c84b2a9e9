-- sluice lock: one penalty lock alone, read and, when asked, set, as
-- take.lua reads and sets KEYS[2i]. The Redis store decides a Take one key
-- at a time with it and the take script while a Cluster slot migration
-- splits the Take's keys between two nodes (see redisstore's doc). Runs on
-- Redis >= 7.0 and on miniredis.
--
-- KEYS[1]  a penalty lock key (a state key .. ':x')
-- ARGV[1]  L, the penalty in µs: 0 reads; L > 0 also locks until now + L
--          when no lock holds (a holding lock is not extended)
-- Reply    { until, now }: the instant in µs the lock holds until, 0 when
--          none holds, and Redis' clock in µs
--
-- It runs after lib.lua (str, px).

local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local L = tonumber(ARGV[1])
if #KEYS ~= 1 or not L then
  return redis.error_reply('ERR sluice lock: want 1 key and the penalty')
end
local u = tonumber(call('GET', KEYS[1]))
if u and u <= now then u = nil end
if not u and L > 0 then
  u = now + L
  call('SET', KEYS[1], str(u), 'PX', px(L))
end
return { u or 0, now }
