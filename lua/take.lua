-- sluice take: charge n units against any number of limits of one key,
-- atomically, with the arithmetic of ALGORITHMS.md. Runs on Redis >= 7.0
-- (Lua 5.1) and on miniredis (gopher-lua). A Take of one limit without a
-- penalty is served by its family's lean script instead (tat.lua, ...),
-- which reads and writes the same states.
--
-- KEYS, per limit i = 1..m:
--   KEYS[2i-1]  state key            (string; a hash for fixed_window, a
--                                     sorted set for sliding_log and
--                                     in_flight)
--   KEYS[2i]    penalty lock key     (state key .. ":x"; read only when L > 0)
-- ARGV:
--   ARGV[1]     n, the cost (0 peeks; the caller clamps it to 2^53); -n
--               decides a cost of n exactly as n would, writing nothing
--               (a dry run: no state, no penalty lock); lua.Resent (not a
--               number): refused with an error, nothing read or written
--   ARGV[6i-4]  algorithm: g gcra, k leaky_bucket, t token_bucket,
--               f fixed_window, w sliding_window, l sliding_log,
--               i in_flight
--   ARGV[6i-3]  R, rate per period
--   ARGV[6i-2]  P, period in microseconds
--   ARGV[6i-1]  B, burst after defaults (0 for the window algorithms)
--   ARGV[6i]    T, interval ceil(P/R) in microseconds (gcra, leaky_bucket)
--               A calendar window (a fixed_window, f, with B > 0) sends in
--               P, B and T the boundaries b0 < b1 < b2 (us) of two
--               consecutive windows instead (see calendar in lib.lua)
--   ARGV[6i+1]  L, penalty in microseconds (0: none)
-- Reply, per limit i, four integers from index 4i-3: its algorithm's
-- reply (three integers, the first < 0 when it denies; see ALG in lib.lua),
-- from which core/redisstore derives the figures as it does a lean
-- script's, and how long its penalty lock still holds in µs (0: none;
-- then the three are a peek's). A limit that allows a call another denies
-- (nothing charged) replies as a peek does.
-- And, when some limit holds slots (in_flight), one more integer: the id
-- of the slot the call took (0: none).
--
-- It runs after lib.lua (str, px, STATE, ALG) and each algorithm's
-- definitions and general part (tat.lua, ..., inflight.lua), which fill
-- ALG. Its body is the function take, which two drivers run (below): the
-- take script, once, and the batch script, for many calls at one reading
-- of the clock.

local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local num = tonumber -- for the arguments: a batch replaces it (batch.lua)

-- take decides one call, whose keys are KEYS[ko + 1] .. KEYS[ko + nk] and
-- arguments ARGV[ao + 1] .. ARGV[ao + na], laid out as above, at now; it
-- returns the call's reply, or its error reply.
local function take(ko, nk, ao, na)
  -- One more argument, 's', asks for Redis' clock at the call (µs) as one
  -- more integer after the reply (a charge that may be refunded).
  local stamped = na == 2 + 3 * nk and ARGV[ao + na] == 's'
  if nk % 2 ~= 0 or (na ~= 1 + 3 * nk and not stamped) then
    return redis.error_reply('ERR sluice: want 2 keys and 6 arguments per limit')
  end

  local n = num(ARGV[ao + 1])
  if not n then -- a call the client sent again (see lua.Resent)
    return redis.error_reply('SLUICE re-sent call refused')
  end
  local write = n > 0
  if n < 0 then n = -n end

  local m = nk / 2
  -- Parse the limits; read every string key (states and locks) in one MGET.
  local lims, reads = {}, {}
  for i = 1, m do
    local j = ao + 6 * i - 4
    local a = ARGV[j]
    local l = {
      a = a, R = num(ARGV[j + 1]), P = num(ARGV[j + 2]),
      B = num(ARGV[j + 3]), T = num(ARGV[j + 4]), L = num(ARGV[j + 5]),
      key = KEYS[ko + 2 * i - 1], lock = KEYS[ko + 2 * i], e = alg(a),
    }
    if not l.e then error('sluice: unknown algorithm ' .. tostring(a)) end
    if l.e.str then
      reads[#reads + 1] = l.key
      l.si = #reads
    end
    if l.L > 0 then
      reads[#reads + 1] = l.lock
      l.li = #reads
    end
    lims[i] = l
  end
  local vals = reads
  if #reads > 0 then vals = call('MGET', unpack(reads, 1, math.min(#reads, 1000))) end
  for first = 1001, #reads, 1000 do -- Lua 5.1's unpack stops near 8000 values
    local got = call('MGET', unpack(reads, first, math.min(first + 999, #reads)))
    for k = 1, #got do vals[first + k - 1] = got[k] end
  end

  -- Read each state: a string state's integers (a value that does not parse
  -- counts as absent), else as its algorithm reads it.
  local slots = false
  for i = 1, m do
    local l = lims[i]
    if l.li and vals[l.li] then l.lockUntil = tonumber(vals[l.li]) end
    if l.si then
      local v = vals[l.si]
      l.s1 = tonumber(v) -- one integer (a TAT), as the lean script reads it
      if v and not l.s1 then
        local a, b, c = string.match(v, STATE)
        l.s1, l.s2, l.s3 = tonumber(a), tonumber(b), tonumber(c)
      end
    else
      l.e.read(l, now)
    end
    slots = slots or l.e.holds ~= nil
  end

  -- Evaluate every limit against the state before the call.
  local out, all = {}, true
  for i = 1, m do
    local l = lims[i]
    local k, cost = 4 * i - 3, n
    out[k + 3] = 0
    if l.lockUntil and now < l.lockUntil then
      -- locked: denied, nothing charged, the lock is not extended
      cost, l.locked, all = 0, true, false
      out[k + 3] = l.lockUntil - now
    end
    out[k], out[k + 1], out[k + 2] = l.e.take(l, now, cost)
    if out[k] < 0 then all = false end
  end

  -- the slot an allowed, charged call takes: the first id from now on that
  -- no limit holding slots holds, one id for all of them
  local slot = 0
  if slots and n > 0 and all and write then
    slot = now
    local again = true
    while again do
      again = false
      for i = 1, m do
        local l = lims[i]
        if l.e.holds and l.e.holds(l, slot) then slot, again = slot + 1, true end
      end
    end
  end

  if n > 0 then
    if all then
      for i = 1, write and m or 0 do -- none in a dry run
        local l, once = lims[i], true
        for j = 1, i - 1 do -- a limit given twice is one state, charged once
          if lims[j].key == l.key then once = false end
        end
        if once then -- each decides again, charging
          l.slot = slot
          l.e.take(l, now, n, l.key)
        end
      end
    else
      for i = 1, m do
        local l = lims[i]
        local k = 4 * i - 3
        if l.locked then -- a peek's already
        elseif out[k] >= 0 then
          -- allowed but not charged: reply what a peek sees
          out[k], out[k + 1], out[k + 2] = l.e.take(l, now, 0)
        elseif write and l.L > 0 then
          call('SET', l.lock, str(now + l.L), 'PX', px(l.L))
        end
      end
    end
  end

  if slots then out[#out + 1] = slot end
  if stamped then out[#out + 1] = now end
  return out
end

-- (one call)
-- The take script: KEYS and ARGV are the call's; the reply is take's.
return take(0, #KEYS, 0, #ARGV)
-- (a batch)
-- The batch script: take calls on keys of one Cluster slot, decided in
-- order at one reading of the clock, each exactly as it would be alone.
-- KEYS holds each call's keys in turn; ARGV, for each call in turn, its
-- number of keys, its number of arguments, then its arguments. The reply's
-- entry i is call i's reply, or the text of its error (see entry).
local out, ko, ao = {}, 0, 0
while ao < #ARGV do
  local nk, na = num(ARGV[ao + 1]), num(ARGV[ao + 2])
  out[#out + 1] = entry(pcall(take, ko, nk, ao + 2, na))
  ko, ao = ko + nk, ao + 2 + na
end
return out
