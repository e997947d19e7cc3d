-- latch.lua - the distributed countdown latch: a count that opens the latch when it reaches
-- 0; the opening wakes every waiting client with one PUBLISH on the latch's own channel.
-- Run with EVALSHA by primitives/latch/latch.c. See docs/latch.md for the protocol.
--
-- KEYS[1] latch  hash   n = count left, c = count of the latest arming, o = openings so far.
--                       Its name is also the channel each opening is published on.
--                       TTL: ARGV[10], set again by every call that finds it.
-- KEYS[2] ids    zset   call id -> server time (ms) it was applied, for count-downs and
--                       rearms: a call sent again after a lost reply is recognised and not
--                       applied twice. Ids older than ARGV[11] ms are pruned. Same TTL.
--
-- ARGV follows the convention of every redisync script (lib/handle.c); the latch uses
-- ARGV[1] op: init | down | get | rearm | info | force
-- ARGV[3] call id "PUBLICID:N" (down, rearm), fresh for every call, the same for its resends
-- ARGV[9] count (init, rearm)
-- ARGV[10] TTL ms of both keys (refreshed by every call that finds the latch)
-- ARGV[11] how long call ids are remembered, ms
-- (ARGV[2] owner token, [4] lease, [5] channel prefix, [6..8] queue settings: unused)
--
-- Replies:
--   init   {1, n} armed now with n = count; {0, n} it was armed already and keeps its count n
--          (a late init never closes an opened latch); {0, -1} not armed and count 0
--   down   the count after the call (>= 0): one less, or 0 when it was 0 already, or the
--          current count when this call id was applied before; -1 never armed (or expired)
--   get    {1, n, o} armed; {0, 0, 0} never armed (or expired)
--   rearm  the count after the call: count, or the current count when this call id was
--          applied before
--
-- Every write comes after the type checks (a failing script keeps its earlier writes), and
-- a count-down records its call id before it changes the count (under noeviction a script
-- is refused at its first allocating write, so a refused call changes nothing). Time comes
-- only from the server (TIME).

local op = ARGV[1]

-- The helpers of primitives/common.lua (fmt, clock, wrong_type, ...) come before this text.
local function check_types()
  return wrong_type({'hash', 'zset'}, 'latch')
end

-- A non-negative integer argument, or nil.
local function whole(s)
  local v = tonumber(s)
  if v and v >= 0 and v == math.floor(v) then return v end
  return nil
end

local err = check_types()
if err then return err end

local ttl, window = whole(ARGV[10]), whole(ARGV[11])
if (not ttl or ttl < 1 or not window) and op ~= 'info' and op ~= 'force' then
  return redis.error_reply('ERR redisync latch: bad TTL or id window')
end

-- Activity: both keys live another TTL (PEXPIRE of a missing key does nothing).
local function touch()
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end

local function now_ms()
  return (clock())
end

-- true if call id was applied before; otherwise records it (dropping ids past the window)
-- and returns false.
local function seen(id)
  if redis.call('ZSCORE', KEYS[2], id) then return true end
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now - window))
  redis.call('ZADD', KEYS[2], string.format('%d', now), id)
  return false
end

local n = tonumber(redis.call('HGET', KEYS[1], 'n'))

if op == 'get' then
  if not n then return {0, 0, 0} end
  touch()
  return {1, n, tonumber(redis.call('HGET', KEYS[1], 'o')) or 0}
end

if op == 'info' then
  -- the inspection reply shared by every script (primitives/inspect.c); read-only
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 and 1 or 0
  return {exists, 0, -1, '0', 0, 0, -1, -1, n or -1}
end

if op == 'force' then
  -- operators: open a stuck latch (as the last count-down would); 1 if it was closed
  if not n or n == 0 then return 0 end
  redis.call('HSET', KEYS[1], 'n', '0')
  local o = redis.call('HINCRBY', KEYS[1], 'o', 1)
  redis.call('PUBLISH', KEYS[1], string.format('%d', o))
  if ttl and ttl > 0 then touch() end
  return 1
end

if op == 'down' then
  if not n then return -1 end
  if not seen(ARGV[3]) and n > 0 then
    n = n - 1
    redis.call('HSET', KEYS[1], 'n', string.format('%d', n))
    if n == 0 then
      local o = redis.call('HINCRBY', KEYS[1], 'o', 1)
      redis.call('PUBLISH', KEYS[1], string.format('%d', o))
    end
  end
  touch()
  return n
end

if op == 'init' or op == 'rearm' then
  local count = whole(ARGV[9])
  if not count or (op == 'rearm' and count < 1) then
    return redis.error_reply('ERR redisync latch: bad count')
  end
  if op == 'init' then
    if n then
      touch()
      return {0, n}
    end
    if count == 0 then return {0, -1} end
  elseif seen(ARGV[3]) then
    touch()
    return n or 0
  end
  local s = string.format('%d', count)
  redis.call('HSET', KEYS[1], 'n', s, 'c', s)
  redis.call('HSETNX', KEYS[1], 'o', '0')
  touch()
  if op == 'init' then return {1, count} end
  return count
end

return redis.error_reply('ERR redisync latch: unknown op ' .. tostring(op))
