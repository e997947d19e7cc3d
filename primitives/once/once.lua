-- once.lua - the fleet-wide pthread_once: fn runs in one caller at a time, under a leased
-- run hold, until a run succeeds; then everyone is done for 30 days after the last use. Run
-- with EVALSHA by primitives/once/once.c. See docs/scripts.md, "once.lua".
--
-- KEYS[1] done   string the fencing token of the run that succeeded (30 days after last use);
--                       the main key PREFIX:{NAME}:once, so rs_list finds a once that is done
-- KEYS[2] run    hash   the run hold: o = SHA1(owner token), a = acquisition id, f = fencing
--                       token, r = id of the last released run (a retried release), n, e (the
--                       mutex's layout, core.lua mutex_grant). Its TTL is the runner's lease.
-- KEYS[3] fence  string the per-name fencing counter (30-day TTL, set again daily on use)
-- KEYS[4] queue  zset   acquisition id -> arrival number (FIFO order of the waiters)
-- KEYS[5] qinfo  hash   acquisition id -> "EXPIRYMS LEASEMS TOKENHASH" (a waiter's entry lease)
--
-- ARGV[1] op: acq | renew | rel | done | qrenew | cancel | state | reset | info | force
-- ARGV[2] owner token (raw; only its SHA1 is stored)
-- ARGV[3] acquisition id "PUBLICID:N.SECRET" (wake-ups: wake() in common.lua)
-- ARGV[4] lease ms
-- ARGV[5] channel prefix, e.g. "rs:client:"
-- ARGV[6] (acq) "q": queue when busy, "t": try only
-- ARGV[7] (acq) max waiters
-- ARGV[8] (acq, qrenew) queue entry lease ms
--
-- Replies:
--   acq     {2} done already (the mark's TTL is refreshed); {1, fence, ttlms} the run hold is
--           this caller's (also when it was already granted to this id); {0, holder_ttlms,
--           queued, fence_counter} someone runs fn now; error "RSQUEUE ..." queue full
--   renew   1 renewed, 0 not ours any more
--   rel     1 released: fn failed, the run hold goes to the first live waiter ("ACQID FENCE"
--           on its client channel), who runs fn next; also 1 for a retried release; 0 lost
--   done    1 fn succeeded: the done mark is set, the run hold freed, and every queued waiter
--           is told "ROUTE retry" (its next acq answers {2}); 1 for a retried done; 0 the
--           run hold was lost before (the mark is not set: the next runner runs fn)
--   qrenew  1 entry renewed, 2 the run hold was handed to this id meanwhile, 0 entry gone
--   cancel  {1, fence, ttlms} it was handed to this id (keep it); {2} done; {0} left the queue
--   state   1 done (TTL refreshed), 0 not yet
--   reset   1 the done mark was removed (operators), 0 there was none
--   info    {exists, nholders, ttl, fence, waiters, 0, -1, -1, done, holder...}
--   force   operators: drops the current run hold and hands it to the first live waiter
--
-- Every key is read before the script first writes; time only from TIME.

local op = ARGV[1]
local DONE_TTL = 2592000000 -- 30 days

-- The helpers of primitives/core.lua come before this text.

-- @common
-- The helpers of primitives/common.lua (q_*, wake, acq_route) come here.

local tokhash = redis.sha1hex(ARGV[2])

local function is_done()
  local d = redis.call('GET', KEYS[1])
  if d then redis.call('PEXPIRE', KEYS[1], DONE_TTL) end
  return d
end

-- Hands the free run hold to the first live waiter, who runs fn next; true if someone got it.
local function hand_to_head(now_ms, now_us, prev)
  local head, info = q_live_head(KEYS[4], KEYS[5], now_ms)
  if not head then return false end
  local _, lease, tok = string.match(info, '^(%d+) (%d+) (%x+)$')
  local f = mutex_grant(KEYS[2], KEYS[3], tok, head, lease, now_us, prev)
  q_drop(KEYS[4], KEYS[5], head)
  wake(ARGV[5], KEYS[1], head, head .. ' ' .. f)
  return true
end

-- Frees the run hold (checks done); the released id stays as the tombstone for a retry.
local function free_run()
  redis.call('HDEL', KEYS[2], 'o', 'n', 'e')
  if redis.call('PTTL', KEYS[2]) < 10000 then redis.call('PEXPIRE', KEYS[2], 10000) end
end

local function qinfo(now_ms)
  return fmt(now_ms + tonumber(ARGV[8])) .. ' ' .. ARGV[4] .. ' ' .. tokhash
end

local function wrong()
  return wrong_type({'string', 'hash', 'string', 'zset', 'hash'}, 'once')
end

local h = redis.call('HMGET', KEYS[2], 'o', 'a', 'r')
local mine = h[1] == tokhash and h[2] == ARGV[3]

if op == 'acq' then
  local err = wrong()
  if err then return err end
  if is_done() then return {2} end
  if mine then return {1, redis.call('HGET', KEYS[2], 'f'), redis.call('PTTL', KEYS[2])} end
  local now_ms, now_us = clock()
  if not h[1] then
    local head = q_live_head(KEYS[4], KEYS[5], now_ms)
    if not head or head == ARGV[3] then
      local f = mutex_grant(KEYS[2], KEYS[3], tokhash, ARGV[3], ARGV[4], now_us,
                            mutex_released(h))
      if head then q_drop(KEYS[4], KEYS[5], head) end
      return {1, f, tonumber(ARGV[4])}
    end
    hand_to_head(now_ms, now_us, mutex_released(h))
  end
  local ttl = redis.call('PTTL', KEYS[2])
  local seen = redis.call('GET', KEYS[3]) or '0'
  if string.sub(ARGV[6] or '', 1, 1) ~= 'q' then return {0, ttl, 0, seen} end
  local e = q_add(KEYS[4], KEYS[5], ARGV[3], qinfo(now_ms), tonumber(ARGV[7]),
                  tonumber(ARGV[8]), now_ms)
  if e then return e end
  return {0, ttl, 1, seen}
end

if op == 'renew' then
  if mine then
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
    return 1
  end
  return 0
end

if op == 'rel' then
  if mine then
    local now_ms, now_us = clock()
    if not hand_to_head(now_ms, now_us, ARGV[3]) then free_run() end
    return 1
  end
  if (not h[1] and h[2] == ARGV[3]) or h[3] == ARGV[3] then return 1 end
  return 0
end

if op == 'done' then
  local err = wrong()
  if err then return err end
  local d = redis.call('GET', KEYS[1])
  if not mine then
    -- a retried done: the mark is there and this id's run is the tombstone
    if d and ((not h[1] and h[2] == ARGV[3]) or h[3] == ARGV[3]) then return 1 end
    return 0
  end
  redis.call('SET', KEYS[1], redis.call('HGET', KEYS[2], 'f'), 'PX', DONE_TTL)
  free_run()
  -- everyone who waits is done too: one retry message each, then the queue goes
  local ids = redis.call('ZRANGE', KEYS[4], 0, -1)
  for i = 1, #ids do
    wake(ARGV[5], KEYS[1], ids[i], acq_route(ids[i]) .. ' retry')
  end
  redis.call('DEL', KEYS[4], KEYS[5])
  return 1
end

if op == 'qrenew' then
  if mine then return 2 end
  local info = redis.call('HGET', KEYS[5], ARGV[3])
  if not info then return 0 end
  local now_ms = clock()
  redis.call('HSET', KEYS[5], ARGV[3], qinfo(now_ms))
  q_keep(KEYS[4], KEYS[5], 2 * tonumber(ARGV[8]))
  return 1
end

if op == 'cancel' then
  local err = wrong()
  if err then return err end
  if mine then return {1, redis.call('HGET', KEYS[2], 'f'), redis.call('PTTL', KEYS[2])} end
  q_drop(KEYS[4], KEYS[5], ARGV[3])
  if redis.call('EXISTS', KEYS[1]) == 1 then return {2} end
  if not h[1] then
    local now_ms, now_us = clock()
    hand_to_head(now_ms, now_us, mutex_released(h))
  end
  return {0}
end

if op == 'state' then
  local err = wrong()
  if err then return err end
  return is_done() and 1 or 0
end

if op == 'reset' then
  local err = wrong()
  if err then return err end
  return redis.call('DEL', KEYS[1])
end

if op == 'info' then
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]) > 0 and 1 or 0
  local fence = redis.call('HGET', KEYS[2], 'f') or redis.call('GET', KEYS[3]) or '0'
  local waiters = redis.call('ZCARD', KEYS[4])
  local done = redis.call('EXISTS', KEYS[1])
  if not h[1] then return {exists, 0, -1, fence, waiters, 0, -1, -1, done} end
  return {exists, 1, redis.call('PTTL', KEYS[2]), fence, waiters, 1, -1, -1, done, h[2]}
end

if op == 'force' then
  if not h[1] then return 0 end
  redis.call('DEL', KEYS[2])
  local now_ms, now_us = clock()
  hand_to_head(now_ms, now_us, '')
  return 1
end

return redis.error_reply('ERR redisync once: unknown op ' .. tostring(op))
