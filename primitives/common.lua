-- common.lua - the helpers every primitive script shares beyond primitives/core.lua. At build
-- time scripts/embed-lua.sh splices this text into each primitives/NAME/NAME.lua at its line
-- "-- @common" (in front of it without one), after core.lua, so Redis still receives one
-- self-contained script per primitive (one EVALSHA, one SHA1). Nothing here reads ARGV, and
-- only wrong_type reads KEYS: keys are passed in, so each script keeps its own key layout.
--
-- Waiter queues (mutex, rwlock, semaphore) are a zset Q (acquisition id -> arrival number,
-- FIFO) plus a hash QI (acquisition id -> "EXPIRYMS LEASEMS TOKENHASH[ MORE]"): an entry is
-- a lease of its own, renewed by the waiter's watchdog, so a crashed waiter is skipped.

-- nil if every key is absent or of its wanted type (want[i] for KEYS[i]), else the
-- WRONGTYPE error to return before anything is written.
local function wrong_type(want, what)
  for i = 1, #want do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= want[i] then
      return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. t ..
                               ', not a redisync ' .. what .. ' ' .. want[i])
    end
  end
  return nil
end

local function q_drop(q, qi, id)
  redis.call('ZREM', q, id)
  redis.call('HDEL', qi, id)
end

-- The first live entry of the queue and its info (expired ones are removed on the way).
local function q_live_head(q, qi, now_ms)
  while true do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then return nil end
    local info = redis.call('HGET', qi, head)
    local exp = info and tonumber(string.match(info, '^(%d+) '))
    if exp and exp > now_ms then return head, info end
    q_drop(q, qi, head)
  end
end

-- Adds id at the tail of the queue (or refreshes its entry if it is queued already), with
-- info as its entry. A full queue (maxw) is swept of expired entries once, then refused with
-- RSQUEUE. Returns nil, or the error to return. Reads both keys before writing either.
-- score: its place instead of the tail (Redlock: the same on every master, mutex.lua).
local function q_add(q, qi, id, info, maxw, qlease, now_ms, score)
  redis.call('HEXISTS', qi, id)
  if not redis.call('ZSCORE', q, id) then
    if redis.call('ZCARD', q) >= maxw then
      local all = redis.call('HGETALL', qi)
      for i = 1, #all, 2 do
        local exp = tonumber(string.match(all[i + 1], '^(%d+) '))
        if not exp or exp <= now_ms then q_drop(q, qi, all[i]) end
      end
      if redis.call('ZCARD', q) >= maxw then
        return redis.error_reply('RSQUEUE waiter queue full')
      end
    end
    if not score then
      local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
      score = (tonumber(last[2]) or 0) + 1
    end
    redis.call('ZADD', q, score, id)
  end
  redis.call('HSET', qi, id, info)
  extend_lazily(q, 2 * qlease)
  extend_lazily(qi, 2 * qlease)
  return nil
end

-- The channel of the client that made acquisition id "PUBLICID:N".
local function client_channel(prefix, id)
  return prefix .. (string.match(id, '^([^:]+):') or '')
end

-- An acquisition id is "PUBLICID:N.SECRET" (lib/hold.c); its route "PUBLICID:N" addresses a
-- message that must not be taken for a grant.
local function acq_route(id)
  return string.match(id, '^[^.]*')
end

-- ---- end of common.lua; the primitive's own script follows ----
