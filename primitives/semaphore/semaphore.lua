-- semaphore.lua - the distributed semaphore: leased permits, FIFO waiter queue, direct handoff.
-- Run with EVALSHA by primitives/semaphore/semaphore.c; see docs/scripts.md for the protocol.
--
-- One acquisition of n permits is one holder entry (its own lease, renewed as one). Permits
-- taken = the sum of the counts of the live holders; expired holders are purged (by their
-- server-time expiry) before every count, so a crashed holder's permits come back when its
-- lease runs out.
--
-- KEYS[1] sem     hash   s = size. TTL 7 days, set again once a day by the calls that use it.
-- KEYS[2] holders zset   acquisition id -> lease expiry (server ms). An owner that released
--                        leaves its tombstone "r:TOKENHASH" until max(lease, 10 s) after its
--                        last release, so a retried release is not taken for a lost hold
--                        (one per owner thread, not per release); tombstones are scored
--                        TOMB_BASE + expiry, above every live hold, so counting the permits
--                        taken walks the live holds only (at most the size).
-- KEYS[3] hinfo   hash   acquisition id -> "COUNT TOKENHASH FENCE"; "r:TOKENHASH" -> the id
--                        that owner released last (COUNT 0: a tombstone of the earlier
--                        layout, one per released id, still understood)
-- KEYS[4] fence   string the per-name fencing counter (30-day TTL, set again daily on use)
-- KEYS[5] queue   zset   acquisition id -> arrival number (FIFO order)
-- KEYS[6] qinfo   hash   acquisition id -> "EXPIRYMS LEASEMS TOKENHASH N" (a waiter's entry
--                        lease, and the permits it wants)
--
-- ARGV[1] op: init | acq | renew | rel | give | qrenew | cancel | val | size | info | force
-- ARGV[2] owner token (raw; only its SHA1 is stored)
-- ARGV[3] acquisition id "PUBLICID:N" (wake-ups: wake() in common.lua)
-- ARGV[4] lease ms
-- ARGV[5] channel prefix, e.g. "rs:client:"
-- ARGV[6] (acq) "q": queue when busy, "t": try only
-- ARGV[7] (acq) max waiters
-- ARGV[8] (acq, qrenew) queue entry lease ms
-- ARGV[9] acq, qrenew: permits wanted (>= 1); give: permits the hold keeps (>= 1);
--         size: the new size (>= 1); other ops: ignored
-- ARGV[10] the handle's initial size: a call that finds the semaphore absent creates it with
--         this size; 0: never create (attach only)
--
-- Replies:
--   init    the size (existing, or just created); -1 absent and ARGV[10] is 0
--   acq     {1, fence, ttlms} granted (also when already granted to this id: a retried call
--           or a missed wake-up); {0, retry_ms, queued, fence_counter} busy, where retry_ms
--           is the time until the earliest live holder's lease ends; errors "RSNOENT ..."
--           (absent and ARGV[10] is 0), "RSINVAL ..." (more permits wanted than the size),
--           "RSQUEUE ..." (queue full)
--   renew   1 renewed, 0 not ours any more (gone, expired or released)
--   rel     1 released the whole hold (also for a retry: the owner's tombstone names this id),
--           0 not ours (the hold was lost)
--   give    1 the hold now has ARGV[9] permits (also when it already had: a retry), the
--           others are free; 0 not ours (lost)
--   qrenew  1 entry renewed, 2 permits were handed to this id meanwhile, 0 entry gone
--   cancel  {1, fence, ttlms} permits were handed to this id (keep them); {0} left the queue
--   val     {size, taken}; -1 absent and ARGV[10] is 0
--   size    1
--
-- Every write comes after the type checks (a failing script keeps its earlier writes), and
-- releases free memory before they allocate (under noeviction a script fails at its first
-- allocating write). Time comes only from the server (TIME).

local SIZE_TTL = 604800000
local TOMB_MS = 10000
local TOMB_BASE = 1000000000000000 -- score offset of tombstones (ms; far above any clock)
local op = ARGV[1]

-- The helpers of primitives/core.lua (fmt, clock, extend_lazily, next_fence) come before this
-- text; those of primitives/common.lua (q_*, wrong_type) at the line "-- @common" below.

-- "COUNT TOKENHASH FENCE" -> count, tokenhash, fence (nil if malformed)
local function parse_holder(v)
  if not v then return nil end
  local n, t, f = string.match(v, '^(%d+) (%x+) (%d+)$')
  return tonumber(n), t, f
end

-- The size record's 7-day TTL, set again once a day of its 7: a read, not a write, per call
-- (every acquire and every renewal keeps a semaphore in use alive).
local function refresh_size()
  if redis.call('PTTL', KEYS[1]) < SIZE_TTL - 86400000 then
    redis.call('PEXPIRE', KEYS[1], SIZE_TTL)
  end
end

-- Earliest lease expiry among live holders (for the busy reply's retry time), lowered by
-- grant() and count_taken() (inline: a closure costs every call that makes it).
local earliest = nil

-- The TTL (ms) that holders and hinfo are known to have at least since a release of this
-- call extended them, both keys keeping a member (its tombstone) since; 0: not known. Any
-- removal in between (a purge) forgets it.
local kept_ms = 0

local function grant(tok, acq, n, lease, now_ms, now_us)
  local f = next_fence(KEYS[4], now_us)
  redis.call('HSET', KEYS[3], acq, fmt(n) .. ' ' .. tok .. ' ' .. f)
  redis.call('ZADD', KEYS[2], fmt(now_ms + lease), acq)
  if lease > kept_ms then -- a handover's grant right after the release: already long enough
    extend_lazily(KEYS[2], lease)
    extend_lazily(KEYS[3], lease)
  end
  local e = now_ms + lease
  if not earliest or e < earliest then earliest = e end
  return f
end

-- Releases hold acq (owner tokhash t): frees it first, then, if memory allows, leaves the
-- owner's tombstone: "r:TOKENHASH" -> the id it released last, so that a retry of that
-- release is not taken for a lost hold. One per owner thread (a thread retries a release
-- before it can take anything else), not one per release: a busy semaphore's keys do not
-- grow with its release rate.
local function release(acq, t, now_ms)
  redis.call('ZREM', KEYS[2], acq)
  redis.call('HDEL', KEYS[3], acq)
  local keep = math.max(tonumber(ARGV[4]), TOMB_MS)
  local tomb = 'r:' .. t
  local ok = redis.pcall('ZADD', KEYS[2], fmt(TOMB_BASE + now_ms + keep), tomb)
  if type(ok) == 'number' then
    if type(redis.pcall('HSET', KEYS[3], tomb, acq)) == 'number' then
      extend_lazily(KEYS[2], keep)
      extend_lazily(KEYS[3], keep)
      kept_ms = keep
    else
      redis.call('ZREM', KEYS[2], tomb)
    end
  end
end

-- The uncontended acquire and release, first and in as few calls as possible: nobody queued,
-- nothing lapsed to purge, enough permits free (or, for a release, nobody to serve). They
-- return before the helpers below are defined (docs/performance.md, "Uncontended cost per
-- primitive"). Their reads check the type of every key they write before the first write;
-- anything else falls through to the full paths, which purge, check every key and serve.
-- What they read is kept for the full path: the size record's 's' (fast_size; false: absent),
-- the queue's first id (qfirst; false: the queue is empty; an acq reads the tail instead,
-- fast_qlast, and knows the head only when the queue is empty), the owner token's SHA1
-- (fast_th), the clock, and a release's hold record (fast_rec), score (fast_exp) and the
-- head's entry (fast_qinfo).
-- An acq that finds others queued reads the holds too: if every permit is taken by live
-- holds, with nothing to purge and no hold of its own, it cannot be served (the queue comes
-- first, and nobody fits) and is answered busy and queued right after the common helpers
-- (busy_exp: the earliest live hold's lease end), before the full path's are made.
-- A rel that finds others queued reads the holds, the size and the head's entry: if the head
-- is live and fits, no permit is left after it and nothing is due for a purge, it hands over
-- right after the common helpers too (hand: the head's token hash, permits, lease, and the
-- releasing owner's token hash).
local FAST_MAX = 64 -- more holds (or tombstones due) than this: the full path
local fast_size, qfirst, fast_ms, fast_us, fast_rec, fast_exp, busy_exp
local fast_th, fast_qinfo, fast_qlast, hand
if op == 'acq' and (ARGV[6] == 'q' or ARGV[6] == 't') then
  local n = tonumber(ARGV[9])
  fast_size = redis.call('HGET', KEYS[1], 's')
  local size = tonumber(fast_size)
  if size and n and n >= 1 and n <= size then
    -- the queue's tail (q_add's read, passed on): only whether the queue is empty is needed
    -- here, and a busy answer queues behind it
    fast_qlast = redis.call('ZRANGE', KEYS[5], '-1', '-1', 'WITHSCORES')
    if not fast_qlast[1] then qfirst = false end
  end
  if fast_qlast then
    fast_ms, fast_us = clock()
    local now_ms, now_us = fast_ms, fast_us
    -- the holds (scores below TOMB_BASE) and, after them, the tombstones due, in one read
    local all = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(TOMB_BASE + now_ms),
                           'WITHSCORES', 'LIMIT', 0, 2 * FAST_MAX + 2)
    local ids, ends, gone, ok = {ARGV[3]}, {false}, {}, true
    for i = 1, #all, 2 do
      local score = tonumber(all[i + 1])
      if score >= TOMB_BASE then
        gone[#gone + 1] = all[i]
      else
        ids[#ids + 1] = all[i]
        ends[#ids] = score
        if score <= now_ms then ok = false end -- a lapsed hold to purge
      end
    end
    ok = ok and #ids - 1 <= FAST_MAX and #gone <= FAST_MAX
    local info = ok and redis.call('HMGET', KEYS[3], unpack(ids)) or {true}
    local taken, first_end = 0, nil
    for i = 2, #info do
      local c = parse_holder(info[i])
      if not c then ok = false else taken = taken + c end -- no record: the full path drops it
      if c and c > 0 and (not first_end or ends[i] < first_end) then first_end = ends[i] end
    end
    -- info[1]: this id holds already (a retry): the full path answers it
    if fast_qlast[1] and ok and not info[1] and #gone == 0 and taken >= size and first_end then
      busy_exp = first_end
    elseif qfirst == false and ok and not info[1] and taken + n <= size then
      -- grant() writes first: its GET has checked the fencing counter's type
      local f = grant(redis.sha1hex(ARGV[2]), ARGV[3], n, tonumber(ARGV[4]), now_ms, now_us)
      if #gone > 0 then
        redis.call('ZREM', KEYS[2], unpack(gone))
        redis.call('HDEL', KEYS[3], unpack(gone))
      end
      refresh_size()
      return {1, f, tonumber(ARGV[4])}
    end
  end
elseif op == 'rel' then
  fast_rec = redis.call('HGET', KEYS[3], ARGV[3])
  local c, t = parse_holder(fast_rec)
  if c and c >= 1 then fast_th = redis.sha1hex(ARGV[2]) end
  if c and c >= 1 and t == fast_th then
    fast_ms, fast_us = clock()
    local now_ms = fast_ms
    qfirst = redis.call('ZRANGE', KEYS[5], '0', '0')[1] or false
    if not qfirst then
      fast_exp = redis.call('ZSCORE', KEYS[2], ARGV[3])
      if (tonumber(fast_exp) or 0) > now_ms then
        release(ARGV[3], t, now_ms)
        return 1
      end
    else
      -- a handover: the holds and the tombstones due in one read, which gives this hold's
      -- expiry too (the full path's, if it is not in a complete list: it reads it again)
      local all = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(TOMB_BASE + now_ms),
                             'WITHSCORES', 'LIMIT', 0, FAST_MAX + 1)
      local others, ok = {}, #all < 2 * (FAST_MAX + 1)
      for i = 1, #all, 2 do
        local score = tonumber(all[i + 1])
        if all[i] == ARGV[3] then
          if ok then fast_exp = all[i + 1] end
        elseif score <= now_ms or score >= TOMB_BASE then
          ok = false -- a lapsed hold or a tombstone due: the full path purges
        else
          others[#others + 1] = all[i]
        end
      end
      ok = ok and (tonumber(fast_exp) or 0) > now_ms and qfirst ~= ARGV[3]
      if ok then
        fast_size = redis.call('HGET', KEYS[1], 's')
        fast_qinfo = redis.call('HGET', KEYS[6], qfirst)
        local size = tonumber(fast_size)
        local qexp, lease, tok, n = string.match(fast_qinfo or '',
                                                 '^(%d+) (%d+) (%x+) (%d+)$')
        n = tonumber(n)
        ok = size and n and n >= 1 and n <= size and tonumber(qexp) > now_ms
        local taken = 0
        if ok and #others > 0 then
          local info = redis.call('HMGET', KEYS[3], unpack(others))
          for i = 1, #info do
            local oc = parse_holder(info[i])
            if not oc then ok = false else taken = taken + oc end -- orphan: the full path
          end
        end
        -- the head fits, and serve() would stop right after it (no permit left)
        if ok and taken + n == size then
          hand = {tok, n, tonumber(lease), t}
        end
      end
    end
  end
end

-- @common

if busy_exp then
  -- (busy_exp above) every key is read by now but the queue info, whose HSET in q_add is the
  -- first write and fails on another type before it writes. The size record's TTL is not
  -- refreshed here: a semaphore in use has it refreshed at least daily without this call
  -- (the early handover below, on the day's first grant)
  local seen = redis.call('GET', KEYS[4]) or '0' -- stale wake-ups carry no more (lib/wait.c)
  local retry = busy_exp - fast_ms
  if retry < 1 then retry = 1 end
  local e
  if ARGV[6] == 'q' then
    local ql = tonumber(ARGV[8])
    e = q_add(KEYS[5], KEYS[6], ARGV[3], fmt(fast_ms + ql) .. ' ' .. ARGV[4] .. ' ' ..
              redis.sha1hex(ARGV[2]) .. ' ' .. ARGV[9], tonumber(ARGV[7]), ql, fast_ms, nil,
              fast_qlast)
  end
  if e then return e end
  return {0, retry, ARGV[6] == 'q' and 1 or 0, seen}
end

if hand then
  -- (hand above) every key but the fencing counter is read by now: TYPE it before the
  -- first write. Then what the full path does (release, serve), without its re-read of the
  -- holds after the release, and with the size record's TTL refresh only on the day's first
  -- grant (next_fence's second value). So a semaphore in use has it refreshed at least once a
  -- day of its 7: every other grant (fast or full acq, serve), every renewal and every full
  -- path refresh it; and a day without any grant is a day in which the holds that keep the
  -- waiters queued were renewed, leases being at most a day.
  local ft = redis.call('TYPE', KEYS[4]).ok
  if ft ~= 'none' and ft ~= 'string' then
    return wrong_type({'hash', 'zset', 'hash', 'string', 'zset', 'hash'}, 'semaphore',
                      {true, true, true, false, true, true})
  end
  -- release() and grant() merged: the hold is freed first (ZREM and HDEL: a script's first
  -- write may not allocate under noeviction; after it, none is refused), then the owner's
  -- tombstone and the head's hold are written with one ZADD and one HSET, and both keys'
  -- TTLs raised once to the longer of the tombstone's keep and the head's lease
  local lease = hand[3]
  local keep = math.max(tonumber(ARGV[4]), TOMB_MS)
  local tomb = 'r:' .. hand[4]
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('HDEL', KEYS[3], ARGV[3])
  local f, day = next_fence(KEYS[4], fast_us)
  redis.call('ZADD', KEYS[2], fmt(TOMB_BASE + fast_ms + keep), tomb,
             fmt(fast_ms + lease), qfirst)
  redis.call('HSET', KEYS[3], tomb, ARGV[3], qfirst, fmt(hand[2]) .. ' ' .. hand[1] .. ' ' .. f)
  local ttl = math.max(keep, lease)
  extend_lazily(KEYS[2], ttl)
  extend_lazily(KEYS[3], ttl)
  q_drop(KEYS[5], KEYS[6], qfirst)
  wake(ARGV[5], KEYS[1], qfirst, qfirst .. ' ' .. f)
  if day then refresh_size() end
  return 1
end

-- The keys this call has read with a command of their type (so checked): the type checks
-- before the first write TYPE only the others.
local typed = {}

local function check_types()
  return wrong_type({'hash', 'zset', 'hash', 'string', 'zset', 'hash'}, 'semaphore', typed)
end


-- Whether acq is the id the owner tokhash released last, its tombstone still live.
local function released_last(acq, tokhash, now_ms)
  local tomb = 'r:' .. tokhash
  return redis.call('HGET', KEYS[3], tomb) == acq and
         (tonumber(redis.call('ZSCORE', KEYS[2], tomb)) or 0) > TOMB_BASE + now_ms
end

-- The size, creating the record with the handle's initial size when it is absent (it expired
-- after a long disuse, or was never created). nil when absent and the handle only attaches.
local function size_of()
  local s = fast_size
  fast_size = nil
  if s == nil then s = redis.call('HGET', KEYS[1], 's') end
  s = tonumber(s)
  if not s then
    local init = tonumber(ARGV[10]) or 0
    if init < 1 then return nil end
    s = init
    redis.call('HSET', KEYS[1], 's', fmt(s))
    redis.call('PEXPIRE', KEYS[1], SIZE_TTL)
  else
    refresh_size()
  end
  return s
end

-- The holds and the tombstones due, read without writing anything (count_taken writes):
-- {dead = ids whose lease ran out and tombstones due, live = {id, expiry, record}...}, and
-- the record of `also` (an id whose hold the caller wants to know), read in the same HMGET.
local function holds_read(now_ms, also)
  local all = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', fmt(TOMB_BASE + now_ms),
                         'WITHSCORES')
  typed[2] = true
  local h = {dead = {}, live = {}, score = {}}
  local ids = {}
  for i = 1, #all, 2 do
    local score = tonumber(all[i + 1])
    h.score[all[i]] = score
    if score <= now_ms or score >= TOMB_BASE then
      h.dead[#h.dead + 1] = all[i]
    else
      h.live[#h.live + 1] = {all[i], score}
      ids[#ids + 1] = all[i]
    end
  end
  if also then ids[#ids + 1] = also end
  if #ids > 0 then
    local info = {}
    for i = 1, #ids, 1000 do -- unpack() has a limit: at most 1000 at a time
      local part = redis.call('HMGET', KEYS[3], unpack(ids, i, math.min(i + 999, #ids)))
      for j = 1, #part do info[#info + 1] = part[j] end
    end
    typed[3] = true
    for i = 1, #h.live do h.live[i][3] = info[i] end
    if also then h.also = info[#ids] end
  end
  return h
end

local function remove_all(ids)
  if #ids > 0 then kept_ms = 0 end
  for i = 1, #ids, 1000 do
    local last = math.min(i + 999, #ids)
    redis.call('ZREM', KEYS[2], unpack(ids, i, last))
    redis.call('HDEL', KEYS[3], unpack(ids, i, last))
  end
end

-- Purges expired holders and tombstones, returns the permits the live holders have.
-- h: what holds_read(now_ms) has just returned, if the caller has read it.
local function count_taken(now_ms, h)
  h = h or holds_read(now_ms)
  remove_all(h.dead)
  local taken = 0
  for _, l in ipairs(h.live) do
    local n = parse_holder(l[3])
    if not n then
      kept_ms = 0
      redis.call('ZREM', KEYS[2], l[1]) -- no record: an orphan, drop it
    elseif n > 0 then
      taken = taken + n
      if not earliest or l[2] < earliest then earliest = l[2] end
    end
  end
  return taken
end

-- my_hold's answer from holds_read's (the hold of h.also = ARGV[3], read before any write)
local function my_hold_read(h, tokhash, now_ms)
  local n, t, f = parse_holder(h.also)
  local exp = h.score[ARGV[3]]
  if not n or n < 1 or t ~= tokhash or not exp or exp <= now_ms or exp >= TOMB_BASE then
    return nil
  end
  return n, f, exp
end

-- The live hold of acquisition acq owned by tokhash: count, fence, expiry; nil otherwise.
-- Tombstones (count 0) are not holds.
local function my_hold(acq, tokhash, now_ms)
  local n, t, f = parse_holder(redis.call('HGET', KEYS[3], acq))
  if not n or n < 1 or t ~= tokhash then return nil end
  local exp = tonumber(redis.call('ZSCORE', KEYS[2], acq))
  if not exp or exp <= now_ms then return nil end
  return n, f, exp
end

-- The queue's first entry as last read: qfirst (false: empty; nil: not known) and its info
-- (qinfo, or nil), forgotten at every write of the queue.
local qinfo = fast_qinfo

local function drop(acq)
  qfirst, qinfo = nil, nil
  q_drop(KEYS[5], KEYS[6], acq)
end

local function live_head(now_ms)
  if qfirst == false then return nil end
  local head, info = q_live_head(KEYS[5], KEYS[6], now_ms, qfirst, qinfo)
  qfirst, qinfo = head or false, info
  return head, info
end

-- Reads, for the type checks, what the hot paths read anyway: the size record, the queue's
-- head and its entry.
local function read_size_and_head()
  if fast_size == nil then fast_size = redis.call('HGET', KEYS[1], 's') end
  typed[1] = true
  if qfirst == nil then qfirst = redis.call('ZRANGE', KEYS[5], '0', '0')[1] or false end
  typed[5] = true
  if qfirst and not qinfo then
    qinfo = redis.call('HGET', KEYS[6], qfirst)
    typed[6] = true
  end
end

-- Grants permits to the live waiters at the head of the queue, in order, as long as the
-- head's request fits, and wakes each with one message "ACQID FENCE" on its own client's
-- channel (not the caller: it gets the reply). A head that wants more than the size can
-- never be served: it is dropped and told to retry ("ACQID 0"), which gives it RSINVAL.
-- Returns the permits taken afterwards and whether a waiter that does not fit is first.
-- With no permit free nobody can be served, so the queue is not read (a handover stops right
-- after its grant): a head that wants more than a size lowered since it queued is then told
-- at the first serve that finds a permit free, not before. all: read the head anyway (the
-- size op, which is what lowers it).
-- Grants since the call began (serve's): the caller's hold and the counter may have moved.
local served = false

local function serve(size, taken, now_ms, now_us, all)
  while true do
    if taken >= size and not all then return taken, qfirst ~= false end
    local head, info = live_head(now_ms)
    if not head then return taken, false end
    local _, lease, tok, n = string.match(info, '^(%d+) (%d+) (%x+) (%d+)$')
    lease, n = tonumber(lease), tonumber(n)
    if not n or n < 1 or n > size then
      drop(head)
      -- the route only ("PUBLICID:N"): the whole id, with its secret, is kept for grants
      if head ~= ARGV[3] then wake(ARGV[5], KEYS[1], head, acq_route(head) .. ' 0') end
    elseif taken + n > size then
      return taken, true
    else
      drop(head)
      served = true
      local f = grant(tok, head, n, lease, now_ms, now_us)
      taken = taken + n
      if head ~= ARGV[3] then wake(ARGV[5], KEYS[1], head, head .. ' ' .. f) end
    end
  end
end

local function qentry(tokhash, now_ms)
  return fmt(now_ms + tonumber(ARGV[8])) .. ' ' .. ARGV[4] .. ' ' .. tokhash .. ' ' .. ARGV[9]
end

local function enqueue(tokhash, now_ms)
  qfirst, qinfo = nil, nil
  return q_add(KEYS[5], KEYS[6], ARGV[3], qentry(tokhash, now_ms), tonumber(ARGV[7]),
               tonumber(ARGV[8]), now_ms)
end

local tokhash = fast_th or redis.sha1hex(ARGV[2])

-- The watchdog's operations come first: they run every lease/3 for every hold and waiter.
if op == 'renew' then
  local now_ms = clock()
  if not my_hold(ARGV[3], tokhash, now_ms) then return 0 end
  local lease = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[2], 'XX', fmt(now_ms + lease), ARGV[3])
  extend_lazily(KEYS[2], lease)
  extend_lazily(KEYS[3], lease)
  refresh_size()
  return 1
end

if op == 'qrenew' then
  local now_ms = clock()
  if my_hold(ARGV[3], tokhash, now_ms) then return 2 end
  if not redis.call('HGET', KEYS[6], ARGV[3]) then return 0 end
  redis.call('HSET', KEYS[6], ARGV[3], qentry(tokhash, now_ms))
  q_keep(KEYS[5], KEYS[6], 2 * tonumber(ARGV[8]))
  return 1
end

-- acq, rel, give and cancel check the types after their first reads; the other ops here
if op ~= 'acq' and op ~= 'rel' and op ~= 'give' and op ~= 'cancel' then
  local err = check_types()
  if err then return err end
end

if op == 'acq' then
  local acq, n = ARGV[3], tonumber(ARGV[9])
  local now_ms, now_us = fast_ms, fast_us
  if not now_ms then now_ms, now_us = clock() end
  -- every read first (each checks its key's type), then TYPE for the keys none has read
  local h = holds_read(now_ms, acq)
  read_size_and_head()
  local seen = redis.call('GET', KEYS[4]) or '0' -- stale wake-ups carry no more (lib/wait.c)
  typed[4] = true
  local err = check_types()
  if err then return err end
  local taken = count_taken(now_ms, h)
  -- already granted to this id: a retried call, or a wake-up that was missed
  local have, f, exp = my_hold_read(h, tokhash, now_ms)
  if have then return {1, f, exp - now_ms} end
  local size = size_of()
  if not size then
    drop(acq)
    return redis.error_reply('RSNOENT semaphore does not exist')
  end
  if not n or n < 1 or n > size then
    drop(acq)
    serve(size, taken, now_ms, now_us)
    return redis.error_reply('RSINVAL more permits wanted than the semaphore has')
  end
  -- FIFO: the queue is served first; the caller takes permits only if nobody is left ahead
  local blocked
  taken, blocked = serve(size, taken, now_ms, now_us)
  if served then
    have, f, exp = my_hold(acq, tokhash, now_ms)
    if have then return {1, f, exp - now_ms} end
    seen = redis.call('GET', KEYS[4]) or '0'
  end
  if not blocked and taken + n <= size then
    drop(acq)
    return {1, grant(tokhash, acq, n, tonumber(ARGV[4]), now_ms, now_us), tonumber(ARGV[4])}
  end
  local retry = earliest and earliest - now_ms or tonumber(ARGV[4])
  if retry < 1 then retry = 1 end
  if ARGV[6] ~= 'q' then return {0, retry, 0, seen} end
  local e = enqueue(tokhash, now_ms)
  if e then return e end
  return {0, retry, 1, seen}
end

if op == 'rel' or op == 'give' then
  local acq = ARGV[3]
  local now_ms, now_us = fast_ms, fast_us
  if not now_ms then now_ms, now_us = clock() end
  local rec = fast_rec
  if rec == nil then rec = redis.call('HGET', KEYS[3], acq) end
  local n, t, f = parse_holder(rec)
  if not n then
    -- released by this owner already: a retried release
    if op == 'rel' and released_last(acq, tokhash, now_ms) then return 1 end
    return 0
  end
  if t ~= tokhash then return 0 end
  local exp = fast_exp
  if exp == nil then exp = redis.call('ZSCORE', KEYS[2], acq) end
  exp = tonumber(exp)
  if not exp or exp <= now_ms then return 0 end
  if n == 0 then
    -- a tombstone of the earlier layout (one per released id): a retried release
    if op == 'rel' then return 1 end
    return 0
  end
  -- the reads above checked the holders and their records; read the size record and the
  -- queue's head, which serve reads anyway, and TYPE what is left before the first write
  typed[2], typed[3] = true, true
  read_size_and_head()
  local err = check_types()
  if err then return err end
  if op == 'rel' then
    release(acq, t, now_ms)
  else
    local keep = tonumber(ARGV[9])
    if not keep or keep < 1 then
      return redis.error_reply('ERR redisync semaphore: give needs a count of at least 1')
    end
    -- keep >= n: the same call came again (the count is the call's id)
    if keep >= n then return 1 end
    redis.call('HSET', KEYS[3], acq, fmt(keep) .. ' ' .. t .. ' ' .. f)
  end
  local size = size_of()
  if size then serve(size, count_taken(now_ms), now_ms, now_us) end
  return 1
end

if op == 'cancel' then
  local acq = ARGV[3]
  local now_ms, now_us = clock()
  local h = holds_read(now_ms, acq)
  read_size_and_head()
  local err = check_types()
  if err then return err end
  local taken = count_taken(now_ms, h)
  local have, f, exp = my_hold_read(h, tokhash, now_ms)
  if have then return {1, f, exp - now_ms} end
  drop(acq)
  -- leaving may unblock the waiters that were behind the caller
  local size = size_of()
  if size then serve(size, taken, now_ms, now_us) end
  return {0}
end

if op == 'info' then
  -- the inspection reply shared by every script (primitives/inspect.c); read-only
  local now_ms = clock()
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[5]) > 0 and 1 or 0
  local size = tonumber(redis.call('HGET', KEYS[1], 's')) or -1
  local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(now_ms), '(' .. fmt(TOMB_BASE),
                          'WITHSCORES')
  local holders, taken, first = {}, 0, -1
  for i = 1, #live, 2 do
    local n = parse_holder(redis.call('HGET', KEYS[3], live[i]))
    if n and n > 0 then
      taken = taken + n
      holders[#holders + 1] = live[i]
      if first < 0 then first = tonumber(live[i + 1]) - now_ms end
    end
  end
  local free = size >= 0 and math.max(0, size - taken) or -1
  local reply = {exists, #holders, first, redis.call('GET', KEYS[4]) or '0',
                 redis.call('ZCARD', KEYS[5]), 0, size, free, -1}
  for i = 1, math.min(#holders, 8) do reply[#reply + 1] = holders[i] end
  return reply
end

if op == 'force' then
  -- operators: drop every permit (their holders learn at their next renewal) and serve the
  -- queue as releases would; replies the number of holds dropped
  local now_ms, now_us = clock()
  local dropped = 0
  local all = redis.call('ZRANGE', KEYS[2], 0, -1)
  for _, m in ipairs(all) do
    local n = parse_holder(redis.call('HGET', KEYS[3], m))
    if n and n > 0 then dropped = dropped + 1 end
  end
  redis.call('DEL', KEYS[2], KEYS[3])
  local size = tonumber(redis.call('HGET', KEYS[1], 's'))
  if size then serve(size, 0, now_ms, now_us) end
  return dropped
end

if op == 'init' then
  return size_of() or -1
end

if op == 'val' then
  local now_ms, now_us = clock()
  local size = size_of()
  if not size then return -1 end
  local taken = serve(size, count_taken(now_ms), now_ms, now_us)
  return {size, taken}
end

if op == 'size' then
  local size = tonumber(ARGV[9])
  if not size or size < 1 then
    return redis.error_reply('ERR redisync semaphore: the size must be at least 1')
  end
  redis.call('HSET', KEYS[1], 's', fmt(size))
  redis.call('PEXPIRE', KEYS[1], SIZE_TTL)
  local now_ms, now_us = clock()
  serve(size, count_taken(now_ms), now_ms, now_us, true)
  return 1
end

return redis.error_reply('ERR redisync semaphore: unknown op ' .. tostring(op))
