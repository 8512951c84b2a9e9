-- sluice refund: give back n units that a charge made at stamp took from
-- each limit of one key (store.Refunder.Refund), with the give-back of
-- ALGORITHMS.md ("Giving back a charge"), at one now. Runs on Redis >= 7.0
-- and on miniredis. It reads and writes the states take.lua and the lean
-- scripts keep, every key keeping a TTL; penalty locks are never read nor
-- written.
--
-- KEYS[i]      limit i's state key (the same key take.lua uses)
-- ARGV[1]      n, the units to give back (> 0); lua.Resent: refused with
--              an error, nothing read or written (a call sent again)
-- ARGV[2]      stamp, Redis' clock in µs when the charge was decided (the
--              last integer of take.lua's reply when asked for it)
-- ARGV[6i-3 .. 6i+2]  limit i as in take.lua: code, R, P, B, T, L
-- Reply        the number of limits that got something back
--
-- It runs after lib.lua (STATE, ALG) and each
-- algorithm's definitions and general part (tat.lua, ...), which fill ALG:
-- each limit's give-back is its entry's give.

if #ARGV ~= 2 + 6 * #KEYS then
  return redis.error_reply('ERR sluice refund: want 6 arguments per key after n and stamp')
end

local n, stamp = tonumber(ARGV[1]), tonumber(ARGV[2])
if not n then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local done, seen = 0, {}
for i = 1, #KEYS do
  local key, j = KEYS[i], 6 * i - 3
  if not seen[key] then -- an identical limit given twice is one state
    seen[key] = true
    local a = ARGV[j]
    local l = {
      a = a, R = tonumber(ARGV[j + 1]), P = tonumber(ARGV[j + 2]), B = tonumber(ARGV[j + 3]),
      T = tonumber(ARGV[j + 4]), key = key, e = alg(a),
    }
    if not l.e then return redis.error_reply('ERR sluice refund: unknown algorithm ' .. tostring(a)) end
    if l.e.str then
      local v = call('GET', key)
      if v then
        local x, y, z = string.match(v, STATE)
        l.s1, l.s2, l.s3 = tonumber(x), tonumber(y), tonumber(z)
      end
    end
    done = done + l.e.give(l, now, stamp, n)
  end
end
return done
