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
-- It runs after lib.lua (str, fdiv, cdiv, STATE, slidingRetry) and the
-- definitions and give-backs of tat.lua, token.lua, fixed.lua and
-- sliding.lua, which change the state: a return is that algorithm's
-- give-back, a grant its charge.

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

-- grant is what a call may take of avail free units: nothing when n does
-- not fit, else up to want; and the retry of a cost of n that does not
-- fit (INF when it never can), from wait, its retry when n <= the limit.
local function grant(avail, lim, wait)
  if n > lim then return 0, INF end
  if n == 0 then return 0, 0 end
  if avail < n then return 0, wait() end
  if want < avail then return want, 0 end
  return avail, 0
end

-- gcra: the state is the TAT. A return moves it back (tatGive), a grant
-- charges it (tatTake).
local function gcra()
  local tat = not s2 and s1
  if ret > 0 and tat and tat > now then
    tatGive(key, tat, now, ret, T)
    tat = tat - ret * T
  end
  local tol = B * T
  local used = tatTake(tat, now, 0, B, T)
  if used < 0 then used = -used - 1 end
  local avail = 0
  if tol > used then avail = fdiv(tol - used, T) end
  local g, retry = grant(avail, B, function() return used + n * T - tol end)
  if g > 0 then
    used = tatTake(tat, now, g, B, T, key)
    avail = avail - g
  end
  return { g, B, avail, retry, used, 0, 0 }
end

-- token_bucket: tokens scaled by P, refilled to now first (tokenTake); a
-- return is tokenGive, a grant tokenTake.
local function token()
  local cap, tok, ts = B * P, nil, nil
  if s2 and not s3 then tok, ts = s1, s2 end
  if ret > 0 then
    if ret > B then ret = B end
    tokenGive(key, tok, ts, now, ret, R, P, B)
    tok = tokenTake(tok, ts, now, -ret, R, P, B) -- the tokens after the return
    if tok >= cap then tok = nil end
    ts = now
  end
  tok = tokenTake(tok, ts, now, 0, R, P, B)
  local g, retry = grant(fdiv(tok, P), B, function() return cdiv(n * P - tok, R) end)
  if g > 0 then tok = tokenTake(tok, now, now, g, R, P, B, key) end
  return { g, B, fdiv(tok, P), retry, cdiv(cap - tok, R), 0, 0 }
end

-- fixed_window: a return only counts in the window it was granted in
-- (fixedGive); a grant is fixedAdd. The state is a hash from the window's
-- index to its count (fixed.lua).
local function fixed()
  local win = fdiv(now, P)
  local left = (win + 1) * P - now
  local c = tonumber(call('HGET', key, str(win))) or 0
  if ret > 0 and rwin == win and c > 0 then
    fixedGive(key, str(win), ret)
    c = c - ret
    if c < 0 then c = 0 end
  end
  local g, retry = grant(R - c, R, function() return left end)
  if g > 0 then
    fixedAdd(key, str(win), c, g, left)
    c = c + g
  end
  local reset = 0
  if c > 0 then reset = left end
  return { g, R, R - c, retry, reset, win, left }
end

-- sliding_window: a return only counts in the window it was granted in
-- (slidingGive); the previous window's count is never changed. A grant is
-- slidingTake.
local function sliding()
  local win = fdiv(now, P)
  if ret > 0 and rwin == win and s1 == win and s2 and s3 then
    slidingGive(key, s1, s2, s3, win, ret)
    s2 = s2 - ret
    if s2 < 0 then s2 = 0 end
  end
  local c, p, e = slidingTake(s1, s2, s3, now, 0, R, P)
  if c < 0 then c = -c - 1 end
  local function rem()
    local r = R * P - p * (P - e) - c * P
    if r > 0 then return fdiv(r, P) end
    return 0
  end
  local g, retry = grant(rem(), R, function() return slidingRetry(R, P, c, p, e, n) end)
  if g > 0 then c = slidingTake(s1, s2, s3, now, g, R, P, key) end
  local reset = 0
  if c > 0 then reset = 2 * P - e elseif p > 0 then reset = P - e end
  return { g, R, rem(), retry, reset, win, P - e }
end

if a == 'g' then return gcra() end
if a == 't' then return token() end
if a == 'f' then return fixed() end
if a == 'w' then return sliding() end
return redis.error_reply('ERR sluice lease: algorithm ' .. a .. ' is not leased')
