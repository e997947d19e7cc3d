-- barrier.lua - the cyclic barrier (pthread_barrier_t across processes): a generation trips
-- when its parties have all arrived; the call that completes it is the serial one, and one
-- PUBLISH on the barrier's own channel wakes every client's waiters. Run with EVALSHA by
-- primitives/barrier/barrier.c. See docs/scripts.md, "barrier.lua".
--
-- KEYS[1] barrier hash   n = parties, g = the current generation (0, 1, ...); also the
--                        channel the trips are published on
-- KEYS[2] in      set    acquisition ids arrived in the current generation
-- KEYS[3] out     hash   acquisition id -> "GEN SERIAL" for the arrivals of tripped
--                        generations (a retried arrive or a late withdraw learns it was
--                        counted), kept for ARGV[11] ms after the last trip
--
-- ARGV[1] op: init | arrive | get | withdraw | info
-- ARGV[3] acquisition id of the arrival (arrive, withdraw)
-- ARGV[9] parties (init, arrive)
-- ARGV[10] TTL of the keys, ms (refreshed by every call that finds the barrier)
-- ARGV[11] how long a tripped arrival is remembered, ms
--
-- Replies:
--   init      {n, g}; error "RSINVAL ..." when the barrier has another number of parties
--   arrive    {1, g} this call tripped generation g (the serial one); {0, g} arrived in
--             generation g, which has not tripped; {2, g, serial} a retried arrival of a
--             generation that tripped; error "RSNOENT" when the barrier does not exist
--   get       the current generation (-1 when the barrier does not exist)
--   withdraw  1 withdrawn (the generation goes on without it); {2, serial} it was counted
--             in a generation that tripped (as {2, g, serial} of arrive); 0 not found
--   info      {exists, 0, -1, 0, arrived, 0, -1, -1, parties}
--
-- Every key is read before the script first writes (wrong_type); time is not used.

local op = ARGV[1]

-- @common

local function wrong()
  return wrong_type({'hash', 'set', 'hash'}, 'barrier')
end

local function refresh()
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[10]) end
end

local function tripped(id)
  local v = redis.call('HGET', KEYS[3], id)
  if not v then return nil end
  local g, s = string.match(v, '^(%d+) (%d)$')
  return tonumber(g), tonumber(s)
end

if op == 'init' then
  local err = wrong()
  if err then return err end
  local b = redis.call('HMGET', KEYS[1], 'n', 'g')
  local n = tonumber(b[1])
  if n and n ~= tonumber(ARGV[9]) then
    return redis.error_reply('RSINVAL barrier has ' .. fmt(n) .. ' parties, not ' .. ARGV[9])
  end
  if not n then
    redis.call('HSET', KEYS[1], 'n', ARGV[9], 'g', 0)
    b[2] = '0'
  end
  refresh()
  return {tonumber(ARGV[9]), tonumber(b[2])}
end

if op == 'arrive' then
  local err = wrong()
  if err then return err end
  local b = redis.call('HMGET', KEYS[1], 'n', 'g')
  local n, g = tonumber(b[1]), tonumber(b[2])
  if not n then return redis.error_reply('RSNOENT barrier does not exist') end
  local tg, ts = tripped(ARGV[3])
  if tg then return {2, tg, ts} end
  if redis.call('SISMEMBER', KEYS[2], ARGV[3]) == 1 then
    refresh()
    return {0, g}
  end
  redis.call('SADD', KEYS[2], ARGV[3])
  if redis.call('SCARD', KEYS[2]) < n then
    refresh()
    return {0, g}
  end
  -- the generation trips: its arrivals are remembered, the next one starts empty
  local ids = redis.call('SMEMBERS', KEYS[2])
  for i = 1, #ids do
    redis.call('HSET', KEYS[3], ids[i], fmt(g) .. (ids[i] == ARGV[3] and ' 1' or ' 0'))
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[11])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'g', g + 1)
  refresh()
  redis.call('PUBLISH', KEYS[1], fmt(g + 1))
  return {1, g}
end

if op == 'get' then
  local g = redis.call('HGET', KEYS[1], 'g')
  if not g then return -1 end
  refresh()
  return tonumber(g)
end

if op == 'withdraw' then
  local err = wrong()
  if err then return err end
  if redis.call('SREM', KEYS[2], ARGV[3]) == 1 then return 1 end
  local tg, ts = tripped(ARGV[3])
  if tg then return {2, ts} end
  return 0
end

if op == 'info' then
  local b = redis.call('HMGET', KEYS[1], 'n', 'g')
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 and 1 or 0
  return {exists, 0, -1, 0, redis.call('SCARD', KEYS[2]), 0, -1, -1, tonumber(b[1]) or -1}
end

return redis.error_reply('ERR redisync barrier: unknown op ' .. tostring(op))
