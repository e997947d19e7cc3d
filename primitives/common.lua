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
-- WRONGTYPE error to return before anything is written. skip (optional): skip[i] true for
-- the keys the caller has already read with a command of their type (a read of a key of
-- another type fails with WRONGTYPE itself, before anything is written): no TYPE call.
local function wrong_type(want, what, skip)
  for i = 1, #want do
    local t = (skip and skip[i]) and want[i] or redis.call('TYPE', KEYS[i]).ok
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
-- first: the queue's first id if the caller has just read it (ZRANGE q 0 0), else nil;
-- first_info: that id's info if the caller has read it too (HGET qi first), else nil.
local function q_live_head(q, qi, now_ms, first, first_info)
  local head, known = first, first_info
  while true do
    head = head or redis.call('ZRANGE', q, '0', '0')[1]
    if not head then return nil end
    local info = known or redis.call('HGET', qi, head)
    known = nil
    local exp = info and tonumber(string.match(info, '^(%d+) '))
    if exp and exp > now_ms then return head, info end
    q_drop(q, qi, head)
    head = nil
  end
end

-- Keeps the TTLs of a queue q and its info qi at least ms, reading one of them: the two are
-- only ever extended together, to the same value (and both set when the queue is created),
-- so qi's TTL stands for both. A qi without a TTL (-1) or absent (-2) sets both.
-- created: q was empty before this call (its new key has no TTL yet).
local function q_keep(q, qi, ms, created)
  if created or redis.call('PTTL', qi) < ms then
    local t = ms + math.floor(ms / 2)
    redis.call('PEXPIRE', q, fmt(t))
    redis.call('PEXPIRE', qi, fmt(t))
  end
end

-- Adds id at the tail of the queue (or refreshes its entry if it is queued already), with
-- info as its entry. A full queue (maxw) is swept of expired entries once, then refused with
-- RSQUEUE. Returns nil, or the error to return. Reads q (ZRANGE or ZCARD) before writing;
-- the first write, HSET on qi, fails without writing if qi is of another type, so qi needs
-- no read. ZADD NX keeps a queued id's place (a retry). score: its place instead of the tail
-- (Redlock: the same on every master, mutex.lua). Without it the place is the tail's
-- arrival number + 1, so the members' numbers are distinct integers from 1 to the tail's:
-- a tail below maxw proves the queue is not full without counting it (ZCARD only from
-- maxw arrivals on since the queue was last empty). last: what ZRANGE q -1 -1 WITHSCORES
-- has returned in this call, if the caller has read it (nothing written since), else nil.
local function q_add(q, qi, id, info, maxw, qlease, now_ms, score, last)
  local n, created
  if not score then
    last = last or redis.call('ZRANGE', q, '-1', '-1', 'WITHSCORES')
    local t = tonumber(last[2]) or 0
    score, created = t + 1, last[1] == nil
    n = t < maxw and t or redis.call('ZCARD', q)
  else
    n = redis.call('ZCARD', q)
    created = n == 0
  end
  if n >= maxw and not redis.call('ZSCORE', q, id) then
    local all = redis.call('HGETALL', qi)
    for i = 1, #all, 2 do
      local exp = tonumber(string.match(all[i + 1], '^(%d+) '))
      if not exp or exp <= now_ms then q_drop(q, qi, all[i]) end
    end
    if redis.call('ZCARD', q) >= maxw then
      return redis.error_reply('RSQUEUE waiter queue full')
    end
  end
  redis.call('HSET', qi, id, info)
  redis.call('ZADD', q, 'NX', fmt(score), id)
  q_keep(q, qi, 2 * qlease, created)
  return nil
end

-- Wakes the client that made acquisition id "PUBLICID:N.SECRET" with msg: the one way every
-- script publishes a wake-up addressed to one waiter. base: the script's ARGV[5], the classic
-- channel prefix "PREFIX:client:"; key: one of the name's keys (they share its hash tag).
--   classic  PUBLISH base .. PUBLICID, on every server: a Redis Cluster copies it over its
--            bus to every node
--   sharded  an id "PUBLICID:sN.SECRET" (lib/hold.c) was made by a client of a Cluster whose
--            masters are all Redis >= 7.0 and listens with SSUBSCRIBE on the name's channel
--            "PREFIX:{TAG}:w:PUBLICID" (lib/notify_shard.c): SPUBLISH there, which stays in
--            the shard (one bus message per replica). The channel has the keys' hash tag, so
--            it is in the slot this script runs on. A node that refuses SPUBLISH (older than
--            7.0) gets the classic PUBLISH instead: the waiter listens on both.
-- The waiter, not the releaser, chooses, so clients configured differently (a forced
-- fallback, a library upgrade in progress) still wake each other.
local function wake(base, key, id, msg)
  local pub, n = string.match(id, '^([^:]+):(s?)')
  pub = pub or ''
  if n == 's' then
    local tag = string.match(key, '^[^{]*{[^}]*}')
    if tag then
      local r = redis.pcall('SPUBLISH', tag .. ':w:' .. pub, msg)
      if type(r) ~= 'table' or not r.err then return end
    end
  end
  redis.call('PUBLISH', base .. pub, msg)
end

-- An acquisition id is "PUBLICID:N.SECRET" (lib/hold.c); its route "PUBLICID:N" addresses a
-- message that must not be taken for a grant.
local function acq_route(id)
  return string.match(id, '^[^.]*')
end

-- ---- end of common.lua; the primitive's own script follows ----
