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
-- It runs after lib.lua (str, fdiv, calendar, STATE) and each algorithm's
-- definitions (tatGive, tokenGive, fixedGive, slidingGive, logGive: see
-- take.lua), which the take and lean scripts share.

if #ARGV ~= 2 + 6 * #KEYS then
  return redis.error_reply('ERR sluice refund: want 6 arguments per key after n and stamp')
end

local n, stamp = tonumber(ARGV[1]), tonumber(ARGV[2])
if not n then -- a call the client sent again (see lua.Resent)
  return redis.error_reply('SLUICE re-sent call refused')
end
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function parse(key)
  local v = call('GET', key)
  if not v then return nil end
  local x, y, z = string.match(v, STATE)
  return tonumber(x), tonumber(y), tonumber(z)
end

-- gcra, leaky_bucket: the TAT moves back by n·T (tatGive).
local function tat(key, lim, T)
  local s1, s2 = parse(key)
  if not s1 or s2 or s1 <= now then return 0 end
  if n < lim then lim = n end
  tatGive(key, s1, now, lim, T)
  return 1
end

-- token_bucket: n tokens back after the refill to now, up to the burst
-- (tokenGive).
local function token(key, R, P, B)
  local s1, s2, s3 = parse(key)
  if not s1 then return 0 end
  if s3 or not s2 then s1 = nil end -- not "<tok>:<ts>": a full bucket
  local k = n
  if k > B then k = B end
  tokenGive(key, s1, s2, now, k, R, P, B)
  return 1
end

-- fixed_window: n off the count of the charge's window, if it is current.
-- A calendar window (B > 0) sends the boundaries b0, b1, b2 in P, B, T
-- (take.lua); a stamp outside them is of another window.
local function fixed(key, P, B, T)
  local win, wc
  if B > 0 then
    win = calendar(now, P, B, T)
    if stamp >= P and stamp < T then wc = calendar(stamp, P, B, T) end
  else
    win, wc = fdiv(now, P), fdiv(stamp, P)
  end
  if wc ~= win then return 0 end
  return fixedGive(key, str(win), n)
end

-- sliding_window: n off the count of the charge's window, if it is the
-- current or the previous one (slidingGive).
local function sliding(key, P)
  local win, wc = fdiv(now, P), fdiv(stamp, P)
  if wc ~= win and wc ~= win - 1 then return 0 end
  local x, c, p = parse(key)
  if not (x and c and p) then return 0 end
  return slidingGive(key, x, c, p, wc, n)
end

local done, seen = 0, {}
for i = 1, #KEYS do
  local key, j = KEYS[i], 6 * i - 3
  if not seen[key] then -- an identical limit given twice is one state
    seen[key] = true
    local a = ARGV[j]
    local R, P, B, T = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
    if a == 'g' then done = done + tat(key, B, T)
    elseif a == 'k' then done = done + tat(key, B + 1, T)
    elseif a == 't' then done = done + token(key, R, P, B)
    elseif a == 'f' then done = done + fixed(key, P, B, T)
    elseif a == 'w' then done = done + sliding(key, P)
    elseif a == 'l' then done = done + logGive(key, now, P, stamp, n)
    elseif a == 'i' then -- in_flight: its slot is given back by Release, not here
    else return redis.error_reply('ERR sluice refund: unknown algorithm ' .. tostring(a)) end
  end
end
return done
