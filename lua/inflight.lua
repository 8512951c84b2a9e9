-- sluice inflight: InFlight, with the arithmetic of ALGORITHMS.md. State:
-- a sorted set of slot ids scored by the instant (µs) each expires; live:
-- later than now. Any cost of 1 or more takes one slot while fewer than R
-- are live; a refusal's retry is the earliest expiry, at most 1 s. Its
-- slot is given back by Release (ZREM), not by refund.lua.
--
-- It has no lean script (take.lua serves it), so all of it is the general
-- scripts' part: package redisstore puts it before take.lua, refund.lua and
-- lease.lua.

-- (the general scripts' part starts here)
-- inflightTrim removes the members scored up to cut, at most 1024 (as
-- logAdd does a log's).
local function inflightTrim(key, cut)
  local x = redis.call('ZCOUNT', key, '-inf', str(cut))
  if x > 1024 then x = 1024 end
  if x > 0 then redis.call('ZREMRANGEBYRANK', key, 0, x - 1) end
end

-- take replies x (c, the live slots after the call, when allowed, else
-- -c - 1), reset (until the latest slot expires), and a refusal's retry.
-- Charged, the call's slot l.slot (take.lua picks it) is added.
ALG.i = {
  read = function(l, now)
    -- arithmetic coercion (+ 0) reads every form a score may take
    -- ("1.7e+15" on some servers), where gopher-lua's tonumber does not
    l.c = redis.call('ZCOUNT', l.key, '(' .. str(now), '+inf')
    if l.c > 0 then
      l.earliest = redis.call('ZRANGEBYSCORE', l.key, '(' .. str(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2] + 0
      l.latest = redis.call('ZRANGE', l.key, -1, -1, 'WITHSCORES')[2] + 0
    end
  end,
  take = function(l, now, k, key)
    local c, latest = l.c, l.latest
    if k > 0 and c >= l.R then
      local retry, reset = l.earliest - now, 0
      if retry > 1000000 then retry = 1000000 end
      if c > 0 then reset = latest - now end
      return -c - 1, reset, retry
    end
    if k > 0 then c, latest = c + 1, now + l.P end
    if key then
      -- A refused PEXPIRE (see pexpire) changes nothing of a set with
      -- live slots, and deletes a set that had none (its expired slots
      -- are nothing to keep).
      if l.c > 0 then pexpire(key, px(l.P), false) end
      redis.call('ZADD', key, str(now + l.P), str(l.slot))
      inflightTrim(key, now) -- after the ZADD (see fixedAdd); at most 1024
      if l.c == 0 then pexpire(key, px(l.P), true) end
    end
    if c == 0 then return 0, 0, 0 end
    return c, latest - now, 0
  end,
  give = function() return 0 end,
  holds = function(l, id) return redis.call('ZSCORE', l.key, str(id)) end,
}

-- (the lean script starts here)
-- (none: take.lua serves every InFlight limit)
