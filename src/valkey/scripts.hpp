// The queue's transitions as Lua scripts, one per operation and one per
// batch (ECHOMQ.md, docs/valkey.md).
//
// Every script gets the queue's fixed keys as KEYS[1..NFIXED] (order in
// kFixedKeys) and then the keys its arguments name: the job key for
// complete/fail/extend/release/job, the lane's pending key for the lane
// controls, both for enqueue, one or two per item for the batches. Keys a
// script can only know once it runs (the group the ring lands on, the jobs
// a claim pops, a reap or promote returns, or a drain deletes) are built
// inside from the `emq:{Q}:` prefix: they carry the same {Q} hash tag, so
// they live in the same Cluster slot as every declared key.
//
// A live reshard (docs/valkey.md, "Cluster"): the last fixed key, `fl:guard`,
// never exists. A node whose slot is migrating answers a command with a
// declared key it does not hold with ASK (or TRYAGAIN), and the importing
// node answers a multi-key command with a missing key with TRYAGAIN, so no
// script of ours runs anywhere while the queue's slot is open: every script
// sees either all of the queue's keys or none, and the client waits the
// migration out. Inside, the scripts still look before they change: a ring
// group whose lane is not there, or an id whose row is not there, is
// answered FLRETRY before anything was written (a key the script could not
// see decides nothing); only a client that got FLRETRY several times in a
// row (no migration explains it: the keyspace itself is inconsistent) sends
// the flag `r` that lets the script drop such a dangling entry.
//
// Invariant kept by every script: a group is on the ring iff its lane is
// serviceable (nonempty, unpaused, below its limit). So a change that makes
// a lane serviceable while it was not before pushes it to the ring's tail
// without an O(ring) LPOS, and the lane is never serviceable but off the
// ring (no lost wake-ups).
//
// Fencing (docs/valkey.md, "Fencing on a shared keyspace"): EchoMQ's
// `attempts` is incremented by every claim, ours and EchoMQ's, and never
// goes back; fairlane's own token lives in the row (`fl_token`, with
// `fl_at` = the attempts it was minted at), drawn from the per-queue counter
// meta.fl_token_seq, offset by 2^32 so that it never equals an attempts
// count. `fl_skip` counts attempts increments that were no delivery (a
// release, a requeue of a dead job): the delivery count is attempts - fl_skip.
//
// Numbers in Lua are doubles: every value here (ms timestamps ~2^41,
// tokens 2^32 + n, counts) is exact below 2^53. Snowflakes (2^63) are never
// formed in Lua: mint returns (ms, seq) and the client packs them.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace fairlane::valkey {

inline constexpr std::array<std::string_view, 18> kFixedKeys = {
    "ring", "active", "gactive", "glimit", "gweight", "paused", "meta", "schedule", "dead", "wake",
    "served", "counters", "groups", "pending", "metrics:completed", "metrics:failed", "gjobs", "fl:guard"};

// Shared by every script, the mirror's too.
inline constexpr std::string_view kPrelude = R"lua(
local RING, ACTIVE, GACTIVE, GLIMIT, GWEIGHT, PAUSED, META = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local SCHEDULE, DEAD, WAKE, SERVED, COUNTERS, GROUPS = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local FLAT, MDONE, MFAILED, GJOBS = KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local NFIXED = 18
-- "emq:{Q}:" from "emq:{Q}:ring": keys built from it share the {Q} hash tag
-- (the same Cluster slot as every key in KEYS).
local PREFIX = string.sub(RING, 1, -5)
local function lane_key(g) return PREFIX .. 'g:' .. g .. ':pending' end
local function job_key(id) return PREFIX .. 'job:' .. id end
local function num(v) return tonumber(v) or 0 end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + num(redis.call('HGET', META, 'clock_offset_ms'))
end
local function bump(field, n)
  if n > 0 then redis.call('HINCRBY', COUNTERS, field, n) end
end
local function register(g) redis.call('ZADD', GROUPS, 'NX', 0, g) end
local function wake(n)
  local t = {}
  for i = 1, n do t[i] = '1' end
  redis.call('LPUSH', WAKE, unpack(t))
  redis.call('LTRIM', WAKE, 0, 63)
end
local function weight_of(g)
  local w = num(redis.call('HGET', GWEIGHT, g))
  if w < 1 then return 1 end
  return w
end
local function serviceable(g)
  if redis.call('SISMEMBER', PAUSED, g) == 1 then return false end
  local lim = num(redis.call('HGET', GLIMIT, g))
  if lim > 0 and num(redis.call('HGET', GACTIVE, g)) >= lim then return false end
  return redis.call('ZCARD', lane_key(g)) > 0
end
-- After a change: a lane that was not serviceable before (so off the ring)
-- and is now goes to the ring's tail, with a wake.
local function ring_if_now(g, was)
  if not was and serviceable(g) then
    redis.call('RPUSH', RING, g)
    wake(1)
  end
end
-- Defensive form for administration: looks before pushing.
local function ring_if_serviceable(g)
  if serviceable(g) and not redis.call('LPOS', RING, g) then
    redis.call('RPUSH', RING, g)
    wake(1)
  end
end
local function unring(g)
  redis.call('LREM', RING, 0, g)
  if redis.call('HGET', META, 'turn_group') == g then redis.call('HDEL', META, 'turn_group', 'turn_left') end
end
local function release_active(g)
  if redis.call('HINCRBY', GACTIVE, g, -1) <= 0 then redis.call('HDEL', GACTIVE, g) end
end
local function has_settings(g)
  if redis.call('HEXISTS', GLIMIT, g) == 1 then return true end
  if num(redis.call('HGET', GWEIGHT, g)) > 1 then return true end
  return redis.call('SISMEMBER', PAUSED, g) == 1
end
-- A group with no job (pending, active, scheduled or dead, as far as
-- fairlane counted them in gjobs) and no setting is forgotten: its entries
-- in groups, served and gjobs go, so that bookkeeping does not grow with
-- every tenant ever seen. A group that comes back starts counting again.
local function maybe_forget(g)
  if not g then return end
  if redis.call('EXISTS', lane_key(g)) == 1 or redis.call('HEXISTS', GACTIVE, g) == 1 then return end
  if num(redis.call('HGET', GJOBS, g)) > 0 or has_settings(g) then return end
  redis.call('ZREM', GROUPS, g)
  redis.call('HDEL', SERVED, g)
  redis.call('HDEL', GJOBS, g)
  redis.call('HDEL', GWEIGHT, g)
  if redis.call('HGET', META, 'turn_group') == g then redis.call('HDEL', META, 'turn_group', 'turn_left') end
end
local function job_added(g, n)
  if g then
    register(g)
    redis.call('HINCRBY', GJOBS, g, n)
  end
end
-- n jobs of group g left the queue (completed, drained, purged).
local function job_gone(g, n)
  if not g then return end
  if n > 0 and redis.call('HINCRBY', GJOBS, g, -n) <= 0 then redis.call('HDEL', GJOBS, g) end
  maybe_forget(g)
end
-- Back to pending at score 0 (its mint position): its lane, or EchoMQ's
-- flat `pending` for a job without a group.
local function to_lane(id, g, now)
  redis.call('HSET', job_key(id), 'state', 'pending', 'ready_ms', now)
  if g then
    redis.call('ZADD', lane_key(g), 0, id)
  else
    redis.call('ZADD', FLAT, 0, id)
  end
end
-- Dead letter, as EchoMQ keeps it: dead at score 0 (listed in id order),
-- metrics:failed counted; the time of death in fl's own field.
local function dead_letter(id, err, now)
  redis.call('HSET', job_key(id), 'state', 'dead', 'last_error', err, 'dead_ms', now)
  redis.call('ZADD', DEAD, 0, id)
  redis.call('HINCRBY', MFAILED, 'count', 1)
  bump('dead', 1)
end
)lua";

// Every script of the backend (not the mirror's) takes its flags first:
// ARGV[1] is a string of letters, `f` force (write to a mirror's keyspace),
// `r` repair (drop dangling entries instead of answering FLRETRY).
inline constexpr std::string_view kBackendPrelude = R"lua(
local FLAGS = table.remove(ARGV, 1) or ''
local FORCE = string.find(FLAGS, 'f', 1, true) ~= nil
local REPAIR = string.find(FLAGS, 'r', 1, true) ~= nil
local TOKEN_BASE = 4294967296
-- A segment mirrors into this keyspace (meta `owner`): a write through the
-- backend would fork the truth, so every write refuses unless forced.
local function writable()
  if FORCE then return end
  local owner = redis.call('HGET', META, 'owner')
  if owner then error({err = 'FLREADONLY ' .. owner .. ';'}) end
end
local function retry(why) error({err = 'FLRETRY ' .. why}) end
-- Is the lease (state, attempts, fl_token, fl_at) held under `tok`? A
-- fairlane token (>= 2^32) must be the row's and minted at the current
-- attempts (else an EchoMQ claim came since); a smaller one is EchoMQ's
-- attempts and fences only a lease EchoMQ took.
local function fenced(st, att, flt, flat_, tok)
  if st ~= 'active' or not tok then return false end
  local a = num(att)
  if tok >= TOKEN_BASE then return flt ~= false and tonumber(flt) == tok and num(flat_) == a end
  return tok == a and (flt == false or num(flat_) ~= a)
end
local function policy(s)
  if not s or s == '' then return nil end
  local t = {}
  for part in string.gmatch(s, '[^;]+') do t[#t + 1] = part end
  return {max = tonumber(t[1]) or 0, kind = t[2] or '-', base = tonumber(t[3]) or 0, cap = tonumber(t[4]) or 0,
          factor = tonumber(t[5]) or 1, jitter = tonumber(t[6]) or 0}
end
-- Backoff::delay (retry.cpp), the same arithmetic.
local function backoff_ms(p, n, u)
  if n < 1 then n = 1 end
  local d = math.max(0, p.base)
  if p.kind == 'e' then d = math.min(d * math.max(1, p.factor) ^ (n - 1), math.max(0, p.cap)) end
  local j = math.min(math.max(p.jitter, 0), 1)
  if j > 0 then d = d - d * j * math.min(math.max(u, 0), 1) end
  return math.floor(math.max(0, d) + 0.5)
end
-- Rows of `ids` must all be there before anything moves.
local function rows_present(ids, what)
  for _, id in ipairs(ids) do
    if redis.call('EXISTS', job_key(id)) == 0 and not REPAIR then retry(what .. ' ' .. id .. ' has no job row') end
  end
end
-- Due scheduled jobs go back to their lanes (flat ones to `pending`).
-- max < 0: all of them.
local function promote(now, max)
  local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'LIMIT', 0, max)
  rows_present(due, 'scheduled')
  local moved = 0
  for _, id in ipairs(due) do
    redis.call('ZREM', SCHEDULE, id)
    if redis.call('EXISTS', job_key(id)) == 1 then
      local g = redis.call('HGET', job_key(id), 'group')
      local was = g and serviceable(g)
      to_lane(id, g, now)
      if g then ring_if_now(g, was) end
      moved = moved + 1
    end
  end
  bump('promoted', moved)
  return moved
end
-- Expired leases go back (attempts unchanged: the next claim increments
-- them), the group's active count released; flat ones to `pending`. With
-- the queue's stalled sweep on (meta max_stalled > 0), each also counts
-- `stalled` on its row and is dead-lettered ("stalled") at the threshold.
local function reap(now, max)
  local due = redis.call('ZRANGEBYSCORE', ACTIVE, '-inf', now, 'LIMIT', 0, max)
  rows_present(due, 'lease')
  local maxst = num(redis.call('HGET', META, 'max_stalled'))
  local moved = 0
  for _, id in ipairs(due) do
    redis.call('ZREM', ACTIVE, id)
    local jk = job_key(id)
    if redis.call('EXISTS', jk) == 1 then
      local g = redis.call('HGET', jk, 'group')
      local was = g and serviceable(g)
      if g then release_active(g) end
      local dead = false
      if maxst > 0 and redis.call('HINCRBY', jk, 'stalled', 1) >= maxst then
        dead_letter(id, 'stalled', now)
        bump('stalled_dead', 1)
        dead = true
      end
      if not dead then
        to_lane(id, g, now)
        moved = moved + 1
      end
      if g then ring_if_now(g, was) end
    end
  end
  bump('expired', moved)
  return moved
end
-- ms until the earliest due time or lease deadline; -1: none.
local function next_due(now)
  local best = -1
  local s = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  if s[2] then best = tonumber(s[2]) end
  local a = redis.call('ZRANGE', ACTIVE, 0, 0, 'WITHSCORES')
  if a[2] and (best < 0 or tonumber(a[2]) < best) then best = tonumber(a[2]) end
  if best < 0 then return -1 end
  return math.max(0, best - now)
end
-- One job as job()/jobs() show it: {id, state, attempt, group, ready_ms,
-- last_error, token, when, payload_bytes, retry, payload, stalled}.
local function job_row(id, with_payload)
  local jk = job_key(id)
  local r = redis.call('HMGET', jk, 'state', 'attempts', 'group', 'ready_ms', 'last_error', 'fl_token', 'fl_at',
                       'fl_skip', 'fl_retry', 'dead_ms', 'stalled')
  if not r[1] then return nil end
  local st, att = r[1], num(r[2])
  local tok, when = 0, 0
  if st == 'active' then
    if r[6] and num(r[7]) == att then tok = tonumber(r[6]) else tok = att end
    when = num(redis.call('ZSCORE', ACTIVE, id))
  elseif st == 'scheduled' then
    when = num(redis.call('ZSCORE', SCHEDULE, id))
  elseif st == 'dead' then
    when = num(r[10])
  end
  local payload = ''
  if with_payload then payload = redis.call('HGET', jk, 'payload') or '' end
  return {id, st, math.max(0, att - num(r[8])), r[3] or '', num(r[4]), r[5] or '', tok, when,
          redis.call('HSTRLEN', jk, 'payload'), r[9] or '', payload, num(r[11])}
end
-- Every group that may have a lane: named, on the ring, paused, in flight.
local function known_groups()
  local seen, out = {}, {}
  local function add(list)
    for _, g in ipairs(list) do
      if not seen[g] then
        seen[g] = true
        out[#out + 1] = g
      end
    end
  end
  add(redis.call('ZRANGE', GROUPS, 0, -1))
  add(redis.call('LRANGE', RING, 0, -1))
  add(redis.call('HKEYS', GACTIVE))
  add(redis.call('HKEYS', GLIMIT))
  add(redis.call('HKEYS', GWEIGHT))
  add(redis.call('SMEMBERS', PAUSED))
  add(redis.call('HKEYS', SERVED))
  table.sort(out)
  return out
end
)lua";

// ARGV: kind, max_payload, max_stalled ('' leave it), create ('1' or '0').
// Records kind and payload limit if the queue has none; returns {kind,
// max_payload, owner, max_stalled}. Without create, a queue none of whose
// fixed keys exists returns 0 and nothing is written; one that exists
// without a recorded kind or limit (made by an EchoMQ client) answers the
// defaults asked for, unrecorded.
inline constexpr std::string_view kInit = R"lua(
if ARGV[4] == '1' then
  redis.call('HSETNX', META, 'job_kind', ARGV[1])
  redis.call('HSETNX', META, 'max_payload', ARGV[2])
elseif redis.call('EXISTS', unpack(KEYS, 1, NFIXED)) == 0 then
  return 0
end
if ARGV[3] ~= '' and (FORCE or not redis.call('HGET', META, 'owner')) then
  if tonumber(ARGV[3]) > 0 then redis.call('HSET', META, 'max_stalled', ARGV[3]) else redis.call('HDEL', META, 'max_stalled') end
end
local m = redis.call('HMGET', META, 'job_kind', 'max_payload', 'owner', 'max_stalled')
return {m[1] or ARGV[1], m[2] or ARGV[2], m[3] or '', num(m[4])}
)lua";

inline constexpr std::string_view kNow = R"lua(
return now_ms()
)lua";

// Returns {ms since 2024-01-01, seq}: strictly increasing per queue; the
// client packs ms << 22 | node << 12 | seq. The wall clock, not the queue's.
inline constexpr std::string_view kMint = R"lua(
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 1704067200000
if ms < 0 then ms = 0 end
local row = redis.call('HMGET', META, 'mint_ms', 'mint_seq')
local last, seq = num(row[1]), num(row[2])
if ms > last then
  seq = 0
else
  ms = last
  seq = seq + 1
  if seq > 4095 then
    ms = ms + 1
    seq = 0
  end
end
redis.call('HSET', META, 'mint_ms', ms, 'mint_seq', seq)
return {ms, seq}
)lua";

// One admission. Returns 1 enqueued, 0 duplicate.
inline constexpr std::string_view kEnqueueOne = R"lua(
local function admit(jk, lane, id, g, payload, delay, retry_policy, now)
  if redis.call('EXISTS', jk) == 1 then
    bump('duplicates', 1)
    return 0
  end
  if delay > 0 then
    redis.call('HSET', jk, 'state', 'scheduled', 'attempts', 0, 'payload', payload, 'group', g)
    redis.call('ZADD', SCHEDULE, now + delay, id)
  else
    redis.call('HSET', jk, 'state', 'pending', 'attempts', 0, 'payload', payload, 'group', g, 'ready_ms', now)
    redis.call('ZADD', lane, 0, id)
    -- Only a lane that was empty can have become serviceable.
    if redis.call('ZCARD', lane) == 1 then ring_if_now(g, false) end
  end
  if retry_policy ~= '' then redis.call('HSET', jk, 'fl_retry', retry_policy) end
  job_added(g, 1)
  bump('enqueued', 1)
  return 1
end
)lua";

// KEYS[NFIXED+1] job, KEYS[NFIXED+2] lane. ARGV: id, group, payload,
// delay_ms, retry policy ('' none).
inline constexpr std::string_view kEnqueue = R"lua(
writable()
local delay = tonumber(ARGV[4])
local r = admit(KEYS[NFIXED + 1], KEYS[NFIXED + 2], ARGV[1], ARGV[2], ARGV[3], delay, ARGV[5], now_ms())
if r == 1 and delay > 0 then wake(1) end  -- parked consumers shorten their sleep to the new due time
return r
)lua";

// KEYS: job and lane key of each item. ARGV: n, then per item id, group,
// payload, delay_ms, retry policy. Returns one 1/0 per item.
inline constexpr std::string_view kEnqueueBatch = R"lua(
writable()
local n, now, out, delayed = tonumber(ARGV[1]), now_ms(), {}, false
for i = 0, n - 1 do
  local b = 2 + i * 5
  local delay = tonumber(ARGV[b + 3])
  out[i + 1] = admit(KEYS[NFIXED + 1 + 2 * i], KEYS[NFIXED + 2 + 2 * i], ARGV[b], ARGV[b + 1], ARGV[b + 2], delay,
                     ARGV[b + 4], now)
  if out[i + 1] == 1 and delay > 0 then delayed = true end
end
if delayed then wake(1) end
return out
)lua";

// ARGV: lease_ms, room, mode ('w' the weighted rota, 'l' one lane). Each
// turn looks at the ring's head before it moves anything, then rotates it
// one step (LMOVE head to tail) and takes min(turn, depth, limit headroom,
// room left) jobs of that lane: a lane of weight w has a turn of w claims,
// and in mode 'l' (EchoMQ's group-affinity batch claim) one turn is as many
// as fit, and only one turn is taken. A weighted turn cut short by `room`
// moves the group back to the head and records what is left of it in meta
// (turn_group, turn_left), so single claims see A A B C for weights 2,1,1.
// Returns {got, deadline, next_due_ms, then per lease: id, group, payload,
// attempt, token, waited_ms, retry policy}.
inline constexpr std::string_view kClaim = R"lua(
writable()
local now = now_ms()
promote(now, 100)
reap(now, 100)
local meta = redis.call('HMGET', META, 'paused', 'turn_group', 'turn_left')
local lease, room, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local deadline = now + lease
local out = {0, deadline, -1}
-- The whole queue is paused while meta holds the field, whatever its value:
-- EchoMQ writes '1' and deletes the field to resume, and its claims read
-- only that the field is there.
if meta[1] then
  out[3] = next_due(now)
  return out
end
local held, left = meta[2], num(meta[3])
local hold_g, hold_left = false, 0
local got, turns = 0, 0
while got < room do
  if mode == 'l' and turns > 0 then break end
  local g = redis.call('LINDEX', RING, 0)
  if not g then break end
  local lane = lane_key(g)
  local depth = redis.call('ZCARD', lane)
  local lim = num(redis.call('HGET', GLIMIT, g))
  local act = num(redis.call('HGET', GACTIVE, g))
  if depth == 0 and not REPAIR then
    -- On the ring means nonempty: this lane is where we cannot see it.
    retry('group ' .. g .. ' is on the ring but its lane is not here')
  end
  if depth == 0 or (lim > 0 and act >= lim) or redis.call('SISMEMBER', PAUSED, g) == 1 then
    redis.call('LPOP', RING)  -- not serviceable (paused, at its limit, or dangling): off the ring
    if held == g then held = false end
  else
    local turn = weight_of(g)
    -- What is left of a turn cut short; a lane set back to weight 1 since
    -- has no turn to finish (a weight takes effect at once, as on the segment).
    if held and g == held and left > 0 and turn > 1 then turn = left end
    if mode == 'l' then turn = room - got end
    held = false
    local n = math.min(turn, depth, room - got)
    if lim > 0 then n = math.min(n, lim - act) end
    local ids = redis.call('ZRANGE', lane, 0, n - 1)
    local dangling = false
    for _, id in ipairs(ids) do
      if redis.call('EXISTS', job_key(id)) == 0 then
        if not REPAIR then retry('job ' .. id .. ' of lane ' .. g .. ' has no row') end
        redis.call('ZREM', lane, id)
        dangling = true
      end
    end
    if not dangling then
      turns = turns + 1
      redis.call('LMOVE', RING, RING, 'LEFT', 'RIGHT')
      redis.call('ZPOPMIN', lane, n)
      local last = redis.call('HINCRBY', META, 'fl_token_seq', n)
      for i, id in ipairs(ids) do
        local jk = job_key(id)
        local att = redis.call('HINCRBY', jk, 'attempts', 1)
        local tok = TOKEN_BASE + last - n + i
        local row = redis.call('HMGET', jk, 'payload', 'ready_ms', 'fl_skip', 'fl_retry')
        redis.call('HSET', jk, 'state', 'active', 'fl_token', tok, 'fl_at', att)
        redis.call('ZADD', ACTIVE, deadline, id)
        local waited = 0
        if row[2] then waited = math.max(0, now - tonumber(row[2])) end
        out[#out + 1] = id
        out[#out + 1] = g
        out[#out + 1] = row[1] or ''
        out[#out + 1] = math.max(1, att - num(row[3]))
        out[#out + 1] = tok
        out[#out + 1] = waited
        out[#out + 1] = row[4] or ''
      end
      redis.call('HINCRBY', GACTIVE, g, n)
      redis.call('HINCRBY', SERVED, g, n)
      register(g)
      got = got + n
      depth = depth - n
      act = act + n
      if depth <= 0 or (lim > 0 and act >= lim) then
        redis.call('RPOP', RING)  -- empty or at its ceiling: off the ring (it is the tail now)
      elseif mode ~= 'l' and turn - n > 0 and got >= room then
        redis.call('LMOVE', RING, RING, 'RIGHT', 'LEFT')  -- still its turn: back to the head
        hold_g, hold_left = g, turn - n
      end
    end
  end
end
if hold_g then
  redis.call('HSET', META, 'turn_group', hold_g, 'turn_left', hold_left)
elseif meta[2] then
  redis.call('HDEL', META, 'turn_group', 'turn_left')
end
out[1] = got
if got > 0 then
  bump('claimed', got)
  -- Work is left: make sure a parked consumer hears of it.
  if redis.call('LLEN', RING) > 0 and redis.call('LLEN', WAKE) == 0 then wake(1) end
else
  out[3] = next_due(now)
  -- Nothing is serviceable at this instant, so every wake token already in
  -- the list is stale: drop them, so a consumer about to park does not spin
  -- on them. A token pushed after this script is fresh and stays.
  if redis.call('LLEN', RING) == 0 then redis.call('DEL', WAKE) end
end
return out
)lua";

// The acknowledgement of one lease: 0 ok, 1 stale, 2 gone.
inline constexpr std::string_view kCompleteOne = R"lua(
local function complete_one(jk, id, tok)
  local row = redis.call('HMGET', jk, 'state', 'attempts', 'group', 'fl_token', 'fl_at')
  if not row[1] then return 2 end
  if not fenced(row[1], row[2], row[4], row[5], tok) then return 1 end
  local g = row[3]
  local was = g and serviceable(g)
  redis.call('ZREM', ACTIVE, id)
  if g then release_active(g) end
  redis.call('DEL', jk, jk .. ':logs')
  redis.call('HINCRBY', MDONE, 'count', 1)
  if g then
    ring_if_now(g, was)
    job_gone(g, 1)
  end
  return 0
end
)lua";

// KEYS[NFIXED+1] job. ARGV: id, token.
inline constexpr std::string_view kComplete = R"lua(
writable()
return complete_one(KEYS[NFIXED + 1], ARGV[1], tonumber(ARGV[2]))
)lua";

// KEYS: one job key per lease. ARGV: n, then id, token per lease.
inline constexpr std::string_view kCompleteBatch = R"lua(
writable()
local n, out = tonumber(ARGV[1]), {}
for i = 0, n - 1 do
  out[i + 1] = complete_one(KEYS[NFIXED + 1 + i], ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i]))
end
return out
)lua";

// KEYS[NFIXED+1] job. ARGV: id, token, delay_ms ('' unset), max_attempts
// ('' unset), error, u (the jitter draw, 0..1). Unset fields come from the
// job's policy (fl_retry), then the queue's (meta fl_retry), then max 1 and
// no delay. Returns 0 retrying, 1 dead, 2 stale, 3 gone.
inline constexpr std::string_view kFail = R"lua(
writable()
local jk, id = KEYS[NFIXED + 1], ARGV[1]
local row = redis.call('HMGET', jk, 'state', 'attempts', 'group', 'fl_token', 'fl_at', 'fl_skip', 'fl_retry')
if not row[1] then return 3 end
if not fenced(row[1], row[2], row[4], row[5], tonumber(ARGV[2])) then return 2 end
local att = math.max(1, num(row[2]) - num(row[6]))
local jp, qp = policy(row[7]), policy(redis.call('HGET', META, 'fl_retry'))
local max = tonumber(ARGV[4])
if not max then
  if jp and jp.max > 0 then max = jp.max elseif qp and qp.max > 0 then max = qp.max else max = 1 end
end
local delay = tonumber(ARGV[3])
if not delay then
  local u = tonumber(ARGV[6]) or 0
  if jp and jp.kind ~= '-' then delay = backoff_ms(jp, att, u)
  elseif qp and qp.kind ~= '-' then delay = backoff_ms(qp, att, u)
  else delay = 0 end
end
local g, now = row[3], now_ms()
local was = g and serviceable(g)
redis.call('ZREM', ACTIVE, id)
if g then release_active(g) end
redis.call('HSET', jk, 'last_error', ARGV[5])
if att >= math.max(1, max) then
  dead_letter(id, ARGV[5], now)
  if g then ring_if_now(g, was) end
  return 1
end
bump('retried', 1)
if delay <= 0 then
  to_lane(id, g, now)  -- straight back to its mint position
  if g then ring_if_now(g, was) end
else
  redis.call('HSET', jk, 'state', 'scheduled')
  redis.call('ZADD', SCHEDULE, now + delay, id)
  if g then ring_if_now(g, was) end
  wake(1)
end
return 0
)lua";

// KEYS[NFIXED+1] job. ARGV: id, token, lease_ms. Returns 0 ok, 1 stale, 2 gone.
// A lease at or past its deadline is stale, as on the segment: the next
// reap may take it back, and an extend must not bring it back to life.
inline constexpr std::string_view kExtend = R"lua(
writable()
local row = redis.call('HMGET', KEYS[NFIXED + 1], 'state', 'attempts', 'fl_token', 'fl_at')
if not row[1] then return 2 end
if not fenced(row[1], row[2], row[3], row[4], tonumber(ARGV[2])) then return 1 end
local now = now_ms()
local deadline = redis.call('ZSCORE', ACTIVE, ARGV[1])
if not deadline or tonumber(deadline) <= now then return 1 end
redis.call('ZADD', ACTIVE, 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 0
)lua";

// KEYS[NFIXED+1] job. ARGV: id, token. Back to its lane at its mint
// position, the delivery count unchanged: attempts moves on by one (so no
// earlier holder's attempts ever matches again, ours or EchoMQ's) and
// fl_skip by two (this delivery and that step). Returns 0 ok, 1 stale, 2 gone.
inline constexpr std::string_view kRelease = R"lua(
writable()
local jk, id = KEYS[NFIXED + 1], ARGV[1]
local row = redis.call('HMGET', jk, 'state', 'attempts', 'group', 'fl_token', 'fl_at')
if not row[1] then return 2 end
if not fenced(row[1], row[2], row[4], row[5], tonumber(ARGV[2])) then return 1 end
local g, now = row[3], now_ms()
local was = g and serviceable(g)
redis.call('ZREM', ACTIVE, id)
redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HINCRBY', jk, 'fl_skip', 2)
redis.call('HDEL', jk, 'fl_token', 'fl_at')
to_lane(id, g, now)
if g then
  release_active(g)
  ring_if_now(g, was)
end
bump('released', 1)
return 0
)lua";

// KEYS[NFIXED+1] lane. ARGV: group.
inline constexpr std::string_view kPause = R"lua(
writable()
register(ARGV[1])
redis.call('SADD', PAUSED, ARGV[1])
unring(ARGV[1])
return 0
)lua";

inline constexpr std::string_view kResume = R"lua(
writable()
redis.call('SREM', PAUSED, ARGV[1])
ring_if_serviceable(ARGV[1])
maybe_forget(ARGV[1])
return 0
)lua";

inline constexpr std::string_view kPauseAll = R"lua(
writable()
redis.call('HSET', META, 'paused', '1')
return 0
)lua";

inline constexpr std::string_view kResumeAll = R"lua(
writable()
redis.call('HDEL', META, 'paused')
wake(64)
return 0
)lua";

// KEYS[NFIXED+1] lane. ARGV: group, limit (> 0; 0 is refused by the client,
// as EchoMQ refuses it: clearing is kClearLimit).
inline constexpr std::string_view kLimit = R"lua(
writable()
local g, n = ARGV[1], tonumber(ARGV[2])
if not n or n < 1 then return redis.error_reply('ERR limit must be at least 1') end
register(g)
redis.call('HSET', GLIMIT, g, n)
if serviceable(g) then ring_if_serviceable(g) else unring(g) end
return 0
)lua";

inline constexpr std::string_view kClearLimit = R"lua(
writable()
redis.call('HDEL', GLIMIT, ARGV[1])
ring_if_serviceable(ARGV[1])
maybe_forget(ARGV[1])
return 0
)lua";

// KEYS[NFIXED+1] lane. ARGV: group, weight (1 clears the setting).
inline constexpr std::string_view kWeight = R"lua(
writable()
if tonumber(ARGV[2]) > 1 then
  register(ARGV[1])
  redis.call('HSET', GWEIGHT, ARGV[1], ARGV[2])
else
  redis.call('HDEL', GWEIGHT, ARGV[1])
  maybe_forget(ARGV[1])
end
return 0
)lua";

// KEYS[NFIXED+1] lane. ARGV: group. Removes the lane's pending jobs, their
// rows and their logs (the ids may be enqueued again). Returns how many.
inline constexpr std::string_view kDrain = R"lua(
writable()
local lane, g = KEYS[NFIXED + 1], ARGV[1]
local ids = redis.call('ZRANGE', lane, 0, -1)
for _, id in ipairs(ids) do
  local jk = job_key(id)
  redis.call('DEL', jk, jk .. ':logs')
end
redis.call('DEL', lane)
unring(g)
bump('drained', #ids)
job_gone(g, #ids)
return #ids
)lua";

// KEYS[NFIXED+1] job, KEYS[NFIXED+2] the new group's lane. ARGV: id, group.
// EchoMQ's reassign: a pending job moves to another group's lane at score
// 0. Returns 0 moved, 1 gone, 2 not pending (leased, scheduled, dead, or a
// flat job, which rides no lane).
inline constexpr std::string_view kReassign = R"lua(
writable()
local jk, dst_lane, id, dst = KEYS[NFIXED + 1], KEYS[NFIXED + 2], ARGV[1], ARGV[2]
local row = redis.call('HMGET', jk, 'state', 'group')
if not row[1] then return 1 end
local src = row[2]
if row[1] ~= 'pending' or not src then return 2 end
if src == dst then return 0 end
if redis.call('ZSCORE', lane_key(src), id) == false then return 2 end
local was = serviceable(dst)
redis.call('ZREM', lane_key(src), id)
redis.call('ZADD', dst_lane, 0, id)
redis.call('HSET', jk, 'group', dst)
job_added(dst, 1)
ring_if_now(dst, was)
if redis.call('ZCARD', lane_key(src)) == 0 then unring(src) end
job_gone(src, 1)
return 0
)lua";

inline constexpr std::string_view kTick = R"lua(
writable()
local now = now_ms()
return promote(now, -1) + reap(now, -1)
)lua";

// ARGV: ms.
inline constexpr std::string_view kAdvance = R"lua(
writable()
redis.call('HINCRBY', META, 'clock_offset_ms', ARGV[1])
wake(64)  -- parked consumers re-check what fell due
return 0
)lua";

// Returns {paused, now, ring, counters[11], pending, leased, scheduled, dead,
// lanes: {group, depth, active, limit, weight, paused, ringed, served}...,
// flat pending}.
inline constexpr std::string_view kSnapshot = R"lua(
local now = now_ms()
local ring = redis.call('LRANGE', RING, 0, -1)
local groups = known_groups()
local rota, inring = {}, {}
for _, g in ipairs(ring) do
  if serviceable(g) then
    rota[#rota + 1] = g
    inring[g] = true
  end
end
local lanes, pending = {}, 0
for _, g in ipairs(groups) do
  local d = redis.call('ZCARD', lane_key(g))
  pending = pending + d
  lanes[#lanes + 1] = {g, d, num(redis.call('HGET', GACTIVE, g)), num(redis.call('HGET', GLIMIT, g)), weight_of(g),
                       redis.call('SISMEMBER', PAUSED, g), inring[g] and 1 or 0, num(redis.call('HGET', SERVED, g))}
end
local flat = redis.call('ZCARD', FLAT)
local c = redis.call('HMGET', COUNTERS, 'enqueued', 'duplicates', 'claimed', 'retried', 'expired', 'promoted',
                     'drained', 'released', 'stalled_dead')
local counters = {}
for i = 1, 9 do counters[i] = num(c[i]) end
counters[10] = num(redis.call('HGET', MDONE, 'count'))
counters[11] = num(redis.call('HGET', MFAILED, 'count'))
local paused = 0
if redis.call('HGET', META, 'paused') then paused = 1 end  -- any value, as the claim reads it
return {paused, now, rota, counters, pending + flat, redis.call('ZCARD', ACTIVE), redis.call('ZCARD', SCHEDULE),
        redis.call('ZCARD', DEAD), lanes, flat}
)lua";

// KEYS[NFIXED+1] job. ARGV: id, with_payload (1|0). Returns job_row or nil.
inline constexpr std::string_view kJob = R"lua(
local r = job_row(ARGV[1], ARGV[2] == '1')
if not r then return false end
return r
)lua";

// ARGV: group ('' any), state ('' any; pending, active, scheduled, dead),
// limit, with_payload. Lowest ids first. Lanes and the dead set (score 0)
// are read up to `limit` each; leases and scheduled jobs whole (they are
// in flight), then filtered by group.
inline constexpr std::string_view kJobs = R"lua(
local want_g, want_s, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids, seen = {}, {}
local function add(list, check_group)
  for _, id in ipairs(list) do
    if not seen[id] then
      if not check_group or want_g == '' or redis.call('HGET', job_key(id), 'group') == want_g then
        seen[id] = true
        ids[#ids + 1] = id
      end
    end
  end
end
if limit > 0 then
  if want_s == '' or want_s == 'pending' then
    if want_g ~= '' then
      add(redis.call('ZRANGE', lane_key(want_g), 0, limit - 1), false)
    else
      for _, g in ipairs(known_groups()) do add(redis.call('ZRANGE', lane_key(g), 0, limit - 1), false) end
      add(redis.call('ZRANGE', FLAT, 0, limit - 1), false)
    end
  end
  if want_s == '' or want_s == 'active' then add(redis.call('ZRANGE', ACTIVE, 0, -1), true) end
  if want_s == '' or want_s == 'scheduled' then add(redis.call('ZRANGE', SCHEDULE, 0, -1), true) end
  if want_s == '' or want_s == 'dead' then
    if want_g == '' then add(redis.call('ZRANGE', DEAD, 0, limit - 1), false)
    else add(redis.call('ZRANGE', DEAD, 0, -1), true) end
  end
end
table.sort(ids)
local out = {}
for _, id in ipairs(ids) do
  if #out >= limit then break end
  local r = job_row(id, ARGV[4] == '1')
  if r and (want_s == '' or r[2] == want_s) then out[#out + 1] = r end
end
return out
)lua";

// Dead letters back to their lanes (mint position), attempt 1 again with a
// fresh token: fl_skip takes up the attempts so far (attempts itself never
// goes back: an earlier holder's attempts must never match again).
inline constexpr std::string_view kRequeueOne = R"lua(
local function requeue(id, now)
  local jk = job_key(id)
  local row = redis.call('HMGET', jk, 'state', 'attempts', 'group')
  if not row[1] then return 2 end
  if row[1] ~= 'dead' then return 1 end
  redis.call('ZREM', DEAD, id)
  redis.call('HSET', jk, 'fl_skip', num(row[2]))
  redis.call('HDEL', jk, 'stalled', 'dead_ms', 'fl_token', 'fl_at')
  local g = row[3]
  local was = g and serviceable(g)
  to_lane(id, g, now)
  if g then ring_if_now(g, was) end
  return 0
end
)lua";

// KEYS[NFIXED+1] job. ARGV: id. Returns 0 ok, 1 stale (not dead), 2 gone.
inline constexpr std::string_view kRequeueDead = R"lua(
writable()
return requeue(ARGV[1], now_ms())
)lua";

inline constexpr std::string_view kRequeueAllDead = R"lua(
writable()
local now, n = now_ms(), 0
for _, id in ipairs(redis.call('ZRANGE', DEAD, 0, -1)) do
  if requeue(id, now) == 0 then n = n + 1 else redis.call('ZREM', DEAD, id) end
end
return n
)lua";

inline constexpr std::string_view kPurgeDead = R"lua(
writable()
local ids = redis.call('ZRANGE', DEAD, 0, -1)
local n = 0
for _, id in ipairs(ids) do
  local jk = job_key(id)
  local row = redis.call('HMGET', jk, 'state', 'group')
  if row[1] == 'dead' then
    redis.call('DEL', jk, jk .. ':logs')
    job_gone(row[2] or nil, 1)
    n = n + 1
  end
end
redis.call('DEL', DEAD)
return n
)lua";

// Before remove_queue: refuses on a mirror's keyspace unless forced.
inline constexpr std::string_view kCheckWritable = R"lua(
writable()
return 0
)lua";

}  // namespace fairlane::valkey
