-- multilock.lua - the multilock's one-script path: several mutexes of one server taken in one
-- call, all or none. Run with EVALSHA by primitives/multilock/multilock.c when every part
-- lives on one client of a single server (or Sentinel's master); otherwise, or when this
-- call finds a part busy, the multilock takes its parts one by one in the global order
-- through mutex.lua. The holds granted here are ordinary mutex holds (mutex_grant in
-- core.lua: the very grant of mutex.lua), renewed and released by mutex.lua.
--
-- KEYS[3i-2] part i's lock hash, KEYS[3i-1] its fencing counter, KEYS[3i] its waiter queue
-- (the keys 1, 2 and 3 of mutex.lua)
-- ARGV[1] owner token (raw; only its SHA1 is stored)
-- ARGV[2] acquisition id, the same for every part (each part is a different lock)
-- ARGV[3] lease ms, the same for every part
--
-- Replies:
--   {1, fence1, ..., fenceN}  all granted (also on a retry of a call that granted them)
--   {0, i, ttlms}             part i is held, or has waiters queued (they go first): nothing
--                             was taken
--   {-1, i}                   this owner holds part i under another acquisition id
--
-- Every key is read before the first write (a read of a key of another type fails with
-- WRONGTYPE, and a script that fails half-way keeps its earlier writes), so a wrong key
-- anywhere leaves every part untouched.

local n = #KEYS / 3
local tokhash = redis.sha1hex(ARGV[1])
local prev, fences, mine = {}, {}, 0

for i = 1, n do
  local lock = KEYS[3 * i - 2]
  local h = redis.call('HMGET', lock, 'o', 'a', 'r', 'f')
  redis.call('GET', KEYS[3 * i - 1])
  local queued = redis.call('ZCARD', KEYS[3 * i])
  if h[1] == tokhash then
    if h[2] ~= ARGV[2] then return {-1, i} end
    mine = mine + 1
    fences[i] = h[4]
  elseif h[1] then
    return {0, i, redis.call('PTTL', lock)}
  elseif queued > 0 then
    return {0, i, 0}
  end
  prev[i] = mutex_released(h)
end

if mine == n then
  local out = {1}
  for i = 1, n do out[i + 1] = fences[i] end
  return out
end
if mine > 0 then
  -- some parts ours under this id but not all: not a retry of a call that took them all
  for i = 1, n do
    if fences[i] then return {-1, i} end
  end
end

local _, now_us = clock()
local out = {1}
for i = 1, n do
  out[i + 1] = mutex_grant(KEYS[3 * i - 2], KEYS[3 * i - 1], tokhash, ARGV[2], ARGV[3], now_us,
                           prev[i])
end
return out
