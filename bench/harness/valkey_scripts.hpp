// The EchoMQ rota as Lua scripts, for the Valkey/Redis peer: the same
// transitions as /work/shared/ECHOMQ.md (enqueue, claim, complete) over the
// same keys, `emq:{Q}:<name>`. ARGV[1] is the key prefix "emq:{Q}:"; group
// keys are built inside the scripts (a group is known only after the ring
// rotates), so these run on a standalone server; on a Cluster the hash tag
// keeps every key in one slot.
#pragma once

namespace fairlane::bench::valkey {

// ARGV: prefix, group, job id, payload, job kind. Returns 1 enqueued,
// 0 duplicate, -1 kind mismatch.
inline constexpr const char* kEnqueue = R"lua(
local p, g, id = ARGV[1], ARGV[2], ARGV[3]
if string.sub(id, 1, 3) ~= ARGV[5] then return -1 end
local jk = p .. 'job:' .. id
if redis.call('EXISTS', jk) == 1 then return 0 end
redis.call('HSET', jk, 'state', 'pending', 'attempts', 0, 'payload', ARGV[4], 'group', g)
redis.call('ZADD', p .. 'g:' .. g .. ':pending', 0, id)
if redis.call('SISMEMBER', p .. 'paused', g) == 0 then
  local lim = tonumber(redis.call('HGET', p .. 'glimit', g) or 0)
  local act = tonumber(redis.call('HGET', p .. 'gactive', g) or 0)
  if (lim == 0 or act < lim) and not redis.call('LPOS', p .. 'ring', g) then
    redis.call('RPUSH', p .. 'ring', g)
    redis.call('LPUSH', p .. 'wake', '1')
    redis.call('LTRIM', p .. 'wake', 0, 63)
  end
end
return 1
)lua";

// ARGV: prefix, lease_ms. Returns nil (empty) or {id, payload, attempts, group}.
inline constexpr const char* kClaim = R"lua(
local p = ARGV[1]
if redis.call('HGET', p .. 'meta', 'paused') == '1' then return false end
local ring = p .. 'ring'
local g = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
if not g then return false end
local lane = p .. 'g:' .. g .. ':pending'
local top = redis.call('ZPOPMIN', lane)
if #top == 0 then
  redis.call('LREM', ring, 0, g)
  return false
end
local id = top[1]
local jk = p .. 'job:' .. id
local att = redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HSET', jk, 'state', 'active')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', p .. 'active', now + tonumber(ARGV[2]), id)
local act = redis.call('HINCRBY', p .. 'gactive', g, 1)
local lim = tonumber(redis.call('HGET', p .. 'glimit', g) or 0)
if (lim > 0 and act >= lim) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', ring, 0, g)
end
return {id, redis.call('HGET', jk, 'payload'), att, g}
)lua";

// ARGV: prefix, job id, attempt. Returns 'ok', 'stale' or 'gone'.
inline constexpr const char* kComplete = R"lua(
local p, id = ARGV[1], ARGV[2]
local jk = p .. 'job:' .. id
local row = redis.call('HMGET', jk, 'attempts', 'group')
if not row[1] then return 'gone' end
if row[1] ~= ARGV[3] then return 'stale' end
local g = row[2]
redis.call('ZREM', p .. 'active', id)
local act = redis.call('HINCRBY', p .. 'gactive', g, -1)
if act <= 0 then
  redis.call('HDEL', p .. 'gactive', g)
  act = 0
end
redis.call('DEL', jk)
local lane = p .. 'g:' .. g .. ':pending'
if redis.call('SISMEMBER', p .. 'paused', g) == 0 and redis.call('ZCARD', lane) > 0 then
  local lim = tonumber(redis.call('HGET', p .. 'glimit', g) or 0)
  if (lim == 0 or act < lim) and not redis.call('LPOS', p .. 'ring', g) then
    redis.call('RPUSH', p .. 'ring', g)
    redis.call('LPUSH', p .. 'wake', '1')
    redis.call('LTRIM', p .. 'wake', 0, 63)
  end
end
return 'ok'
)lua";

}  // namespace fairlane::bench::valkey
