-- cond.lua - the condition variable (pthread_cond_t across processes): a FIFO queue of
-- waiters, each entry a lease of its own renewed by its waiter's watchdog; signal wakes the
-- longest-waiting live waiter with one message on its client's channel, broadcast every
-- waiter queued at the call with one message per waiting client. Run with EVALSHA by
-- primitives/cond/cond.c. The mutex the waiters release and re-acquire is never touched
-- here (its keys may live on another Cluster slot). See docs/scripts.md, "cond.lua".
--
-- KEYS[1] queue  zset   acquisition id -> arrival number (FIFO order); the main key
--                       PREFIX:{NAME}:cond, so rs_list finds a condition while someone waits
-- KEYS[2] qinfo  hash   acquisition id -> "EXPIRYMS LEASEMS TOKENHASH" (the entry's lease)
-- Both keys live 2 x the entry lease after the last enqueue or renewal (extend_lazily); a
-- condition nobody waits on has no keys at all.
--
-- ARGV[1] op: wait | qrenew | leave | signal | broadcast | info | force
-- ARGV[2] owner token (raw; only its SHA1 is stored)
-- ARGV[3] acquisition id "PUBLICID:N.SECRET" of the wait (wait, qrenew, leave)
-- ARGV[5] channel prefix, e.g. "rs:client:" (signal, broadcast)
-- ARGV[7] (wait) max waiters
-- ARGV[8] (wait, qrenew) queue entry lease ms
--
-- Replies:
--   wait       1 queued at the tail (a retry refreshes the entry, in its place); error
--              "RSQUEUE ..." when the queue is full
--   qrenew     1 entry renewed (still waiting), 0 entry gone (signalled, or its lease ran out
--              and a signal skipped it)
--   leave      1 the entry was still queued and is removed (not signalled), 0 it was gone
--              (a signal or broadcast took it: the waiter was woken)
--   signal     1 the first live entry was removed and "ACQID s" sent to its client (wake()
--              of common.lua: its client channel, or in a Cluster with sharded wake-ups the
--              name's sharded channel of that client); 0 nobody (live) waits. Expired
--              entries on the way are dropped.
--   broadcast  the number of live entries woken: all entries are removed, and each client
--              with live entries gets one message "* ACQID1 ACQID2 ..." (one wake())
--   info       {exists, 0, -1, 0, waiters, 0, -1, -1, -1}
--   force      operators: a broadcast; 0 (a condition holds nothing)
--
-- Every key is read before the script first writes (wait and leave check both types; signal
-- and broadcast read both keys before their first write); time only from TIME.

local op = ARGV[1]

-- @common

-- signal first, before the helpers only the other ops use (every `local function` is a
-- closure made anew on each call). The queue's head is read before the clock: with nobody
-- waiting, one call. clock() is not the last argument of q_live_head: it returns two values,
-- and the second (server us) would become q_live_head's `first`, a head id that cannot
-- exist, read and dropped on every signal (HGET, ZREM, HDEL: until e7cc10b, 10 calls and
-- 92,400 server instructions per signal; 6 calls and 73,200 now: bench/instr/instr.py --cond).
if op == 'signal' then
  local first = redis.call('ZRANGE', KEYS[1], '0', '0')[1]
  if not first then return 0 end
  local head = q_live_head(KEYS[1], KEYS[2], clock(), first)
  if not head then return 0 end
  q_drop(KEYS[1], KEYS[2], head)
  wake(ARGV[5], KEYS[1], head, head .. ' s')
  return 1
end

local function wrong()
  return wrong_type({'zset', 'hash'}, 'cond')
end

local function entry(now_ms)
  return fmt(now_ms + tonumber(ARGV[8])) .. ' ' .. ARGV[8] .. ' ' .. redis.sha1hex(ARGV[2])
end

-- Wakes every live waiter: one message per client channel naming all its waiters.
local function broadcast()
  local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
  if #ids == 0 then return 0 end
  local all = redis.call('HGETALL', KEYS[2])
  local exp = {}
  for i = 1, #all, 2 do exp[all[i]] = tonumber(string.match(all[i + 1], '^(%d+) ')) end
  local now_ms = clock()
  -- grouped by client and way of waking ("PUBLICID:" or "PUBLICID:s": wake() in common.lua
  -- picks the channel from the id, the same for every id of the group)
  local groups, order, n = {}, {}, 0
  for i = 1, #ids do
    local e = exp[ids[i]]
    if e and e > now_ms then
      local gk = string.match(ids[i], '^[^:]*:s?') or ''
      if not groups[gk] then
        groups[gk] = {}
        order[#order + 1] = gk
      end
      local g = groups[gk]
      g[#g + 1] = ids[i]
      n = n + 1
    end
  end
  redis.call('DEL', KEYS[1], KEYS[2])
  for i = 1, #order do
    local g = groups[order[i]]
    wake(ARGV[5], KEYS[1], g[1], '* ' .. table.concat(g, ' '))
  end
  return n
end

if op == 'broadcast' then
  return broadcast()
end

if op == 'wait' then
  local err = wrong()
  if err then return err end
  local now_ms = clock()
  local e = q_add(KEYS[1], KEYS[2], ARGV[3], entry(now_ms), tonumber(ARGV[7]),
                  tonumber(ARGV[8]), now_ms)
  if e then return e end
  return 1
end

if op == 'qrenew' then
  if not redis.call('ZSCORE', KEYS[1], ARGV[3]) then return 0 end
  redis.call('HGET', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[3], entry(clock()))
  extend_lazily(KEYS[1], 2 * tonumber(ARGV[8]))
  extend_lazily(KEYS[2], 2 * tonumber(ARGV[8]))
  return 1
end

if op == 'leave' then
  local err = wrong()
  if err then return err end
  local was = redis.call('ZREM', KEYS[1], ARGV[3])
  redis.call('HDEL', KEYS[2], ARGV[3])
  return was
end

if op == 'info' then
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 and 1 or 0
  return {exists, 0, -1, 0, redis.call('ZCARD', KEYS[1]), 0, -1, -1, -1}
end

if op == 'force' then
  broadcast()
  return 0
end

return redis.error_reply('ERR redisync cond: unknown op ' .. tostring(op))
