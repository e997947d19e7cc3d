-- rwlock.lua - the distributed read-write lock: shared readers, one exclusive writer, one FIFO
-- queue for both (a queued writer holds back every later reader, so writers never starve),
-- direct handoff. Run with EVALSHA by primitives/rwlock/rwlock.c; see docs/scripts.md.
--
-- KEYS[1] main    hash   the writer: o = SHA1(owner token), a = acquisition id, f = fencing
--                        token, x = lease expiry (server ms), n = write hold count, e = id of
--                        the last enter/leave call; r = id of the last released write
--                        acquisition (a retried release is not mistaken for a lost hold);
--                        g = a token: the writer's, or the one of the read grant that created
--                        the key (the latest token is the fencing counter); "r:TOKENHASH" =
--                        the id of that owner's last released read hold. Its TTL covers every
--                        live hold (readers' too) and the tombstones, so the key exists
--                        whenever the lock is held
-- KEYS[2] fence   string the per-name fencing counter (30-day TTL, set again daily on use)
-- KEYS[3] queue   zset   acquisition id -> arrival number (FIFO order, readers and writers)
-- KEYS[4] qinfo   hash   acquisition id -> "EXPIRYMS LEASEMS TOKENHASH MODE" (entry lease)
-- KEYS[5] readers zset   TOKENHASH -> lease expiry (server ms) of that owner's read hold;
--                        "r:TOKENHASH" -> expiry of that owner's read tombstone (one per
--                        owner; "r:ACQID" ones, one per release, of the earlier layout are
--                        still understood)
-- KEYS[6] rinfo   hash   TOKENHASH -> "ACQID COUNT FENCE LASTCALL" (read holds only)
--
-- ARGV[1] op: acq | renew | rel | qrenew | cancel | enter | leave | info | force
-- ARGV[2] owner token (raw; only its SHA1 is stored)
-- ARGV[3] acquisition id "PUBLICID:N" (wake-ups: wake() in common.lua)
-- ARGV[4] lease ms
-- ARGV[5] channel prefix, e.g. "rs:client:"
-- ARGV[6] (acq) "q": queue when busy, "t": try only
-- ARGV[7] (acq) max waiters
-- ARGV[8] (acq, qrenew) queue entry lease ms
-- ARGV[9] mode: "r" read hold, "w" write hold (every op but info and force)
-- ARGV[10] (enter, leave) id of this call (a retry of it is recognised)
--
-- One read hold and one write hold at most per owner (thread); every hold is a lease of its
-- own. Admission: a writer when nobody holds, a reader when no writer holds, and in both
-- cases only if nobody live is queued ahead. An owner that holds the write lock is given a
-- read hold at once (downgrade); an owner holding a read hold is refused the write lock.
--
-- Replies:
--   acq     {1, fence, ttlms} granted (also when already granted to this id);
--           {0, ttlms, queued, fence_counter} busy, ttlms = when a retry may succeed without
--           a message;
--           {-1} refused: this owner holds it under another id, or asks write holding read;
--           error "RSQUEUE ..." when the queue is full
--   renew   1 renewed, 0 not ours any more
--   rel     1 released (all re-entries; waiters admitted), 0 not ours (the hold was lost)
--   qrenew  1 entry renewed, 2 granted to this id meanwhile, 0 entry gone
--   cancel  {1, fence, ttlms} it was granted to this id (keep it); {0} left the queue
--   enter   the new hold count (re-entry), 0 not ours any more
--   leave   the new hold count (>= 1; the last unlock is rel), 0 not ours any more
--   info    {exists, nholders, ttl, fence, waiters, writer, -1, -1, -1, holder acqids...}
--           (read-only; the inspection reply every script shares, see primitives/inspect.c):
--           holders are owner threads, the writer first, then up to 8 readers by lease end
--   force   operators: drops every hold (their holders learn at their next renewal) and
--           admits the queue's head as a release would; reply: the holds dropped
--
-- A release (and a cancel, a force, or an acq that finds the lock free) admits the queue from
-- its head: every reader up to the first writer while no writer holds, else the head writer
-- once nobody holds; each one admitted gets one message "ACQID FENCE" on its client's
-- channel. Every key's type is checked before the first write (a script that fails half-way
-- keeps its earlier writes), releases free memory before they allocate (under noeviction a
-- script fails at its first allocating write), and time comes only from the server (TIME).

local TOMB_MS = 10000
local MAX_LISTED = 8
local op, mode = ARGV[1], ARGV[9]

-- The helpers of primitives/core.lua (fmt, clock, extend_lazily, next_fence) come before this
-- text; those of primitives/common.lua (q_*, wrong_type) at the line "-- @common" below.

local function is_tomb(m)
  return string.sub(m, 1, 2) == 'r:'
end

-- What this call has read, kept while valid so that no key is read twice: every write of
-- what a cache holds updates it or forgets it (nil: not known).
--   wf     the writer's fields {o, a, f, x} of the main key (false where absent)
--   rd     {tok, info} of the last reader_c() read (info false: no read hold)
--   nr     the number of read holds (HLEN of rinfo)
local wf, rd, nr
local granted -- a grant of this call has moved the fencing counter
-- The TTL (ms) the main key is known to have at least since a release of this call extended
-- it for its tombstone (the key keeps that tombstone since, so it is not deleted); 0: not
-- known. A writer granted right after, with a lease no longer, needs no PTTL of its own.
local kept_main = 0

-- The owner's read hold: acqid, count, fence, last call id (or nil).
local function reader(tok)
  local info = redis.call('HGET', KEYS[6], tok)
  if not info then return nil end
  return string.match(info, '^(%S+) (%d+) (%d+) (%S+)$')
end

local function set_reader(tok, acq, n, f, last)
  rd, nr = nil, nil
  redis.call('HSET', KEYS[6], tok, acq .. ' ' .. fmt(n) .. ' ' .. f .. ' ' .. last)
end

-- Drops the read holds whose lease ran out and the old read tombstones. old: what
-- ZRANGEBYSCORE rd -inf now_ms has just replied, if the caller has read it.
local function purge_readers(now_ms, old)
  old = old or redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', fmt(now_ms))
  if #old == 0 then return end
  rd, nr = nil, nil
  for _, m in ipairs(old) do
    -- a tombstone's released id is a field of the main key (see release_reader)
    if is_tomb(m) then redis.call('HDEL', KEYS[1], m) else redis.call('HDEL', KEYS[6], m) end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', fmt(now_ms))
end

local function grant_writer(tok, acq, lease, now_ms, now_us)
  granted = true
  local f = next_fence(KEYS[2], now_us) -- 'g' goes with the hold's fields, in one call
  local x = fmt(now_ms + tonumber(lease))
  redis.call('HSET', KEYS[1], 'o', tok, 'a', acq, 'f', f, 'x', x, 'n', '1', 'e', '-', 'g', f)
  wf = nil -- read again if needed (the fast paths return at once: no table to build)
  if tonumber(lease) > kept_main then extend_lazily(KEYS[1], tonumber(lease)) end
  return f
end

local function grant_reader(tok, acq, lease, now_ms, now_us)
  lease = tonumber(lease)
  granted = true
  local f = next_fence(KEYS[2], now_us)
  set_reader(tok, acq, 1, f, '-')
  redis.call('ZADD', KEYS[5], fmt(now_ms + lease), tok)
  -- the main key exists whenever the lock is held (rs_list finds locks by it): a reader
  -- creates it when absent ('g'); otherwise, as in extend_lazily, it is only read
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -2 then redis.call('HSET', KEYS[1], 'g', f) end
  if ttl < lease then redis.call('PEXPIRE', KEYS[1], fmt(lease + math.floor(lease / 2))) end
  extend_lazily(KEYS[5], lease)
  extend_lazily(KEYS[6], lease)
  return f
end

-- Releases the write hold (its checks done) and remembers the release for a while, so that
-- a retry of it is not taken for a loss.
-- (The fast path returns right after; the full path calls no_writer() itself.)
local function release_writer()
  redis.call('HDEL', KEYS[1], 'o', 'a', 'f', 'x', 'n', 'e')
  if type(redis.pcall('HSET', KEYS[1], 'r', ARGV[3])) == 'number' then
    kept_main = math.max(tonumber(ARGV[4]), TOMB_MS)
    extend_lazily(KEYS[1], kept_main)
  end
end

-- Releases tok's read hold (its checks done), leaving a tombstone "r:ACQID" for the same.
-- One tombstone per owner, not per release: "r:TOKENHASH" in rd (its expiry) and in the
-- main key (the id released last), so that a busy lock's keys do not grow with its read
-- rate; a thread retries a release before it can take anything else.
local function release_reader(tok, now_ms)
  local tomb_ms = math.max(tonumber(ARGV[4]), TOMB_MS)
  local tomb = 'r:' .. tok
  rd, nr = nil, nil
  redis.call('HDEL', KEYS[6], tok)
  redis.call('ZREM', KEYS[5], tok)
  if type(redis.pcall('ZADD', KEYS[5], fmt(now_ms + tomb_ms), tomb)) == 'number' then
    if type(redis.pcall('HSET', KEYS[1], tomb, ARGV[3])) == 'number' then
      extend_lazily(KEYS[5], tomb_ms)
      extend_lazily(KEYS[1], tomb_ms)
      kept_main = tomb_ms
    else
      redis.call('ZREM', KEYS[5], tomb)
    end
  end
end

-- The uncontended acquire and release, first and in as few calls as possible: nobody queued,
-- nothing to purge, refuse or admit. They return before the helpers below are defined
-- (docs/performance.md, "Uncontended cost per primitive"). Their reads check the type of
-- every key they write before the first write; anything else falls through to the full
-- paths, which purge, check every key and admit waiters.
-- What they read is kept for the full path: the writer's fields (wf), the queue's first id
-- (qfirst; false: the queue is empty) and the clock.
local qfirst, fast_ms, fast_us
local th -- SHA1 of the owner token, once computed (about 6,000 server instructions a time)
if (op == 'acq' or op == 'rel') and (mode == 'r' or mode == 'w') then
  th = redis.sha1hex(ARGV[2])
  local tokhash = th
  local try = op == 'acq' and (ARGV[6] == 'q' or ARGV[6] == 't')
  if try then wf = redis.call('HMGET', KEYS[1], 'o', 'a', 'f', 'x') end
  if try and not wf[1] and -- no writer, live or lapsed
      redis.call('ZCARD', KEYS[3]) == 0 and
      (mode == 'w' and redis.call('HLEN', KEYS[6]) == 0 or -- no read hold, live or lapsed
       mode == 'r' and redis.call('HEXISTS', KEYS[6], tokhash) == 0) then -- not its own
    redis.call('ZCARD', KEYS[5]) -- its type, as a reader's grant writes it
    local now_ms, now_us = clock()
    local f
    if mode == 'w' then
      f = grant_writer(tokhash, ARGV[3], ARGV[4], now_ms, now_us)
    else
      f = grant_reader(tokhash, ARGV[3], ARGV[4], now_ms, now_us)
    end
    return {1, f, tonumber(ARGV[4])}
  end
  if op == 'rel' then
    fast_ms, fast_us = clock()
    local now_ms = fast_ms
    if mode == 'w' then
      wf = redis.call('HMGET', KEYS[1], 'o', 'a', 'f', 'x')
      local w = wf
      if w[1] == tokhash and w[2] == ARGV[3] and (tonumber(w[4]) or 0) > now_ms then
        qfirst = redis.call('ZRANGE', KEYS[3], '0', '0')[1] or false
        if not qfirst then
          release_writer()
          return 1
        end
      end
    elseif reader(tokhash) == ARGV[3] and
        (tonumber(redis.call('ZSCORE', KEYS[5], tokhash)) or 0) > now_ms and
        redis.call('ZCARD', KEYS[3]) == 0 and
        redis.call('HEXISTS', KEYS[1], 'o') >= 0 then -- the main key's type: written below
      purge_readers(now_ms) -- or a workload of readers alone would grow the zset
      release_reader(tokhash, now_ms)
      return 1
    end
  end
end

-- @common

-- An acq behind another owner's live write hold, with nothing to purge: nothing can be
-- granted (readers and writers are both admitted only without a writer), refused (a read
-- hold of the caller never coexists with another owner's write hold: a writer is admitted
-- only without read holds, after the purge) or answered as a retry, and nothing is written
-- before q_add's own reads (ZRANGE of the queue, then HSET of its info, which fails on
-- another type before it writes; the read holds' records are not touched): the caller is
-- answered busy and queued here, before the full path's helpers are made (each `local
-- function` is a closure made anew on every call) and without the queue's head, its entry
-- and its own read hold being read. wf: the fast path's read of the writer's fields.
local old -- the read holds and tombstones due (ZRANGEBYSCORE rd -inf now), if read here
if op == 'acq' and wf and wf[1] and wf[1] ~= th then
  fast_ms, fast_us = clock()
  local x = tonumber(wf[4]) or 0
  if x > fast_ms then
    old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', fmt(fast_ms))
    if #old == 0 then
      local seen = redis.call('GET', KEYS[2]) or '0' -- stale wake-ups carry no more (lib/wait.c)
      local ttl = x - fast_ms
      if ARGV[6] ~= 'q' then return {0, ttl, 0, seen} end
      local ql = tonumber(ARGV[8])
      local e = q_add(KEYS[3], KEYS[4], ARGV[3],
                      fmt(fast_ms + ql) .. ' ' .. ARGV[4] .. ' ' .. th .. ' ' .. mode,
                      tonumber(ARGV[7]), ql, fast_ms)
      if e then return e end
      return {0, ttl, 1, seen}
    end
  end
end

-- The writer's fields, read once.
local function writer()
  if not wf then wf = redis.call('HMGET', KEYS[1], 'o', 'a', 'f', 'x') end
  return wf
end

local function no_writer()
  wf = {false, false, false, false}
end

-- reader(), its reply kept in rd for the next call on the same owner.
local function reader_c(tok)
  if not rd or rd[1] ~= tok then rd = {tok, redis.call('HGET', KEYS[6], tok) or false} end
  if not rd[2] then return nil end
  return string.match(rd[2], '^(%S+) (%d+) (%d+) (%S+)$')
end

-- The keys this call has read with a command of their type (so checked): the type checks
-- before the first write TYPE only the others.
local typed = {}

local function check_types()
  return wrong_type({'hash', 'string', 'zset', 'hash', 'zset', 'hash'}, 'rwlock', typed)
end

-- Drops the holds whose lease ran out (and old read tombstones). old: as purge_readers.
local function purge(now_ms, old)
  local w = writer()
  if w[1] and (tonumber(w[4]) or 0) <= now_ms then
    no_writer()
    redis.call('HDEL', KEYS[1], 'o', 'a', 'f', 'x', 'n', 'e')
  end
  purge_readers(now_ms, old)
end

-- (after purge) whether a writer holds, and how many read holds there are
local function has_writer()
  return writer()[1] and true or false
end

local function nreaders()
  if not nr then nr = redis.call('HLEN', KEYS[6]) end
  return nr
end

-- If tok holds the hold of mode m under acq: its fence and ms of lease left.
local function held_by(m, tok, acq, now_ms)
  if m == 'w' then
    local w = writer()
    local x = tonumber(w[4]) or 0
    if w[1] == tok and w[2] == acq and x > now_ms then return w[3], x - now_ms end
    return nil
  end
  local racq, _, rf = reader_c(tok)
  if racq ~= acq then return nil end
  local exp = tonumber(redis.call('ZSCORE', KEYS[5], tok)) or 0
  if exp <= now_ms then return nil end
  return rf, exp - now_ms
end

-- The queue's first entry as last read: qfirst (false: empty; nil: not known) and its info
-- (qinfo, or nil), forgotten at every write of the queue.
local qinfo

local function drop(acq)
  qfirst, qinfo = nil, nil
  q_drop(KEYS[3], KEYS[4], acq)
end

local function live_head(now_ms)
  if qfirst == false then return nil end
  local head, info = q_live_head(KEYS[3], KEYS[4], now_ms, qfirst, qinfo)
  qfirst, qinfo = head or false, info
  return head, info
end

-- (after purge) Admits waiters from the head of the queue as far as the lock allows: every
-- reader up to the first writer while no writer holds, or the head writer once nobody holds.
-- Each one admitted is told with one message on its client's channel (but skip, the caller).
local function promote(now_ms, now_us, skip)
  if has_writer() then return end
  while true do
    local head, info = live_head(now_ms)
    if not head then return end
    local _, lease, tok, m = string.match(info, '^(%d+) (%d+) (%x+) ([rw])$')
    if not m then
      drop(head)
    else
      if m == 'w' and nreaders() > 0 then return end
      local f
      if m == 'w' then
        f = grant_writer(tok, head, lease, now_ms, now_us)
      else
        f = grant_reader(tok, head, lease, now_ms, now_us)
      end
      drop(head)
      if head ~= skip then
        wake(ARGV[5], KEYS[1], head, head .. ' ' .. f)
      end
      if m == 'w' then return end
    end
  end
end

-- The first live read holds, by lease end: a list of {tokhash, expiry}. Tombstones share the
-- zset, so at most `scan` entries are looked at.
local function first_readers(now_ms, want, scan)
  local a = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. fmt(now_ms), '+inf', 'WITHSCORES',
                       'LIMIT', 0, scan)
  local out = {}
  for i = 1, #a, 2 do
    if #out >= want then break end
    if not is_tomb(a[i]) then out[#out + 1] = {a[i], tonumber(a[i + 1])} end
  end
  return out
end

-- (after purge) How long until a busy caller may succeed without being told: the writer's
-- lease, or the first read lease to run out (a crashed holder is released by nobody); the
-- caller's own lease if the first read holds are hidden behind tombstones.
local function busy_ttl(now_ms)
  local x = tonumber(writer()[4])
  if has_writer() and x then return math.max(x - now_ms, 1) end
  local r = first_readers(now_ms, 1, 32)[1]
  if r then return math.max(r[2] - now_ms, 1) end
  return tonumber(ARGV[4])
end

local function entry(tokhash, now_ms)
  return fmt(now_ms + tonumber(ARGV[8])) .. ' ' .. ARGV[4] .. ' ' .. tokhash .. ' ' .. mode
end

local function enqueue(tokhash, now_ms)
  qfirst, qinfo = nil, nil
  return q_add(KEYS[3], KEYS[4], ARGV[3], entry(tokhash, now_ms), tonumber(ARGV[7]),
               tonumber(ARGV[8]), now_ms)
end

-- acq, rel and cancel check the types after the reads below; the other ops here
local hot = op == 'acq' or op == 'rel' or op == 'cancel'
if not hot then
  local err = check_types()
  if err then return err end
end

if op == 'info' then
  -- read-only: expired holds are skipped, not purged
  local now_ms = clock()
  local exists = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  local w = redis.call('HMGET', KEYS[1], 'o', 'a', 'f', 'x', 'g')
  local x = tonumber(w[4]) or 0
  local writer = w[1] ~= nil and x > now_ms
  local nheld, ttl, holders = 0, -1, {}
  if writer then
    nheld, ttl, holders[1] = 1, x - now_ms, w[2]
  end
  -- live read holds: all of rinfo but those whose lease ran out (and the writer's own)
  local nr = redis.call('HLEN', KEYS[6])
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', fmt(now_ms))) do
    if not is_tomb(m) and redis.call('HEXISTS', KEYS[6], m) == 1 then nr = nr - 1 end
  end
  if writer and (tonumber(redis.call('ZSCORE', KEYS[5], w[1])) or 0) > now_ms then nr = nr - 1 end
  nheld = nheld + math.max(nr, 0)
  for _, r in ipairs(first_readers(now_ms, MAX_LISTED, 4 * MAX_LISTED + 64)) do
    if #holders >= MAX_LISTED then break end
    if not (writer and r[1] == w[1]) then
      local racq = reader_c(r[1])
      if racq then
        holders[#holders + 1] = racq
        if ttl < 0 then ttl = r[2] - now_ms end
      end
    end
  end
  if #holders < math.min(nheld, MAX_LISTED) then
    -- read leases hidden behind tombstones: fill the list from rinfo, unordered
    local seen = {}
    for _, h in ipairs(holders) do seen[h] = true end
    local page = redis.call('HSCAN', KEYS[6], 0, 'COUNT', 4 * MAX_LISTED)[2]
    for i = 1, #page, 2 do
      if #holders >= MAX_LISTED then break end
      local racq = string.match(page[i + 1], '^(%S+) ')
      local exp = tonumber(redis.call('ZSCORE', KEYS[5], page[i])) or 0
      if racq and not seen[racq] and exp > now_ms and not (writer and page[i] == w[1]) then
        holders[#holders + 1] = racq
        if ttl < 0 then ttl = exp - now_ms end
      end
    end
  end
  local fence = (writer and w[3]) or redis.call('GET', KEYS[2]) or w[5] or '0'
  local reply = {exists > 0 and 1 or 0, nheld, ttl, fence, redis.call('ZCARD', KEYS[3]),
                 writer and 1 or 0, -1, -1, -1}
  for _, h in ipairs(holders) do reply[#reply + 1] = h end
  return reply
end

if op ~= 'force' and mode ~= 'r' and mode ~= 'w' then
  return redis.error_reply('ERR redisync rwlock: mode must be r or w, got ' .. tostring(mode))
end
local tokhash = th or redis.sha1hex(ARGV[2])

if op == 'renew' then
  local now_ms = clock()
  if not held_by(mode, tokhash, ARGV[3], now_ms) then return 0 end
  local lease = tonumber(ARGV[4])
  if mode == 'w' then
    redis.call('HSET', KEYS[1], 'x', fmt(now_ms + lease))
    wf = nil
  else
    redis.call('ZADD', KEYS[5], fmt(now_ms + lease), tokhash)
    extend_lazily(KEYS[5], lease)
    extend_lazily(KEYS[6], lease)
  end
  extend_lazily(KEYS[1], lease)
  return 1
end

if op == 'qrenew' then
  local now_ms = clock()
  if held_by(mode, tokhash, ARGV[3], now_ms) then return 2 end
  if not redis.call('HGET', KEYS[4], ARGV[3]) then return 0 end
  redis.call('HSET', KEYS[4], ARGV[3], entry(tokhash, now_ms))
  q_keep(KEYS[3], KEYS[4], 2 * tonumber(ARGV[8]))
  return 1
end

if op == 'enter' or op == 'leave' then
  local call = ARGV[10]
  if not call or call == '' or call == '-' then
    return redis.error_reply('ERR redisync rwlock: enter/leave need a call id')
  end
  local now_ms = clock()
  if not held_by(mode, tokhash, ARGV[3], now_ms) then return 0 end
  local racq, rn, rf, last
  if mode == 'w' then
    local x = redis.call('HMGET', KEYS[1], 'n', 'e')
    rn, last = x[1], x[2]
  else
    racq, rn, rf, last = reader_c(tokhash)
  end
  local n = tonumber(rn) or 1
  if last == call then return n end
  if op == 'enter' then n = n + 1 elseif n > 1 then n = n - 1 end
  if mode == 'w' then
    redis.call('HSET', KEYS[1], 'n', fmt(n), 'e', call)
  else
    set_reader(tokhash, racq, n, rf, call)
  end
  return n
end

local now_ms, now_us = fast_ms, fast_us
if not now_ms then now_ms, now_us = clock() end
-- acq, rel, cancel: read first what they read anyway (each read checks its key's type), so
-- that the type checks before the first write (purge's) TYPE no key in the common cases
old = old or redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', fmt(now_ms))
local seen
if hot then
  writer()
  typed[1], typed[5] = true, true
  if qfirst == nil then qfirst = redis.call('ZRANGE', KEYS[3], '0', '0')[1] or false end
  typed[3] = true
  if qfirst then
    qinfo = redis.call('HGET', KEYS[4], qfirst)
    typed[4] = true
  end
  if op ~= 'rel' or mode == 'r' then
    reader_c(tokhash)
  else
    nreaders()
  end
  typed[6] = true
  if op == 'acq' then
    -- the counter a queued caller is told (below); read again if a grant moves it
    seen = redis.call('GET', KEYS[2]) or '0'
    typed[2] = true
  end
  local err = check_types()
  if err then return err end
end
purge(now_ms, old)

if op == 'acq' then
  local f, ttl = held_by(mode, tokhash, ARGV[3], now_ms)
  if f then return {1, f, ttl} end
  local wo = writer()[1]
  local racq = reader_c(tokhash)
  if mode == 'w' then
    -- held under another id (another handle), or an upgrade: both would wait for ourselves
    if wo == tokhash or racq then return {-1} end
  else
    if racq then return {-1} end
    if wo == tokhash then
      -- the writer takes a read hold at once, whatever is queued (downgrade)
      return {1, grant_reader(tokhash, ARGV[3], ARGV[4], now_ms, now_us), tonumber(ARGV[4])}
    end
  end
  -- admit whoever the queue's head allows first (the lock may have been freed by a lease
  -- that ran out, with nobody to hand it on); that may be the caller itself
  promote(now_ms, now_us, ARGV[3])
  f, ttl = held_by(mode, tokhash, ARGV[3], now_ms)
  if f then return {1, f, ttl} end
  if not has_writer() and not live_head(now_ms) and (mode == 'r' or nreaders() == 0) then
    if mode == 'w' then
      f = grant_writer(tokhash, ARGV[3], ARGV[4], now_ms, now_us)
    else
      f = grant_reader(tokhash, ARGV[3], ARGV[4], now_ms, now_us)
    end
    drop(ARGV[3])
    return {1, f, tonumber(ARGV[4])}
  end
  ttl = busy_ttl(now_ms)
  -- stale wake-ups carry no more (lib/wait.c)
  if granted then seen = redis.call('GET', KEYS[2]) or '0' end
  if ARGV[6] ~= 'q' then return {0, ttl, 0, seen} end
  local e = enqueue(tokhash, now_ms)
  if e then return e end
  return {0, ttl, 1, seen}
end

if op == 'rel' then
  if mode == 'w' then
    if held_by('w', tokhash, ARGV[3], now_ms) then
      release_writer()
      no_writer()
      promote(now_ms, now_us, nil)
      return 1
    end
    if redis.call('HGET', KEYS[1], 'r') == ARGV[3] then return 1 end
    return 0
  end
  if held_by('r', tokhash, ARGV[3], now_ms) then
    release_reader(tokhash, now_ms)
    promote(now_ms, now_us, nil)
    return 1
  end
  -- released by this owner already: a retried release (or a tombstone of the earlier layout,
  -- one per released id)
  local tomb = 'r:' .. tokhash
  if redis.call('HGET', KEYS[1], tomb) == ARGV[3] and
      (tonumber(redis.call('ZSCORE', KEYS[5], tomb)) or 0) > now_ms then
    return 1
  end
  if redis.call('ZSCORE', KEYS[5], 'r:' .. ARGV[3]) then return 1 end
  return 0
end

if op == 'cancel' then
  local f, ttl = held_by(mode, tokhash, ARGV[3], now_ms)
  if f then return {1, f, ttl} end
  drop(ARGV[3])
  -- leaving may unblock those behind (e.g. readers queued behind this writer)
  promote(now_ms, now_us, nil)
  return {0}
end

if op == 'force' then
  local n = 0
  if has_writer() then
    no_writer()
    redis.call('HDEL', KEYS[1], 'o', 'a', 'f', 'x', 'n', 'e')
    n = 1
  end
  local readers = redis.call('HKEYS', KEYS[6])
  for _, tok in ipairs(readers) do redis.call('ZREM', KEYS[5], tok) end
  rd, nr = nil, nil
  redis.call('DEL', KEYS[6])
  n = n + #readers
  promote(now_ms, now_us, nil)
  return n
end

return redis.error_reply('ERR redisync rwlock: unknown op ' .. tostring(op))
