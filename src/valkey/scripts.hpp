// The queue's transitions as Lua scripts, one per operation (ECHOMQ.md).
//
// Every script gets the queue's thirteen fixed keys as KEYS[1..13] (order in
// kFixedKeys) and then the keys its arguments name: the job key for
// complete/fail/extend, the lane's pending key for the lane controls, both
// for enqueue. So each call declares the keys it touches (Cluster-legal).
// Keys the script can only know once it runs (the group the ring lands on,
// the jobs a claim pops or a drain deletes, the jobs a reap or promote
// returns, the lane of a job found by id) are built inside from the `emq:{Q}:` prefix of KEYS[1]: they carry the
// same {Q} hash tag, so on a Cluster they live in the same slot as every
// declared key and the script stays single-slot. (Strict Cluster proxies
// that check undeclared keys would refuse them; Valkey Cluster does not.)
//
// Invariant kept by every script: a group is on the ring iff its lane is
// serviceable (nonempty, unpaused, below its limit). So a change that makes
// a lane serviceable while it was not before pushes it to the ring's tail
// without an O(ring) LPOS, and the lane is never serviceable but off the
// ring (no lost wake-ups).
//
// Numbers in Lua are doubles: every value here (ms timestamps ~2^41,
// attempts, counts) is exact. Snowflakes (2^63) are never formed in Lua:
// mint returns (ms, seq) and the client packs them.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace fairlane::valkey {

inline constexpr std::array<std::string_view, 13> kFixedKeys = {
    "ring", "active", "gactive", "glimit", "gweight", "paused", "meta",
    "schedule", "dead", "wake", "served", "counters", "groups"};

// Shared by every script.
inline constexpr std::string_view kPrelude = R"lua(
local RING, ACTIVE, GACTIVE, GLIMIT, GWEIGHT, PAUSED, META = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local SCHEDULE, DEAD, WAKE, SERVED, COUNTERS, GROUPS = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
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
-- Back to its lane at score 0: its mint position.
local function to_lane(id, g, now)
  redis.call('HSET', job_key(id), 'state', 'pending', 'ready_ms', now)
  redis.call('ZADD', lane_key(g), 0, id)
end
-- Due scheduled jobs go back to their lanes. max < 0: all of them.
local function promote(now, max)
  local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'LIMIT', 0, max)
  local moved = 0
  for _, id in ipairs(due) do
    redis.call('ZREM', SCHEDULE, id)
    local g = redis.call('HGET', job_key(id), 'group')
    if g then
      local was = serviceable(g)
      to_lane(id, g, now)
      ring_if_now(g, was)
      moved = moved + 1
    end
  end
  bump('promoted', moved)
  return moved
end
-- Expired leases go back to their lanes; attempts unchanged (the next
-- claim increments them), the group's active count released.
local function reap(now, max)
  local due = redis.call('ZRANGEBYSCORE', ACTIVE, '-inf', now, 'LIMIT', 0, max)
  local moved = 0
  for _, id in ipairs(due) do
    redis.call('ZREM', ACTIVE, id)
    local g = redis.call('HGET', job_key(id), 'group')
    if g then
      local was = serviceable(g)
      to_lane(id, g, now)
      release_active(g)
      ring_if_now(g, was)
      moved = moved + 1
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
)lua";

// ARGV: kind, max_payload. Records them if the queue has none; returns the recorded ones.
inline constexpr std::string_view kInit = R"lua(
redis.call('HSETNX', META, 'job_kind', ARGV[1])
redis.call('HSETNX', META, 'max_payload', ARGV[2])
return redis.call('HMGET', META, 'job_kind', 'max_payload')
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

// KEYS[14] job, KEYS[15] lane. ARGV: id, group, payload, delay_ms.
// Returns 1 enqueued, 0 duplicate.
inline constexpr std::string_view kEnqueue = R"lua(
local jk, lane = KEYS[14], KEYS[15]
if redis.call('EXISTS', jk) == 1 then
  bump('duplicates', 1)
  return 0
end
local id, g, delay = ARGV[1], ARGV[2], tonumber(ARGV[4])
local now = now_ms()
register(g)
if delay > 0 then
  redis.call('HSET', jk, 'state', 'scheduled', 'attempts', 0, 'payload', ARGV[3], 'group', g)
  redis.call('ZADD', SCHEDULE, now + delay, id)
  wake(1)  -- parked consumers shorten their sleep to the new due time
else
  redis.call('HSET', jk, 'state', 'pending', 'attempts', 0, 'payload', ARGV[3], 'group', g, 'ready_ms', now)
  redis.call('ZADD', lane, 0, id)
  -- Only a lane that was empty can have become serviceable.
  if redis.call('ZCARD', lane) == 1 then ring_if_now(g, false) end
end
bump('enqueued', 1)
return 1
)lua";

// ARGV: lease_ms, room. Rotates the ring one step per turn (LMOVE head to
// tail) and takes min(turn, depth, limit headroom, room left) jobs of the
// lane it lands on; a lane of weight w has a turn of w claims. A turn cut
// short by `room` moves the group back to the head and records what is left
// of it in meta (turn_group, turn_left), so single claims see A A B C for
// weights 2,1,1. Returns {got, deadline, next_due_ms, then per lease: id,
// group, payload, attempts, waited_ms}.
inline constexpr std::string_view kClaim = R"lua(
local now = now_ms()
promote(now, 100)
reap(now, 100)
local meta = redis.call('HMGET', META, 'paused', 'turn_group', 'turn_left')
local lease, room = tonumber(ARGV[1]), tonumber(ARGV[2])
local deadline = now + lease
local out = {0, deadline, -1}
if meta[1] == '1' then
  out[3] = next_due(now)
  return out
end
local held, left = meta[2], num(meta[3])
local hold_g, hold_left = false, 0
local got = 0
while got < room do
  local g = redis.call('LMOVE', RING, RING, 'LEFT', 'RIGHT')
  if not g then break end
  local turn = weight_of(g)
  if held and g == held and left > 0 then turn = left end
  held = false
  local lane = lane_key(g)
  local depth = redis.call('ZCARD', lane)
  local lim = num(redis.call('HGET', GLIMIT, g))
  local act = num(redis.call('HGET', GACTIVE, g))
  if depth == 0 or (lim > 0 and act >= lim) or redis.call('SISMEMBER', PAUSED, g) == 1 then
    redis.call('RPOP', RING)  -- not serviceable: drop it (it is the tail now)
  else
    local n = math.min(turn, depth, room - got)
    if lim > 0 then n = math.min(n, lim - act) end
    local popped = redis.call('ZPOPMIN', lane, n)
    local k = 0
    for i = 1, #popped, 2 do
      local id = popped[i]
      local jk = job_key(id)
      local row = redis.call('HMGET', jk, 'payload', 'ready_ms', 'state')
      if row[3] then
        local att = redis.call('HINCRBY', jk, 'attempts', 1)
        redis.call('HSET', jk, 'state', 'active')
        redis.call('ZADD', ACTIVE, deadline, id)
        local waited = 0
        if row[2] then waited = math.max(0, now - tonumber(row[2])) end
        out[#out + 1] = id
        out[#out + 1] = g
        out[#out + 1] = row[1] or ''
        out[#out + 1] = att
        out[#out + 1] = waited
        k = k + 1
      end
    end
    if k > 0 then
      redis.call('HINCRBY', GACTIVE, g, k)
      redis.call('HINCRBY', SERVED, g, k)
    end
    got = got + k
    depth = depth - #popped / 2
    act = act + k
    if depth <= 0 or (lim > 0 and act >= lim) then
      redis.call('RPOP', RING)  -- empty or at its ceiling: off the ring
    elseif turn - k > 0 and got >= room then
      redis.call('LMOVE', RING, RING, 'RIGHT', 'LEFT')  -- still its turn: back to the head
      hold_g, hold_left = g, turn - k
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

// KEYS[14] job. ARGV: id, attempt. Returns 0 ok, 1 stale, 2 gone.
inline constexpr std::string_view kComplete = R"lua(
local jk = KEYS[14]
local row = redis.call('HMGET', jk, 'state', 'attempts', 'group')
if not row[1] then return 2 end
if row[1] ~= 'active' or tonumber(row[2]) ~= tonumber(ARGV[2]) then return 1 end
local g = row[3]
local was = serviceable(g)
redis.call('ZREM', ACTIVE, ARGV[1])
release_active(g)
redis.call('DEL', jk)
bump('completed', 1)
ring_if_now(g, was)
return 0
)lua";

// KEYS[14] job. ARGV: id, attempt, delay_ms, max_attempts, error.
// Returns 0 retrying, 1 dead, 2 stale, 3 gone.
inline constexpr std::string_view kFail = R"lua(
local jk, id = KEYS[14], ARGV[1]
local row = redis.call('HMGET', jk, 'state', 'attempts', 'group')
if not row[1] then return 3 end
local att = tonumber(row[2])
if row[1] ~= 'active' or att ~= tonumber(ARGV[2]) then return 2 end
local g, now, delay = row[3], now_ms(), tonumber(ARGV[3])
local was = serviceable(g)
redis.call('ZREM', ACTIVE, id)
release_active(g)
redis.call('HSET', jk, 'last_error', ARGV[5])
if att >= math.max(1, tonumber(ARGV[4])) then
  redis.call('HSET', jk, 'state', 'dead')
  redis.call('ZADD', DEAD, now, id)
  bump('dead', 1)
  ring_if_now(g, was)
  return 1
end
bump('retried', 1)
if delay == 0 then
  to_lane(id, g, now)  -- straight back to its mint position
  ring_if_now(g, was)
else
  redis.call('HSET', jk, 'state', 'scheduled')
  redis.call('ZADD', SCHEDULE, now + delay, id)
  ring_if_now(g, was)
  wake(1)
end
return 0
)lua";

// KEYS[14] job. ARGV: id, attempt, lease_ms. Returns 0 ok, 1 stale, 2 gone.
inline constexpr std::string_view kExtend = R"lua(
local row = redis.call('HMGET', KEYS[14], 'state', 'attempts')
if not row[1] then return 2 end
if row[1] ~= 'active' or tonumber(row[2]) ~= tonumber(ARGV[2]) then return 1 end
redis.call('ZADD', ACTIVE, 'XX', now_ms() + tonumber(ARGV[3]), ARGV[1])
return 0
)lua";

// KEYS[14] lane. ARGV: group.
inline constexpr std::string_view kPause = R"lua(
register(ARGV[1])
redis.call('SADD', PAUSED, ARGV[1])
unring(ARGV[1])
return 0
)lua";

inline constexpr std::string_view kResume = R"lua(
register(ARGV[1])
redis.call('SREM', PAUSED, ARGV[1])
ring_if_serviceable(ARGV[1])
return 0
)lua";

inline constexpr std::string_view kPauseAll = R"lua(
redis.call('HSET', META, 'paused', '1')
return 0
)lua";

inline constexpr std::string_view kResumeAll = R"lua(
redis.call('HDEL', META, 'paused')
wake(64)
return 0
)lua";

// KEYS[14] lane. ARGV: group, limit (0 clears it).
inline constexpr std::string_view kLimit = R"lua(
local g, n = ARGV[1], tonumber(ARGV[2])
register(g)
if n == 0 then
  redis.call('HDEL', GLIMIT, g)
else
  redis.call('HSET', GLIMIT, g, n)
end
if serviceable(g) then ring_if_serviceable(g) else unring(g) end
return 0
)lua";

// KEYS[14] lane. ARGV: group, weight.
inline constexpr std::string_view kWeight = R"lua(
register(ARGV[1])
redis.call('HSET', GWEIGHT, ARGV[1], ARGV[2])
return 0
)lua";

// KEYS[14] lane. ARGV: group. Removes the lane's pending jobs (their rows
// too: the ids may be enqueued again). Returns how many.
inline constexpr std::string_view kDrain = R"lua(
local lane, g = KEYS[14], ARGV[1]
local ids = redis.call('ZRANGE', lane, 0, -1)
for _, id in ipairs(ids) do redis.call('DEL', job_key(id)) end
redis.call('DEL', lane)
unring(g)
bump('drained', #ids)
return #ids
)lua";

inline constexpr std::string_view kTick = R"lua(
local now = now_ms()
return promote(now, -1) + reap(now, -1)
)lua";

// ARGV: ms.
inline constexpr std::string_view kAdvance = R"lua(
redis.call('HINCRBY', META, 'clock_offset_ms', ARGV[1])
wake(64)  -- parked consumers re-check what fell due
return 0
)lua";

// Returns {paused, now, ring, counters[9], pending, leased, scheduled, dead,
// lanes: {group, depth, active, limit, weight, paused, ringed, served}...}.
// Lanes: every group named (groups) plus any group the EchoMQ keys or served mention.
inline constexpr std::string_view kSnapshot = R"lua(
local now = now_ms()
local ring = redis.call('LRANGE', RING, 0, -1)
local seen, groups = {}, {}
local function add(list)
  for _, g in ipairs(list) do
    if not seen[g] then
      seen[g] = true
      groups[#groups + 1] = g
    end
  end
end
add(redis.call('ZRANGE', GROUPS, 0, -1))
add(ring)
add(redis.call('HKEYS', GACTIVE))
add(redis.call('HKEYS', GLIMIT))
add(redis.call('HKEYS', GWEIGHT))
add(redis.call('SMEMBERS', PAUSED))
add(redis.call('HKEYS', SERVED))
table.sort(groups)
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
local c = redis.call('HMGET', COUNTERS, 'enqueued', 'duplicates', 'claimed', 'completed', 'retried', 'dead',
                     'expired', 'promoted', 'drained')
local counters = {}
for i = 1, 9 do counters[i] = num(c[i]) end
local paused = 0
if redis.call('HGET', META, 'paused') == '1' then paused = 1 end
return {paused, now, rota, counters, pending, redis.call('ZCARD', ACTIVE), redis.call('ZCARD', SCHEDULE),
        redis.call('ZCARD', DEAD), lanes}
)lua";

}  // namespace fairlane::valkey
