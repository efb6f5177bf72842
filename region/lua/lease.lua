-- lease.lua: refill a key's regional token bucket, take back returned
-- permits and grant a lease, atomically.
--
-- KEYS[1]  the bucket hash, e.g. "quota:{acct_1}" (hash tag: Redis Cluster
--          keeps every key of one API key on one slot)
-- ARGV[1]  rate: refill, cost units per second (finite float, > 0), already
--          scaled by the region's share
-- ARGV[2]  capacity: bucket size, cost units (finite float, > 0), already
--          scaled
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
--          below zero if need be, down to -capacity. What that refill leaves
--          over is kept as credit for the grace (ARGV[9]), and the refill the
--          cap throws away meanwhile is added to it: the region's other
--          processes come back a moment later with their own debts from the
--          same outage, and the first payer's touch must not make them pay
--          for refill it has already counted. A fresh bucket (expired, or a
--          store that lost its state) holds no history to pay back against:
--          it charges no debt during its first grace.
-- ARGV[8]  demand: cost the process was asked for since it last reported
--          (integer >= 0), added to d; processes learn their share of the
--          region's traffic from d.
-- ARGV[9]  grace: how long debt credit lasts, microseconds (integer >= 0)
--
-- Hash fields: t = tokens (float), ts = last refill (microseconds, Redis
-- TIME), d = demand reported since creation, c = debt credit left and
-- ce = when it ends (microseconds; both only while there is credit).
--
-- Reply: { granted (integer), tokens left (string: a float), store time
-- (integer microseconds since the epoch, from Redis TIME), d (integer) }.
-- Errors: an argument out of its range is refused, before anything is
-- read or written, with "ERR quota lease: ARGV[i] <name> must be …"; a
-- bucket key that holds another type fails at the first HMGET (WRONGTYPE),
-- also before any write. No call fails after it has written.
--
-- Time source: Redis' own clock (TIME), never the caller's, so caller
-- clock skew cannot change admission. Every call but a probe (want,
-- return, debt and demand all 0, which only reads) writes the hash and sets
-- PEXPIRE to twice the time to fill the bucket, clamped to [1 s, 366 days]
-- (region.MaxBucketTTL): no key without a TTL, and an expiry Redis accepts
-- whatever the rate (2000 * capacity / rate is +inf for a tiny rate).

local MAX_TTL_MS = 31622400000 -- 366 days: region.MaxBucketTTL
local EXACT = 9007199254740992 -- 2^53: counts above it are not exact

-- Arguments: name, and whether it is a count (an integer in [least, 2^53])
-- or a finite float > 0.
local spec = {
  { 'rate' }, { 'capacity' },
  { 'want', 0 }, { 'min', 0 }, { 'return', 0 }, { 'spread', 1 },
  { 'debt', 0 }, { 'demand', 0 }, { 'grace', 0 },
}
local v = {}
for i, s in ipairs(spec) do
  local x = tonumber(ARGV[i])
  local ok = x ~= nil and x == x and x > -math.huge and x < math.huge -- not NaN or inf
  local rule = 'a finite number > 0'
  if s[2] == nil then
    ok = ok and x > 0
  else
    rule = 'an integer in [' .. s[2] .. ', 2^53]'
    ok = ok and x >= s[2] and x <= EXACT and x == math.floor(x)
  end
  if not ok then
    return redis.error_reply('ERR quota lease: ARGV[' .. i .. '] ' .. s[1] .. ' must be ' .. rule ..
      ', got ' .. tostring(ARGV[i]))
  end
  v[i] = x
end
local rate, capacity, want, min, given, spread, debt, demand, grace =
  v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local h = redis.call('HMGET', KEYS[1], 't', 'ts', 'd', 'c', 'ce')
local tokens = tonumber(h[1])
local ts = tonumber(h[2])
local d = tonumber(h[3]) or 0
local credit = tonumber(h[4]) or 0
local creditEnd = tonumber(h[5]) or 0
local hadCredit = h[4] ~= false
if now >= creditEnd then
  credit = 0
end
local fresh = false
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
  fresh = true -- the bucket expired or the store lost its state
  if grace > 0 then
    credit = 9007199254740992 -- 2^53: every debt of the grace is paid
    creditEnd = now + grace
  end
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

if want == 0 and given == 0 and debt == 0 and demand == 0 then
  -- A probe: report the bucket, write nothing, so that probing a slow
  -- store does not reset the refill clock (see debt above).
  return { 0, string.format('%.6f', tokens), now, d }
end

d = d + demand
if given > 0 then
  tokens = math.min(capacity, tokens + given)
end
if debt > 0 and not fresh then
  local avail = wasted + credit
  tokens = math.max(-capacity, tokens - math.max(0, debt - avail))
  if avail > debt then
    if credit <= 0 then
      creditEnd = now + grace
    end
    credit = avail - debt
  else
    credit = 0
  end
elseif credit > 0 then
  credit = credit + wasted
end

local granted = 0
if want > 0 and tokens >= min then
  granted = math.max(min, math.floor(tokens / spread))
  granted = math.min(want, granted, math.floor(tokens))
  tokens = tokens - granted
end

-- Everything is computed before the first write, so that nothing can fail
-- half-way.
local ttl = math.ceil(2000 * capacity / rate)
if not (ttl <= MAX_TTL_MS) then
  ttl = MAX_TTL_MS -- +inf for a tiny rate
elseif ttl < 1000 then
  ttl = 1000
end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'ts', ts, 'd', d)
if credit > 0 then
  redis.call('HSET', KEYS[1], 'c', string.format('%.6f', credit), 'ce', creditEnd)
elseif hadCredit then
  redis.call('HDEL', KEYS[1], 'c', 'ce')
end
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
return { granted, string.format('%.6f', tokens), now, d }
