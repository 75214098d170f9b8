// Scripts the mirror uses to write a segment's state into EchoMQ's keyspace
// (docs/mirror.md). Unlike the backend's scripts, which perform transitions,
// these set state: "job J is now pending in group G at attempt A", "J is
// gone", "lane G has active n, limit l, ...". Each is idempotent, so the
// mirror may send a batch again after a lost connection, and a record read
// late or twice does no harm.
//
// They run after kPrelude (scripts.hpp) with the thirteen fixed keys as
// KEYS[1..13]. One call carries many jobs or lanes: a script call costs far
// more on the server than the few commands it runs for one job.
#pragma once

#include <string_view>

namespace fairlane::valkey {

// Takes the job out of the structure its hash says it is in (its lane,
// EchoMQ's flat `pending` for a row without a group, or the active, schedule
// or dead set). Returns its old state, nil if none. A flat job the segment
// holds was restored into its default lane and is written there; left in
// `pending` too, an EchoMQ claim would serve it beside the segment.
inline constexpr std::string_view kMirrorUnplace = R"lua(
local function unplace(id, jk)
  local old = redis.call('HMGET', jk, 'state', 'group')
  local st = old[1]
  if not st then return nil end
  if st == 'pending' then
    if old[2] then redis.call('ZREM', lane_key(old[2]), id) else redis.call('ZREM', FLAT, id) end
  elseif st == 'active' then
    redis.call('ZREM', ACTIVE, id)
  elseif st == 'scheduled' then
    redis.call('ZREM', SCHEDULE, id)
  elseif st == 'dead' then
    redis.call('ZREM', DEAD, id)
  end
  return st
end
)lua";

// Jobs, many per call. ARGV: n, then 11 fields per job: op ('u' upsert or
// 'f' forget), id, group, state (pending|active|scheduled|dead), attempts,
// score (deadline, due time or death, Valkey ms; unused when pending),
// ready_ms, last_error, with_payload (1|0), payload, retry policy (fl_retry,
// '' none; with the payload: both are fixed at admission). The job keys are
// built from the {Q} prefix (same Cluster slot), as the backend's scripts do.
inline constexpr std::string_view kMirrorJobs = R"lua(
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local b = 1 + i * 11
  local op, id = ARGV[b + 1], ARGV[b + 2]
  local jk = job_key(id)
  unplace(id, jk)
  if op == 'f' then
    redis.call('DEL', jk, jk .. ':logs')  -- as EchoMQ removes a job: with its log lines
  else
    -- Its group is registered by the lane update of the same batch.
    local g, st = ARGV[b + 3], ARGV[b + 4]
    redis.call('HSET', jk, 'state', st, 'attempts', ARGV[b + 5], 'group', g, 'ready_ms', ARGV[b + 7],
               'last_error', ARGV[b + 8])
    if ARGV[b + 9] == '1' then
      redis.call('HSET', jk, 'payload', ARGV[b + 10])
      -- A restore gives the job its policy back (a fail() without options follows it).
      if ARGV[b + 11] ~= '' then redis.call('HSET', jk, 'fl_retry', ARGV[b + 11]) else redis.call('HDEL', jk, 'fl_retry') end
      -- `attempts` is the segment's delivery count: a row the Valkey
      -- backend wrote before this mirror took the queue over (a restore
      -- into a mirrored segment) loses the backend's fencing and its count
      -- of attempts that were no delivery, which readers would take off again.
      redis.call('HDEL', jk, 'fl_skip', 'fl_token', 'fl_at')
    end
    if st == 'pending' then
      redis.call('ZADD', lane_key(g), 0, id)
    elseif st == 'active' then
      redis.call('ZADD', ACTIVE, ARGV[b + 6], id)
    elseif st == 'scheduled' then
      redis.call('ZADD', SCHEDULE, ARGV[b + 6], id)
    else
      -- As EchoMQ keeps it: score 0 (browsed in id order); the time of
      -- death in the row.
      redis.call('ZADD', DEAD, 0, id)
      redis.call('HSET', jk, 'dead_ms', ARGV[b + 6])
    end
  end
end
return n
)lua";

// Lanes, many per call. ARGV: n, then 6 fields per lane: group, active,
// limit, weight, paused (1|0), served. Sets each lane's settings and
// counts, then puts it on the ring or takes it off by the rule every
// script keeps (on the ring iff serviceable).
inline constexpr std::string_view kMirrorLanes = R"lua(
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local b = 1 + i * 6
  local g, active, limit, weight = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  register(g)
  if active > 0 then redis.call('HSET', GACTIVE, g, active) else redis.call('HDEL', GACTIVE, g) end
  if limit > 0 then redis.call('HSET', GLIMIT, g, limit) else redis.call('HDEL', GLIMIT, g) end
  if weight > 1 then redis.call('HSET', GWEIGHT, g, weight) else redis.call('HDEL', GWEIGHT, g) end
  if ARGV[b + 5] == '1' then redis.call('SADD', PAUSED, g) else redis.call('SREM', PAUSED, g) end
  redis.call('HSET', SERVED, g, ARGV[b + 6])
  local ringed = redis.call('LPOS', RING, g)
  if serviceable(g) then
    if not ringed then
      redis.call('RPUSH', RING, g)
      wake(1)
    end
  elseif ringed then
    unring(g)
  end
end
return n
)lua";

// ARGV: seq (transitions acknowledged once this batch lands), queue paused
// (1|0), job kind, max payload, owner ("host:segment": the keyspace is this
// segment's mirror, read-only to the Valkey backend), then field/value
// pairs of the segment's settings (seg_jobs, seg_lanes, ..., kept for a
// restore to recreate it as it was). The last command of every batch.
inline constexpr std::string_view kMirrorMeta = R"lua(
redis.call('HSETNX', META, 'job_kind', ARGV[3])
redis.call('HSETNX', META, 'max_payload', ARGV[4])
if ARGV[2] == '1' then redis.call('HSET', META, 'paused', '1') else redis.call('HDEL', META, 'paused') end
redis.call('HSET', META, 'mirror_seq', ARGV[1], 'owner', ARGV[5])
for i = 6, #ARGV - 1, 2 do redis.call('HSET', META, ARGV[i], ARGV[i + 1]) end
return 1
)lua";

}  // namespace fairlane::valkey
