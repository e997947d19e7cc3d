-- core.lua - the few helpers a primitive's uncontended acquire and release need: the server
-- clock, the fencing counter, TTL extension, the mutex's grant. scripts/embed-lua.sh puts
-- this text first in every primitive script; primitives/common.lua (the queue and type
-- helpers) follows at the script's "-- @common" line, so a call that its fast path finishes
-- never defines them (each `local function` is a closure made anew on every call). Nothing
-- here reads KEYS or ARGV: keys are passed in.

local FENCE_TTL = 2592000000 -- a fencing counter lives 30 days after its last grant

local function fmt(x)
  return string.format('%d', x)
end

-- Server time in milliseconds and in microseconds (the client's clock is never used).
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Raises key's TTL to at least ms (never lowers it); a TTL it must raise goes to 1.5 x ms, so
-- that the calls of the next ms / 2 find it high enough and only read it (a write per call
-- would cost more than the read). Only for keys whose entries carry their own expiry (zset
-- scores, an 'x' field, a queue entry's lease): a longer TTL only keeps an idle primitive's
-- keys a little longer. A hold whose lease is the key's own TTL sets it with PEXPIRE.
local function extend_lazily(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, fmt(ms + math.floor(ms / 2)))
  end
end

-- Next fencing token of counter key fkey: counter + 1, but never below the server clock in
-- microseconds, so tokens keep rising even if the counter is lost (restart, failover,
-- expiry). The 30-day TTL is set again (SET ... PX) on the first grant of each day (server
-- clock, UTC) and on every grant while the counter is ahead of the clock; other grants store
-- the token with SET ... KEEPTTL, which costs the server less (docs/performance.md, "The
-- fencing counter, stored with KEEPTTL"). So an unused counter lapses 29-30 days after its
-- last grant. A value that is not a number has a day of its own (0): it is replaced with
-- SET ... PX. One call in the common case: SET ... KEEPTTL GET stores the clock and returns
-- the counter it replaced; a second SET ... PX follows only when that was absent, ahead of
-- the clock or of another day. SET ... GET on a key of another type fails without writing,
-- so it checks the counter's type like a read before the first write. Redis before 6.2 has
-- no SET ... GET (a syntax error, nothing written): there, and on a key of another type, the
-- GET of before runs first (and fails on a key of another type, as it did). A second value,
-- true, says the TTL was set again (the day's first grant, or the counter absent, not a
-- number or ahead of the clock): a caller may tie a daily refresh of its own to it.
local DAY_US = 86400000000
local function next_fence(fkey, now_us)
  local s = fmt(now_us)
  local cur = redis.pcall('SET', fkey, s, 'KEEPTTL', 'GET')
  local set = true
  if type(cur) == 'table' then
    cur = redis.call('GET', fkey)
    set = false
  end
  local c = tonumber(cur) or 0
  if cur and c < now_us and math.floor(c / DAY_US) == math.floor(now_us / DAY_US) then
    if not set then redis.call('SET', fkey, s, 'KEEPTTL') end
    return s
  end
  local f = c + 1
  if f < now_us then f = now_us end
  s = fmt(f)
  redis.call('SET', fkey, s, 'PX', FENCE_TTL)
  return s, true
end

-- The id of the mutex's last released acquisition, from the HMGET o a r of its hash: a held
-- mutex keeps it in 'r'; a free one that kept its last hold's 'a', 'f' and 'r' (mutex.lua's
-- release_free) names it in 'a' ('r' only: the layout before).
local function mutex_released(h)
  if h[1] then return h[3] end
  return h[2] or h[3]
end

-- Grants the mutex whose hash is lock (fencing counter fkey) to owner tokhash under
-- acquisition id acq for lease ms: the hold fields of mutex.lua (docs/scripts.md), shared
-- with multilock.lua, which grants several mutexes in one call. prev: the id of the last
-- released acquisition (mutex_released), kept. The caller has read fkey and lock first
-- (type checks).
local function mutex_grant(lock, fkey, tokhash, acq, lease, now_us, prev)
  local f = next_fence(fkey, now_us)
  redis.call('HSET', lock, 'o', tokhash, 'a', acq, 'f', f, 'r', prev or '', 'n', '1', 'e', '')
  redis.call('PEXPIRE', lock, lease)
  return f
end
