-- lease.lua: refill a key's regional token bucket, take back returned
-- permits and grant a lease, atomically.
--
-- KEYS[1]  the bucket hash, e.g. "quota:{acct_1}" (hash tag: Redis Cluster
--          keeps every key of one API key on one slot)
-- ARGV[1]  rate: refill, cost units per second (float, > 0), already scaled
--          by the region's share
-- ARGV[2]  capacity: bucket size, cost units (float, > 0), already scaled
-- ARGV[3]  want: permits asked for (integer, >= 0; 0 = only give back)
-- ARGV[4]  min: grant nothing unless at least this many tokens are there
--          (the decision's cost, integer >= 0)
-- ARGV[5]  return: unused permits given back (integer, >= 0)
-- ARGV[6]  spread: near exhaustion, grant at most tokens / spread (the
--          region's process count, integer >= 1)
-- ARGV[7]  debt: cost a process allowed in degraded mode while it could
--          not reach the store (integer >= 0). The refill that the
--          capacity cap threw away since the bucket was last touched pays
--          for it first (during a regional outage nobody touched it, so
--          traffic within the limit owes nothing); the rest is charged now,
--          below zero if need be, down to -capacity. A fresh bucket (expired,
--          or a store that lost its state) charges nothing.
--
-- Hash fields: t = tokens (float), ts = last refill (microseconds, Redis
-- TIME), g = net permits granted since creation (grants less returns,
-- plus debts).
--
-- Reply: { granted (integer), tokens left (string: a float), store time
-- (integer microseconds since the epoch, from Redis TIME), g (integer) }.
--
-- Time source: Redis' own clock (TIME), never the caller's, so caller
-- clock skew cannot change admission. Every call but a probe (want,
-- return and debt all 0, which only reads) writes the hash and sets
-- PEXPIRE to twice the time to fill the bucket: no key without a TTL.

local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local min = tonumber(ARGV[4])
local given = tonumber(ARGV[5])
local spread = tonumber(ARGV[6])
local debt = tonumber(ARGV[7])
if not rate or rate <= 0 or not capacity or capacity <= 0 or not want or want < 0
   or not min or min < 0 or not given or given < 0 or not spread or spread < 1
   or not debt or debt < 0 then
  return redis.error_reply("ERR quota lease: bad arguments")
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local h = redis.call('HMGET', KEYS[1], 't', 'ts', 'g')
local tokens = tonumber(h[1])
local ts = tonumber(h[2])
local g = tonumber(h[3]) or 0
local fresh = false
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
  fresh = true -- the bucket expired or the store lost its state
end
if tokens > capacity then
  tokens = capacity -- the capacity shrank (plan or share change)
end
local wasted = 0 -- refill beyond capacity since the last touch
if now > ts then
  local raw = tokens + (now - ts) * rate / 1000000
  if raw > capacity then
    wasted = raw - capacity
  end
  tokens = math.min(capacity, raw)
  ts = now
end

if want == 0 and given == 0 and debt == 0 then
  -- A probe: report the bucket, write nothing, so that probing a slow
  -- store does not reset the refill clock (see debt above).
  return { 0, string.format('%.6f', tokens), now, g }
end

if given > 0 then
  tokens = math.min(capacity, tokens + given)
  g = g - given
end
if debt > 0 then
  if not fresh then -- a fresh bucket holds no history to pay back against
    tokens = math.max(-capacity, tokens - math.max(0, debt - wasted))
  end
  g = g + debt
end

local granted = 0
if want > 0 and tokens >= min then
  granted = math.max(min, math.floor(tokens / spread))
  granted = math.min(want, granted, math.floor(tokens))
  tokens = tokens - granted
  g = g + granted
end

redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'ts', ts, 'g', g)
redis.call('PEXPIRE', KEYS[1], math.max(1000, math.ceil(2000 * capacity / rate)))
return { granted, string.format('%.6f', tokens), now, g }
