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
-- Reply, seven integers:
--   granted (0: denied, or a return only), limit, remaining (after the
--   grant), retry us (when denied: as take.lua for a cost of n), reset us,
--   window index (windows; else 0), us until that window ends (windows;
--   else 0)
--
-- It runs after lib.lua (str, fdiv, cdiv, px, keepOnly, STATE, slidingRetry,
-- tokens).

if #KEYS ~= 1 or #ARGV ~= 9 then
  return redis.error_reply('ERR sluice lease: want 1 key and 9 arguments')
end

if not tonumber(ARGV[6]) then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key, a = KEYS[1], ARGV[1]
local R, P, B, T = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n, want, ret, rwin = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local s1, s2, s3
local v = nil
if a ~= 'f' then v = call('GET', key) end -- fixed_window keeps a hash
if v then
  local x, y, z = string.match(v, STATE)
  s1, s2, s3 = tonumber(x), tonumber(y), tonumber(z)
end

-- gcra: the state is the TAT. A return moves it back by ret·T, never
-- before now (a full allowance); a grant of g moves it on by g·T.
local function gcra()
  local tol = B * T
  local tat = now
  if s1 and not s2 and s1 > now then tat = s1 end
  local dirty = false
  if ret > 0 and tat > now then
    tat, dirty = tat - ret * T, true
    if tat < now then tat = now end
  end
  local used = tat - now
  local avail = 0
  if tol - used > 0 then avail = fdiv(tol - used, T) end
  local g, retry = 0, 0
  if n > B then
    retry = INF
  elseif n > 0 and avail < n then
    retry = tat + n * T - now - tol
  elseif n > 0 then
    g, dirty = want, true
    if g > avail then g = avail end
    used = used + g * T
    avail = fdiv(tol - used, T)
  end
  if dirty then
    if used > 0 then call('SET', key, str(now + used), 'PX', px(used)) else call('DEL', key) end
  end
  return { g, B, avail, retry, used, 0, 0 }
end

-- token_bucket: tokens scaled by P, refilled to now first, as take.lua.
local function token()
  local cap = B * P
  local tok = tokens(R, P, B, s1, s2, s3, now)
  local dirty = ret > 0 and tok < cap
  tok = tok + ret * P
  if tok > cap then tok = cap end
  local avail, g, retry = fdiv(tok, P), 0, 0
  if n > B then
    retry = INF
  elseif n > 0 and avail < n then
    retry = cdiv(n * P - tok, R)
  elseif n > 0 then
    g, dirty = want, true
    if g > avail then g = avail end
    tok = tok - g * P
  end
  if dirty then
    if tok < cap then
      call('SET', key, str(tok) .. ':' .. str(now), 'PX', px(cdiv(cap - tok, R)))
    else
      call('DEL', key)
    end
  end
  return { g, B, fdiv(tok, P), retry, cdiv(cap - tok, R), 0, 0 }
end

-- fixed_window: a return only counts in the window it was granted in.
-- The state is a hash from the window's index to its count (fixed.lua).
local function fixed()
  local win = fdiv(now, P)
  local left = (win + 1) * P - now
  local c = tonumber(call('HGET', key, str(win))) or 0
  local fresh = c == 0
  local dirty = false
  if ret > 0 and rwin == win and c > 0 then
    c, dirty = c - ret, true
    if c < 0 then c = 0 end
  end
  local g, retry = 0, 0
  if n > R then
    retry = INF
  elseif n > 0 and c + n > R then
    retry = left
  elseif n > 0 then
    g, dirty = want, true
    if g > R - c then g = R - c end
    c = c + g
  end
  if dirty then
    if c == 0 then
      call('DEL', key)
    elseif fresh then -- the window's first charge: drop older windows
      call('HSET', key, str(win), str(c))
      pexpire(key, px(left), true)
      keepOnly(key, str(win))
    else
      call('HSET', key, str(win), str(c))
    end
  end
  local reset = 0
  if c > 0 then reset = left end
  return { g, R, R - c, retry, reset, win, left }
end

-- sliding_window: a return only counts in the window it was granted in;
-- the previous window's count is never changed.
local function sliding()
  local win = fdiv(now, P)
  local e = now - win * P
  local c, p = 0, 0
  if s2 and s3 then
    if s1 == win then c, p = s2, s3 elseif s1 == win - 1 then p = s2 end
  end
  local dirty = false
  if ret > 0 and rwin == win and c > 0 then
    c, dirty = c - ret, true
    if c < 0 then c = 0 end
  end
  local pw = p * (P - e)
  local function rem()
    local r = R * P - pw - c * P
    if r > 0 then return fdiv(r, P) end
    return 0
  end
  local g, retry = 0, 0
  if n > R then
    retry = INF
  elseif n > 0 and rem() < n then
    retry = slidingRetry(R, P, c, p, e, n)
  elseif n > 0 then
    g, dirty = want, true
    if g > rem() then g = rem() end
    c = c + g
  end
  if dirty then
    if c > 0 or p > 0 then
      call('SET', key, str(win) .. ':' .. str(c) .. ':' .. str(p), 'PX', px(2 * P - e))
    else
      call('DEL', key)
    end
  end
  local reset = 0
  if c > 0 then reset = 2 * P - e elseif p > 0 then reset = P - e end
  return { g, R, rem(), retry, reset, win, P - e }
end

if a == 'g' then return gcra() end
if a == 't' then return token() end
if a == 'f' then return fixed() end
if a == 'w' then return sliding() end
return redis.error_reply('ERR sluice lease: algorithm ' .. a .. ' is not leased')
