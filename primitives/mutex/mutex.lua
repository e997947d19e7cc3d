-- mutex.lua - the distributed mutex: one owner at a time, FIFO waiter queue, direct handoff.
-- Run with EVALSHA by primitives/mutex/mutex.c, and by primitives/rmutex/rmutex.c for the
-- recursive mutex (ops enter/leave; its keys carry the kind "rmutex", so the two never
-- share state). See docs/scripts.md for the protocol.
--
-- KEYS[1] lock   hash   o = SHA1(owner token), a = acquisition id, f = fencing token,
--                       r = id of the last released acquisition (a retried release is not
--                       mistaken for a lost hold), n = hold count (recursive mutex),
--                       e = id of the last enter/leave call. Its TTL is the holder's lease.
-- KEYS[2] fence  string the per-name fencing counter (30-day TTL, set again daily on use)
-- KEYS[3] queue  zset   acquisition id -> arrival number (FIFO order)
-- KEYS[4] qinfo  hash   acquisition id -> "EXPIRYMS LEASEMS TOKENHASH" (a waiter's entry lease)
--
-- ARGV[1] op: acq | renew | rel | qrenew | cancel | enter | leave | info | force
-- ARGV[2] owner token (raw; only its SHA1 is stored)
-- ARGV[3] acquisition id "PUBLICID:N" (wake-ups: wake() in common.lua)
-- ARGV[4] lease ms
-- ARGV[5] channel prefix, e.g. "rs:client:"
-- ARGV[6] (acq) "q": queue when busy, "t": try only; "Q", "T": the same, and a hold of this
--         owner under another id is an orphan to adopt (the client knows it holds nothing
--         here: a call that failed after its script ran left it), not a refusal. A trailing
--         "r" (every op, Redlock: lib/redlock.c) says this master is one of several: a
--         release never hands the lock over (each master could hand it to a different
--         waiter) but publishes "ACQID retry" to the first live waiter and reserves the free
--         lock for it for a short while (wake_head); past that, a free lock goes to the
--         first live waiter by ticket (to anyone if none waits). "ur" (rel): the undo of a
--         grant that got no quorum, which wakes nobody
-- ARGV[7] (acq) max waiters
-- ARGV[8] (acq, qrenew) queue entry lease ms
-- ARGV[9] (enter, leave) id of this call (a retry of it is recognised); (acq, Redlock) the
--         waiter's ticket: its place in the queue, the same on every master (lib/redlock.c)
-- ARGV[10] (renew, rel; Redlock) the holder's fencing token: the fencing counter is raised to
--         it, so that the next holder's quorum, which shares a master with this one's, gets a
--         larger token (docs/deployments.md, "Fencing under Redlock")
-- ARGV[11] (acq, rel "ur"; Redlock) the attempt's number within its acquisition: an acq that
--         grants, or finds the lock granted to its id, writes it into the hold ('u'); an undo
--         removes the hold only when 'u' is its own number. A late undo of an earlier attempt
--         (sent on a connection since dropped, so overtaken by a later attempt on another)
--         then leaves the later attempt's grant alone instead of silently freeing it.
--
-- Replies:
--   acq     {1, fence, ttlms} granted (also when it was already granted to this id);
--           {0, holder_ttlms, queued, fence_counter} busy (Redlock: a free lock reserved for
--           or kept for another waiter is busy, holder_ttlms the ms the reservation or that
--           waiter's queue entry has left; without Redlock the counter of a held lock is read
--           from the hold's 'f', which every grant writes with it); {-1} held by this owner
--           under another id;
--           error "RSQUEUE ..." when the queue is full
--   renew   1 renewed, 0 not ours any more
--   rel     1 released (or handed to the next waiter), 0 not ours (the hold was lost)
--   qrenew  1 entry renewed, 2 the lock was handed to this id meanwhile, 0 entry gone
--   cancel  {1, fence, ttlms} it was handed to this id (keep it); {0} left the queue
--   enter   the new hold count (re-entry), 0 not ours any more
--   leave   the new hold count (>= 1; the last unlock is rel), 0 not ours any more
--   info    {exists, nholders, ttl, fence, waiters, 0, -1, -1, count, holder...} (read-only;
--           the inspection reply every script shares, see primitives/inspect.c)
--   force   operators: drops the current hold (its holder learns at its next renewal) and
--           hands the mutex to the first live waiter; 1 if something was held, else 0
--
-- Every key a call writes is read before the script first writes (a read of a key of another
-- type fails with WRONGTYPE, and a script that fails half-way keeps its earlier writes): acq
-- and rel are ordered so that their reads check the keys, which spares four TYPE calls on the
-- hot path; cancel checks explicitly. A queued acq on a held lock does not touch the fencing
-- counter (its reply's counter is the hold's 'f'). Releases free memory before they allocate
-- (under noeviction a script fails at its first allocating write). Time comes only from the
-- server (TIME).

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
local h, first -- first: the queue's first id, if the fast release read it
local th -- SHA1 of the owner token, once computed (about 6,000 server instructions a time)
if (op == 'acq' or op == 'rel') and not redlock then
  if op == 'acq' then
    h = redis.call('HMGET', KEYS[1], 'o', 'a', 'r', 'f')
  else
    h = redis.call('HMGET', KEYS[1], 'o', 'a', 'r')
  end
  if op == 'acq' and not h[1] and redis.call('ZCARD', KEYS[3]) == 0 then
    local _, now_us = clock()
    local f = mutex_grant(KEYS[1], KEYS[2], redis.sha1hex(ARGV[2]), ARGV[3], ARGV[4], now_us,
                          mutex_released(h))
    return {1, f, tonumber(ARGV[4])}
  end
  if op == 'rel' and h[2] == ARGV[3] then th = redis.sha1hex(ARGV[2]) end
  if op == 'rel' and h[2] == ARGV[3] and h[1] == th then
    -- the queue's head, which a handover (below) starts from
    first = redis.call('ZRANGE', KEYS[3], '0', '0')[1]
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
local function hand_to_head(now_ms, now_us, prev, first_id, head, info)
  if not head then
    if not now_ms then
      if not first_id then
        first_id = redis.call('ZRANGE', KEYS[3], '0', '0')[1]
        if not first_id then return nil end
      end
      now_ms, now_us = clock()
    end
    head, info = q_live_head(KEYS[3], KEYS[4], now_ms, first_id)
    if not head then return nil end
  end
  local lease, tok = string.match(info, '^%d+ (%d+) (%x+)$')
  local f = mutex_grant(KEYS[1], KEYS[2], tok, head, lease, now_us, prev)
  q_drop(KEYS[3], KEYS[4], head)
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
  function enqueue(tokhash, now_ms)
    return q_add(KEYS[3], KEYS[4], ARGV[3], qinfo(tokhash, now_ms), tonumber(ARGV[7]),
                 tonumber(ARGV[8]), now_ms, redlock and tonumber(ARGV[9]) or nil)
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
  -- the entry's lease first (the common answer in three calls): HSET replies 0 when it
  -- replaced the entry; 1 when it made a new one, the entry being gone (taken back at once:
  -- the lock then says whether it was handed to this id). A qi of another type fails HSET
  -- before it writes; the lock is only read.
  local now_ms = clock()
  if redis.call('HSET', KEYS[4], ARGV[3], qinfo(tokhash, now_ms)) == 0 then
    q_keep(KEYS[3], KEYS[4], 2 * tonumber(ARGV[8]))
    return 1
  end
  redis.call('HDEL', KEYS[4], ARGV[3])
  local h = redis.call('HMGET', KEYS[1], 'o', 'a')
  if h[1] == tokhash and h[2] == ARGV[3] then return 2 end
  return 0
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
    local head, info = q_live_head(KEYS[3], KEYS[4], now_ms)
    if not head or head == ARGV[3] then
      local f = mutex_grant(KEYS[1], KEYS[2], tokhash, ARGV[3], ARGV[4], now_us,
                            mutex_released(h))
      if head then q_drop(KEYS[3], KEYS[4], head) end
      return {1, f, tonumber(ARGV[4])}
    end
    seen = hand_to_head(now_ms, now_us, mutex_released(h), nil, head, info)
  end
  local ttl = reserved or redis.call('PTTL', KEYS[1])
  seen = seen or redis.call('GET', KEYS[2]) or '0'
  if string.sub(mode, 1, 1) ~= 'q' and string.sub(mode, 1, 1) ~= 'Q' then
    return {0, ttl, 0, seen}
  end
  local e = enqueue(tokhash, now_ms)
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
    if not hand_to_head(nil, nil, ARGV[3], first) then release_free() end
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
