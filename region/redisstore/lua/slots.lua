-- slots.lua: take, renew or give back one concurrency slot of a key,
-- atomically.
--
-- KEYS[1]  the slot set, a sorted set, e.g. "quota:{acct_1}:slots" (the
--          hash tag keeps it on the slot of the key's bucket)
-- ARGV[1]  op: "acquire" or "release"
-- ARGV[2]  id: the slot's lease id (1 to 64 printable ASCII bytes)
-- ARGV[3]  limit: most slots held at once (integer >= 1; acquire only)
-- ARGV[4]  ttl: how long a slot lives unless renewed, milliseconds
--          (integer >= 1; acquire only)
--
-- Members are lease ids scored by their expiry (milliseconds on Redis'
-- clock, TIME). Every call first drops the expired members, so a holder
-- that died frees its slot ttl after its last acquire or renewal.
-- acquire renews id when it is held, else adds it when fewer than limit
-- are held, else changes nothing.
-- release removes id.
--
-- Reply: { ok (1 acquired, renewed or released; 0 refused or not held),
-- held (members after the call), store time (ms), expiry of id (ms; 0
-- when not held) }.
-- Every write sets PEXPIREAT to the latest member's expiry: no key
-- outlives its slots. Time source: Redis TIME only.

local op, id = ARGV[1], ARGV[2]
if op ~= 'acquire' and op ~= 'release' then
  return redis.error_reply('ERR quota slots: ARGV[1] op must be acquire or release, got ' .. tostring(op))
end
if id == nil or #id < 1 or #id > 64 or string.find(id, '[^%w%p]') then
  return redis.error_reply('ERR quota slots: ARGV[2] id must be 1 to 64 printable ASCII bytes')
end
local limit, ttl = 0, 0
if op == 'acquire' then
  limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  if limit == nil or limit < 1 or limit ~= math.floor(limit) or ttl == nil or ttl < 1 or ttl ~= math.floor(ttl) then
    return redis.error_reply('ERR quota slots: ARGV[3] limit and ARGV[4] ttl must be integers >= 1')
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)

local ok, exp = 0, 0
if op == 'release' then
  ok = redis.call('ZREM', KEYS[1], id)
else
  local held = redis.call('ZSCORE', KEYS[1], id)
  if held or redis.call('ZCARD', KEYS[1]) < limit then
    exp = now + ttl
    redis.call('ZADD', KEYS[1], exp, id)
    ok = 1
  end
end
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
return { ok, n, now, exp }
