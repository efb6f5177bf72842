-- bucket.lua: the token bucket arithmetic of a key's regional bucket,
-- written once for the scripts that touch it (lease.lua, request.lua):
-- redisstore prepends it to each, so that every script is still one
-- self-contained EVALSHA. It defines local functions and reads or writes
-- nothing until a script calls them. memstore's Store computes the same,
-- held to it by storetest's randomized equivalence test.
--
-- Hash fields: t = tokens (float), ts = last refill (microseconds, Redis
-- TIME), d = demand reported since creation, c = debt credit left and
-- ce = when it ends (microseconds; both only while there is credit).
--
-- Time source: Redis' own clock (TIME), never the caller's, so caller
-- clock skew cannot change admission. Every write sets PEXPIRE to twice
-- the time to fill the bucket, clamped to [1 s, 366 days]
-- (store.MaxBucketTTL): no key without a TTL, and an expiry Redis accepts
-- whatever the rate (2000 * capacity / rate is +inf for a tiny rate).

local MAX_TTL_MS = 31622400000 -- 366 days: store.MaxBucketTTL
local EXACT = 9007199254740992 -- 2^53: counts above it are not exact

-- parseArgs checks ARGV[first], ARGV[first + 1], … against spec, whose
-- entries are { name } for a finite float > 0 and { name, least } for an
-- integer in [least, 2^53]. It returns the numbers in spec's order, or nil
-- and an error reply naming the script and the argument.
local function parseArgs(script, spec, first)
  local v = {}
  for i, s in ipairs(spec) do
    local n = first + i - 1
    local x = tonumber(ARGV[n])
    local ok = x ~= nil and x == x and x > -math.huge and x < math.huge -- not NaN or inf
    local rule = 'a finite number > 0'
    if s[2] == nil then
      ok = ok and x > 0
    else
      rule = 'an integer in [' .. s[2] .. ', 2^53]'
      ok = ok and x >= s[2] and x <= EXACT and x == math.floor(x)
    end
    if not ok then
      return nil, redis.error_reply('ERR quota ' .. script .. ': ARGV[' .. n .. '] ' .. s[1] .. ' must be ' ..
        rule .. ', got ' .. tostring(ARGV[n]))
    end
    v[i] = x
  end
  return v
end

-- storeTime is Redis' clock, in microseconds since the epoch.
local function storeTime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- loadBucket reads the bucket hash at key and refills it to now (rate in
-- cost units per second). A fresh bucket (expired, or a store that lost
-- its state) starts full, with debt credit for every debt of its first
-- grace (microseconds): it holds no history to pay back against. A bucket
-- above capacity (the capacity shrank: a plan or share change) is clamped.
-- wasted is the refill beyond capacity since the bucket was last touched.
-- Debt credit past its end is dropped.
local function loadBucket(key, rate, capacity, grace, now)
  local h = redis.call('HMGET', key, 't', 'ts', 'd', 'c', 'ce')
  local b = {
    tokens = tonumber(h[1]), ts = tonumber(h[2]), d = tonumber(h[3]) or 0,
    credit = tonumber(h[4]) or 0, creditEnd = tonumber(h[5]) or 0, hadCredit = h[4] ~= false,
    fresh = false, wasted = 0,
  }
  if now >= b.creditEnd then
    b.credit = 0
  end
  if b.tokens == nil or b.ts == nil then
    b.tokens = capacity
    b.ts = now
    b.fresh = true
    if grace > 0 then
      b.credit = EXACT -- every debt of the grace is paid
      b.creditEnd = now + grace
    end
  end
  if b.tokens > capacity then
    b.tokens = capacity
  end
  if now > b.ts then
    local raw = b.tokens + (now - b.ts) * rate / 1000000
    if raw > capacity then
      b.wasted = raw - capacity
    end
    b.tokens = math.min(capacity, raw)
    b.ts = now
  end
  return b
end

-- chargeDebt charges debt (cost allowed in degraded mode, >= 0) to a
-- loaded bucket. The refill the cap threw away since the bucket was last
-- touched, and the credit left from earlier debts, pay for it first
-- (during a regional outage nobody touched the bucket, so traffic within
-- the limit owes nothing); the rest is charged now, below zero if need be,
-- down to -capacity. What they leave over is kept as credit for grace
-- (microseconds) from the first payment: the region's other processes
-- come back a moment later with their own debts from the same outage, and
-- the first payer's touch must not make them pay for refill it has already
-- counted. Without a debt to charge, the refill the cap throws away is
-- added to credit that is still running. A fresh bucket charges no debt.
local function chargeDebt(b, debt, capacity, grace, now)
  if debt > 0 and not b.fresh then
    local avail = b.wasted + b.credit
    b.tokens = math.max(-capacity, b.tokens - math.max(0, debt - avail))
    if avail > debt then
      if b.credit <= 0 then
        b.creditEnd = now + grace
      end
      b.credit = avail - debt
    else
      b.credit = 0
    end
  elseif b.credit > 0 then
    b.credit = b.credit + b.wasted
  end
end

-- grant takes up to want tokens from the bucket, none unless at least min
-- are there; near exhaustion at most tokens / spread (but never below min),
-- so that the processes sharing the bucket split what is left. It returns
-- the number granted.
local function grant(b, want, min, spread)
  if want == 0 or b.tokens < min then
    return 0
  end
  local g = math.max(min, math.floor(b.tokens / spread))
  g = math.min(want, g, math.floor(b.tokens))
  b.tokens = b.tokens - g
  return g
end

-- formatTokens is how tokens and credit are written and replied: a
-- string, as a Lua number would be truncated to an integer in a reply.
local function formatTokens(x)
  return string.format('%.6f', x)
end

-- saveBucket writes the bucket and sets its expiry: twice its time to
-- fill, clamped to [1 s, MAX_TTL_MS] (store.BucketTTL). It computes the
-- expiry before its first write, so that nothing can fail half-way.
local function saveBucket(key, b, rate, capacity)
  local ttl = math.ceil(2000 * capacity / rate)
  if not (ttl <= MAX_TTL_MS) then
    ttl = MAX_TTL_MS -- +inf for a tiny rate
  elseif ttl < 1000 then
    ttl = 1000
  end
  redis.call('HSET', key, 't', formatTokens(b.tokens), 'ts', b.ts, 'd', b.d)
  if b.credit > 0 then
    redis.call('HSET', key, 'c', formatTokens(b.credit), 'ce', b.creditEnd)
  elseif b.hadCredit then
    redis.call('HDEL', key, 'c', 'ce')
  end
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end

