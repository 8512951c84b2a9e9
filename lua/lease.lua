-- sluice lease: return what a process did not spend of its lease on one
-- limit of one key, then grant it a new lease of up to `want` units, with
-- the arithmetic of ALGORITHMS.md ("Leases"). Runs on Redis >= 7.0 (Lua
-- 5.1) and on miniredis (gopher-lua). Only gcra, token_bucket,
-- fixed_window and sliding_window, without a penalty, are leased.
--
-- KEYS[1]  the limit's state key (the same key lua/take.lua uses)
-- ARGV[1]  algorithm: g gcra, t token_bucket, f fixed_window, w sliding_window
-- ARGV[2]  R, rate per period
-- ARGV[3]  P, period in microseconds
-- ARGV[4]  B, burst after defaults (0 for the window algorithms)
-- ARGV[5]  T, interval ceil(P/R) in microseconds (gcra; else 0)
-- ARGV[6]  n, the least grant worth having (0: return only, grant nothing);
--          lua.Resent: refused with an error, nothing read or written
-- ARGV[7]  want, the most to grant (n <= want)
-- ARGV[8]  ret, unspent units to give back first (0: none)
-- ARGV[9]  the window index those units were granted in (windows; else 0)
-- Reply, six integers:
--   granted (0: denied, or a return only); the limit's reply (ALG's take:
--   three integers, as take.lua's) to the grant when granted, else to a
--   cost of n (denied, nothing charged; a peek when n = 0), from which
--   the caller derives the figures as for a Take; the index of the window
--   holding now, floor(now / P), and µs until it ends (the windows')
--
-- It runs after lib.lua (str, fdiv, STATE, ALG) and every algorithm's
-- definitions and general part, whose entries in ALG change the state: a
-- return is the algorithm's give, a grant its take. Which algorithms are
-- leased the Redis store decides (leasable); their entries say lease.

if #KEYS ~= 1 or #ARGV ~= 9 then
  return redis.error_reply('ERR sluice lease: want 1 key and 9 arguments')
end

if not tonumber(ARGV[6]) then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local a = ARGV[1]
local l = {
  a = a, R = tonumber(ARGV[2]), P = tonumber(ARGV[3]), B = tonumber(ARGV[4]), T = tonumber(ARGV[5]),
  L = 0, key = KEYS[1], e = alg(a),
}
if not (l.e and l.e.lease) then
  return redis.error_reply('ERR sluice lease: algorithm ' .. a .. ' is not leased')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n, want, ret, rwin = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local win = fdiv(now, l.P)

-- read reads the state into l, as take.lua does.
local function read()
  if not l.e.str then return l.e.read(l, now) end
  local v = call('GET', l.key)
  l.s1, l.s2, l.s3 = nil, nil, nil
  if v then
    local x, y, z = string.match(v, STATE)
    l.s1, l.s2, l.s3 = tonumber(x), tonumber(y), tonumber(z)
  end
end

read()
-- A return: units of a window count only in the window they were granted
-- in (rwin; 0 for the others), so the previous window's never changes.
if ret > 0 and (rwin == 0 or rwin == win) then
  l.e.give(l, now, now, ret)
  read()
end

-- The grant: the most units up to want that fit, when n fit (found by
-- bisection on the algorithm's own test).
local g = 0
if n > 0 and l.e.take(l, now, n) >= 0 then
  g = want
  if l.e.take(l, now, want) < 0 then
    local hi = want
    g = n -- fits; hi does not
    while hi - g > 1 do
      local mid = g + fdiv(hi - g, 2)
      if l.e.take(l, now, mid) >= 0 then g = mid else hi = mid end
    end
  end
end
local x, y, z
if g > 0 then
  x, y, z = l.e.take(l, now, g, l.key)
else
  x, y, z = l.e.take(l, now, n)
end
return { g, x, y, z, win, (win + 1) * l.P - now }
