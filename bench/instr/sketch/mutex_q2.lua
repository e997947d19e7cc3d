-- mutex_q2.lua - a MEASUREMENT SKETCH of the queue layout of docs/performance.md ("The queue
-- folded into the zset", issue 15), not used by the library and not wired to its keys or
-- tests: `python3 bench/instr/instr.py --only mutex --script mutex=bench/instr/sketch/mutex_q2.lua`
-- counts what it would cost. Only the paths the harness runs are adapted (acq, rel, renew
-- without Redlock, and qrenew); Redlock, cancel, force and info still read the layout of
-- primitives/mutex/mutex.lua and are wrong here.
--
-- KEYS[3] queue  zset   "ACQID LEASEMS QLEASEMS TOKENHASH" -> join time (server us, strictly
--                       rising: max(TIME, tail + 1)); a waiter rebuilds its member from its
--                       own arguments (retried join: ZADD NX; qrenew; cancel)
-- KEYS[4] qinfo  hash   acquisition id -> "EXPIRYMS", only for entries renewed past a third
--                       of their queue lease (an entry is live while join + qlease or this
--                       expiry is ahead), so a handover of a younger head neither reads nor
--                       deletes it
-- KEYS[1] lock   hash   as mutex.lua, plus d = the grant's lease end (server ms): a lower
--                       bound of the hold's end (renewals only move it later), which a busy
--                       acq answers with instead of a PTTL while it is ahead
local op = ARGV[1]
local mode = ARGV[6] or ''
local redlock = string.sub(mode, 2, 2) == 'r'

-- The helpers of primitives/core.lua (fmt, clock, extend_lazily, next_fence, mutex_released,
-- mutex_grant) come before this text.

-- Frees the lock (its checks done). The released hold's 'a', 'f' and 'r' stay as its
-- tombstone: 'a' names the released id, so that a retry of the release is not taken for a
-- loss, for the rest of the lease and at least 10 s. One write that frees memory and
-- allocates none (a release never fails under noeviction), instead of three. Made only for
-- rel: every `local function` is a closure made anew on each call (about 800 instructions
-- of the server's, docs/performance.md), so helpers a call does not need are not made.
local release_free
if op == 'rel' then
  function release_free()
    redis.call('HDEL', KEYS[1], 'o', 'n', 'e', 'u')
    if redis.call('PTTL', KEYS[1]) < 10000 then redis.call('PEXPIRE', KEYS[1], '10000') end
  end
end

-- The uncontended acquire and release, first and in as few calls as possible: the lock free
-- and nobody queued, or ours and nobody to hand it to. They return before the helpers below
-- are defined (docs/performance.md, "Uncontended cost per primitive"). Their reads check
-- every key they write; anything else falls through, with the hold's fields read (h: o, a,
-- r, and for acq f, the hold's fencing token, which a busy acq answers with).
-- the sketch's grant: mutex_grant plus 'd'
local function grant2(tokhash, acq, lease, now_ms, now_us, prev)
  local f = next_fence(KEYS[2], now_us)
  redis.call('HSET', KEYS[1], 'o', tokhash, 'a', acq, 'f', f, 'r', prev or '', 'n', '1', 'e', '',
             'd', fmt(now_ms + tonumber(lease)))
  redis.call('PEXPIRE', KEYS[1], lease)
  return f
end

local h, first, first_s -- first, first_s: the queue's first member and score, if read
local th -- SHA1 of the owner token, once computed (about 6,000 server instructions a time)
if (op == 'acq' or op == 'rel') and not redlock then
  if op == 'acq' then
    h = redis.call('HMGET', KEYS[1], 'o', 'a', 'r', 'f', 'd')
  else
    h = redis.call('HMGET', KEYS[1], 'o', 'a', 'r')
  end
  if op == 'acq' and not h[1] and redis.call('ZCARD', KEYS[3]) == 0 then
    local now_ms, now_us = clock()
    local f = grant2(redis.sha1hex(ARGV[2]), ARGV[3], ARGV[4], now_ms, now_us, mutex_released(h))
    return {1, f, tonumber(ARGV[4])}
  end
  if op == 'rel' and h[2] == ARGV[3] then th = redis.sha1hex(ARGV[2]) end
  if op == 'rel' and h[2] == ARGV[3] and h[1] == th then
    -- the queue's head, which a handover (below) starts from
    local fr = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
    first, first_s = fr[1], fr[2]
    if not first then
      release_free()
      return 1
    end
  end
end

-- Redlock: raises the fencing counter to the holder's token ARGV[10], if given.
local raise_fence
if redlock then
  function raise_fence()
    local floor = tonumber(ARGV[10])
    if not floor then return end
    if (tonumber(redis.call('GET', KEYS[2])) or 0) < floor then
      redis.call('SET', KEYS[2], fmt(floor), 'PX', FENCE_TTL)
    end
  end
end

-- The holder's renewal (the watchdog's, every lease/3 of every hold) needs none of the
-- helpers below, so it comes before them.
if op == 'renew' then
  local h = redis.call('HMGET', KEYS[1], 'o', 'a')
  if h[1] == redis.sha1hex(ARGV[2]) and h[2] == ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    if redlock then raise_fence() end
    return 1
  end
  return 0
end

-- @common
-- The helpers of primitives/common.lua (q_*, wake, acq_route) come here.

-- mutex_grant() is the first writer of every path that reaches it, so next_fence's SET ...
-- GET also checks the counter's type before anything is written. The helpers are called
-- with the keys directly (a wrapper per helper would be one more closure per call).

-- Hands the free lock to the first live waiter and wakes it with one message on its own
-- client's channel. Returns the new holder's fencing token, or nil if nobody live waits.
-- now_ms may be nil (read TIME only when someone waits: the common release has an empty
-- queue). first_id: the queue's first id if the caller read it (the fast release's ZRANGE),
-- else nil; head, info: the first live waiter and its entry, if the caller found them.
local function q2_parse(m)
  return string.match(m, '^(%S+) (%d+) (%d+) (%x+)$')
end

-- whether the entry (member m, join score sc) may have a renewal record: renewals write one
-- only from a third of the queue lease on (qrenew below)
local function q2_old(sc, ql, now_ms)
  return 3 * (now_ms - math.floor(tonumber(sc) / 1000)) >= ql
end

local function q2_drop(m, sc, now_ms)
  redis.call('ZREM', KEYS[3], m)
  local id, _, ql = q2_parse(m)
  if id and q2_old(sc, tonumber(ql), now_ms) then redis.call('HDEL', KEYS[4], id) end
end

-- the first live entry: id, lease, token, member, score (dead ones removed on the way)
local function q2_head(now_ms, m, sc)
  while true do
    if not m then
      local r = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
      m, sc = r[1], r[2]
      if not m then return nil end
    end
    local id, lease, ql, tok = q2_parse(m)
    if id then
      ql = tonumber(ql)
      local live = math.floor(tonumber(sc) / 1000) + ql > now_ms
      if not live and q2_old(sc, ql, now_ms) then
        live = (tonumber(redis.call('HGET', KEYS[4], id)) or 0) > now_ms
      end
      if live then return id, lease, tok, m, sc end
    end
    q2_drop(m, sc, now_ms)
    m, sc = nil, nil
  end
end

local function hand_to_head(now_ms, now_us, prev, m, sc)
  if not now_ms then
    if not m then
      local r = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
      m, sc = r[1], r[2]
      if not m then return nil end
    end
    now_ms, now_us = clock()
  end
  local head, lease, tok, hm, hs = q2_head(now_ms, m, sc)
  if not head then return nil end
  local f = grant2(tok, head, lease, now_ms, now_us, prev)
  q2_drop(hm, hs, now_ms)
  wake(ARGV[5], KEYS[1], head, head .. ' ' .. f)
  return f
end

-- Redlock: wakes the first live waiter with "ACQID retry" (no handoff), and reserves the free
-- lock for it for a short while (fields 'w' = its id, 'x' = server ms the reservation ends):
-- until then a free lock is busy for anyone else, so a releaser that relocks at once does not
-- take it back before the woken waiter's retry arrives (barging starved waiters). The
-- reservation is lease/10 of the waiter's queue lease, 20 to 500 ms. Past it the free lock
-- still goes only to the first live waiter (acq), which is the woken one unless its entry
-- lapsed or it left: a waiter that died costs this master until its entry's lease runs out,
-- as on one server.
local wake_head
if redlock then
  function wake_head(now_ms)
    if not now_ms then
      if redis.call('ZCARD', KEYS[3]) == 0 then return end
      now_ms = clock()
    end
    local head, info = q_live_head(KEYS[3], KEYS[4], now_ms)
    if not head then return end
    local r = math.floor(tonumber(string.match(info, '^%d+ (%d+) ')) / 10)
    if r < 20 then r = 20 elseif r > 500 then r = 500 end
    redis.call('HSET', KEYS[1], 'w', head, 'x', fmt(now_ms + r))
    if redis.call('PTTL', KEYS[1]) < 10000 then redis.call('PEXPIRE', KEYS[1], '10000') end
    wake(ARGV[5], KEYS[1], head, acq_route(head) .. ' retry')
  end
end

-- qinfo, enqueue: made only for the ops that queue (acq, qrenew)
local qinfo, enqueue
if op == 'acq' or op == 'qrenew' then
  function qinfo(tokhash, now_ms)
    return fmt(now_ms + tonumber(ARGV[8])) .. ' ' .. ARGV[4] .. ' ' .. tokhash
  end

  -- Under Redlock a waiter's place is its ticket ARGV[9], the same on every master, so that
  -- the masters' queues agree on whom a release wakes (arrival order differs from master to
  -- master, and a rotation of it made every release reserve each master for another waiter:
  -- a split vote at every handoff)
  function enqueue(tokhash, now_ms, now_us)
    local last = redis.call('ZRANGE', KEYS[3], '-1', '-1', 'WITHSCORES')
    local t = tonumber(last[2])
    local score = now_us
    if t and t >= score then score = t + 1 end
    if last[1] and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then
      return redis.error_reply('RSQUEUE waiter queue full') -- (the sketch does not sweep)
    end
    redis.call('ZADD', KEYS[3], 'NX', fmt(score),
               ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[8] .. ' ' .. tokhash)
    local ql = tonumber(ARGV[8])
    if not last[1] or redis.call('PTTL', KEYS[3]) < 2 * ql then
      local x = fmt(3 * ql)
      redis.call('PEXPIRE', KEYS[3], x)
      redis.call('PEXPIRE', KEYS[4], x)
    end
  end
end

local tokhash = th or redis.sha1hex(ARGV[2])

-- Redlock: the attempt's number (ARGV[11]), or nil
local attempt = redlock and ARGV[11] ~= '' and ARGV[11] or nil
local stamp -- writes the attempt's number into the hold; made only when there is one
if attempt then
  function stamp()
    redis.call('HSET', KEYS[1], 'u', attempt)
  end
end


if op == 'qrenew' and not redlock then
  local now_ms = clock()
  local ql = tonumber(ARGV[8])
  local sc = redis.call('ZSCORE', KEYS[3], ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[8] .. ' ' ..
                        tokhash)
  if not sc then
    local h2 = redis.call('HMGET', KEYS[1], 'o', 'a')
    if h2[1] == tokhash and h2[2] == ARGV[3] then return 2 end
    return 0
  end
  if q2_old(sc, ql, now_ms) then redis.call('HSET', KEYS[4], ARGV[3], fmt(now_ms + ql)) end
  if redis.call('PTTL', KEYS[3]) < 2 * ql then
    redis.call('PEXPIRE', KEYS[3], fmt(3 * ql))
    redis.call('PEXPIRE', KEYS[4], fmt(3 * ql))
  end
  return 1
end

if op == 'qrenew' then
  -- Redlock: a granted waiter keeps its queue entry until its release (acq below), so the
  -- lock is asked first
  local h = redis.call('HMGET', KEYS[1], 'o', 'a')
  if h[1] == tokhash and h[2] == ARGV[3] then return 2 end
  local info = redis.call('HGET', KEYS[4], ARGV[3])
  if not info then return 0 end
  local now_ms = clock()
  redis.call('HSET', KEYS[4], ARGV[3], qinfo(tokhash, now_ms))
  q_keep(KEYS[3], KEYS[4], 2 * tonumber(ARGV[8]))
  return 1
end

-- the hold's fields; h[4], 'f', is the fencing token of the hold, or of the released hold
-- while the tombstone lasts
h = h or redis.call('HMGET', KEYS[1], 'o', 'a', 'r', 'f')

if op == 'acq' then
  if h[1] == tokhash then
    if h[2] == ARGV[3] then
      if redlock then
        -- an earlier attempt's grant whose reply was lost or late: this attempt's now, with
        -- a whole lease (left as it was, its few ms left would expire before the renewal
        -- crosses a slow link, and the quorum with it)
        if stamp then stamp() end
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        return {1, h[4], tonumber(ARGV[4])}
      end
      return {1, h[4], redis.call('PTTL', KEYS[1])}
    end
    local m1 = string.sub(mode, 1, 1)
    if m1 ~= 'Q' and m1 ~= 'T' then return {-1} end
    -- the orphan becomes this acquisition's hold, with a fresh token and lease
    local _, now_us = clock()
    local f = mutex_grant(KEYS[1], KEYS[2], tokhash, ARGV[3], ARGV[4], now_us,
                          mutex_released(h))
    if stamp then stamp() end
    return {1, f, tonumber(ARGV[4])}
  end
  local now_ms, now_us = clock()
  local reserved -- Redlock: ms left of a reservation for another waiter (wake_head), or of
                 -- the entry of the first live waiter, who is not the caller
  if not h[1] and redlock then
    -- free: it is reserved for the waiter the last release woke, if that reservation runs;
    -- else it goes to the first live waiter by ticket, or to anyone if none waits. Never to
    -- whoever asks first: every waiter whose check fell on a free lock then raced for it,
    -- each won a master or two at a round trip's distance, and all undid and tried again
    -- (split votes in a row, lock calls waiting 15 s under 150-250 ms round trips with 5 %
    -- loss, net-rl-slowloss). The queues agree on the order (the ticket), so the masters
    -- grant the same waiter. The reservation, the queue and its info are read before
    -- mutex_grant() writes
    local w = redis.call('HMGET', KEYS[1], 'w', 'x')
    local wx = tonumber(w[2])
    if w[1] and w[1] ~= ARGV[3] and wx and wx > now_ms then
      reserved = wx - now_ms
    else
      redis.call('HLEN', KEYS[4])
      local head, info = q_live_head(KEYS[3], KEYS[4], now_ms)
      if head and head ~= ARGV[3] then
        reserved = tonumber(string.match(info, '^(%d+) ')) - now_ms
      else
        -- the caller's queue entry stays until its release (rel drops it on every master):
        -- a grant that no quorum confirms is undone, and the waiter keeps its place here
        local f = mutex_grant(KEYS[1], KEYS[2], tokhash, ARGV[3], ARGV[4], now_us,
                              mutex_released(h))
        if stamp then stamp() end
        if w[1] then redis.call('HDEL', KEYS[1], 'w', 'x') end
        return {1, f, tonumber(ARGV[4])}
      end
    end
  end
  -- the fencing counter, which stale wake-ups do not pass (lib/wait.c): without Redlock, a
  -- held lock's token is the counter (every grant stores the token it draws in both, and
  -- nothing else moves the counter), so the HMGET's 'f' spares a GET
  local seen = not redlock and h[1] and h[4] or nil
  if not h[1] and not reserved then
    -- free: FIFO, so only the first live waiter (or anyone, if none waits) may take it
    local head, _, _, hm, hs = q2_head(now_ms)
    if not head or head == ARGV[3] then
      local f = grant2(tokhash, ARGV[3], ARGV[4], now_ms, now_us, mutex_released(h))
      if head then q2_drop(hm, hs, now_ms) end
      return {1, f, tonumber(ARGV[4])}
    end
    seen = hand_to_head(now_ms, now_us, mutex_released(h), hm, hs)
  end
  local ttl = reserved
  if not ttl and h[1] and h[5] then
    ttl = tonumber(h[5]) - now_ms
    if ttl <= 0 then ttl = nil end
  end
  ttl = ttl or redis.call('PTTL', KEYS[1])
  seen = seen or redis.call('GET', KEYS[2]) or '0'
  if string.sub(mode, 1, 1) ~= 'q' and string.sub(mode, 1, 1) ~= 'Q' then
    return {0, ttl, 0, seen}
  end
  local e = enqueue(tokhash, now_ms, now_us)
  if e then return e end
  return {0, ttl, 1, seen}
end

if op == 'rel' then
  if redlock and string.sub(mode, 1, 1) ~= 'u' then
    -- the acquisition's queue entry, here whether this master granted it or not (it was
    -- busy here while a quorum granted it elsewhere): left there, it would absorb the
    -- wake-ups of the real waiters behind it until its lease ran out
    q_drop(KEYS[3], KEYS[4], ARGV[3])
  end
  if h[1] == tokhash and h[2] == ARGV[3] and redlock then
    if string.sub(mode, 1, 1) == 'u' and attempt and
       redis.call('HGET', KEYS[1], 'u') ~= attempt then
      return 0 -- a later attempt of this acquisition was granted here since: not ours to undo
    end
    release_free()
    raise_fence()
    -- an undone grant (mode "u": no quorum granted it) wakes nobody and keeps its queue
    -- entry: the lock is held on the other masters, or the split voters try again
    if string.sub(mode, 1, 1) ~= 'u' then wake_head(nil) end
    return 1
  end
  if h[1] == tokhash and h[2] == ARGV[3] then
    if not hand_to_head(nil, nil, ARGV[3], first, first_s) then release_free() end
    return 1
  end
  -- a retried release: 'a' of the free lock's tombstone names it, or 'r' (the release a
  -- later grant carried on; the only tombstone of the earlier layout)
  if (not h[1] and h[2] == ARGV[3]) or h[3] == ARGV[3] then return 1 end
  return 0
end

if op == 'info' then
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) > 0 and 1 or 0
  local fence = h[4] or redis.call('GET', KEYS[2]) or '0'
  local waiters = redis.call('ZCARD', KEYS[3])
  if not h[1] then return {exists, 0, -1, fence, waiters, 0, -1, -1, -1} end
  local n = tonumber(redis.call('HGET', KEYS[1], 'n')) or 1
  return {exists, 1, redis.call('PTTL', KEYS[1]), fence, waiters, 1, -1, -1, n, h[2]}
end

if op == 'force' then
  if not h[1] then return 0 end
  redis.call('DEL', KEYS[1])
  if redlock then wake_head(nil) else hand_to_head(nil, nil, '') end
  return 1
end

if op == 'enter' or op == 'leave' then
  if h[1] ~= tokhash or h[2] ~= ARGV[3] then return 0 end
  local x = redis.call('HMGET', KEYS[1], 'n', 'e')
  local n = tonumber(x[1]) or 1
  if x[2] == ARGV[9] then return n end
  if op == 'enter' then n = n + 1 elseif n > 1 then n = n - 1 end
  redis.call('HSET', KEYS[1], 'n', n, 'e', ARGV[9])
  return n
end

if op == 'cancel' then
  local err = wrong_type({'hash', 'string', 'zset', 'hash'}, 'mutex')
  if err then return err end
  if h[1] == tokhash and h[2] == ARGV[3] then
    return {1, h[4], redis.call('PTTL', KEYS[1])}
  end
  q_drop(KEYS[3], KEYS[4], ARGV[3])
  if not h[1] then
    local now_ms, now_us = clock()
    if not redlock then
      hand_to_head(now_ms, now_us, mutex_released(h))
    else
      -- a reservation for another live waiter stands; one for the leaver passes on
      local w = redis.call('HMGET', KEYS[1], 'w', 'x')
      if not w[1] or w[1] == ARGV[3] or (tonumber(w[2]) or 0) <= now_ms then wake_head(now_ms) end
    end
  end
  return {0}
end

return redis.error_reply('ERR redisync mutex: unknown op ' .. tostring(op))
