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
--          not reach the store (integer >= 0), charged as bucket.lua's
--          chargeDebt says: wasted refill and credit first, the rest down
--          to -capacity; a fresh bucket charges none during its first grace.
-- ARGV[8]  demand: cost the process was asked for since it last reported
--          (integer >= 0), added to d; processes learn their share of the
--          region's traffic from d.
-- ARGV[9]  grace: how long debt credit lasts, microseconds (integer >= 0)
--
-- Reply: { granted (integer), tokens left (string: a float), store time
-- (integer microseconds since the epoch, from Redis TIME), d (integer) }.
-- Errors: an argument out of its range is refused, before anything is
-- read or written, with "ERR quota lease: ARGV[i] <name> must be …"; a
-- bucket key that holds another type fails at the first HMGET (WRONGTYPE),
-- also before any write. No call fails after it has written.
--
-- The bucket's arithmetic, time source and expiry are bucket.lua's, which
-- runs before this. Every call but a probe (want, return, debt and demand
-- all 0, which only reads) writes the hash and sets its expiry.

local v, refused = parseArgs('lease', {
  { 'rate' }, { 'capacity' },
  { 'want', 0 }, { 'min', 0 }, { 'return', 0 }, { 'spread', 1 },
  { 'debt', 0 }, { 'demand', 0 }, { 'grace', 0 },
}, 1)
if refused then
  return refused
end
local rate, capacity, want, min, given, spread, debt, demand, grace =
  v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]

local now = storeTime()
local b = loadBucket(KEYS[1], rate, capacity, grace, now)

if want == 0 and given == 0 and debt == 0 and demand == 0 then
  -- A probe: report the bucket, write nothing, so that probing a slow
  -- store does not reset the refill clock (see chargeDebt).
  return { 0, formatTokens(b.tokens), now, b.d }
end

b.d = b.d + demand
if given > 0 then
  b.tokens = math.min(capacity, b.tokens + given)
end
chargeDebt(b, debt, capacity, grace, now)
local granted = grant(b, want, min, spread)
saveBucket(KEYS[1], b, rate, capacity)
return { granted, formatTokens(b.tokens), now, b.d }
