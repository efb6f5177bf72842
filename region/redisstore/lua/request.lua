-- request.lua: one operation of a request id on a key's regional token
-- bucket, deduplicated by the request's record, atomically
-- (docs/design.md [idempotency]).
--
-- KEYS[1]  the bucket hash, e.g. "quota:{acct_1}" (lease.lua's)
-- KEYS[2]  the request record, a hash, e.g. "quota:{acct_1}:req:<id>" (the
--          hash tag keeps it on the bucket's Redis Cluster slot)
-- ARGV[1]  op: "check", "refund" or "charge"
-- ARGV[2]  rate (finite float > 0, already scaled by the region's share)
-- ARGV[3]  capacity (finite float > 0, already scaled)
-- ARGV[4]  cost (integer in [1, 2^53])
-- ARGV[5]  horizon: how long the record lives after its last write,
--          milliseconds (integer >= 1)
-- ARGV[6]  grace: lease.lua's ARGV[9], microseconds (integer >= 0)
-- ARGV[7]  deny (check only): "1" records a new id as rejected without
--          taking its cost (the caller's quota is spent); absent or "0":
--          decide by the bucket
--
-- Record fields: a = the check's decision (1 allowed, 0 rejected), ac = the
-- check's cost, p = the post-hoc charge, r = the refund. A field is absent
-- until its operation was applied; each operation is applied at most once
-- per record.
--
--   check   with a: replayed, nothing written, the first decision answered.
--           Else the check's cost is taken if the bucket holds it (a = 1)
--           or nothing is (a = 0).
--   charge  with p: replayed when ARGV cost = p, else a conflict; nothing
--           written. Else the cost is taken even below zero (down to
--           -capacity, the floor lease.lua's debt has) and p = cost.
--   refund  without any field: unknown. With r: replayed or a conflict, as
--           charge. Else, when cost > charged (ac when a = 1, plus p), over;
--           otherwise the cost goes back to the bucket (up to capacity) and
--           r = cost.
--
-- The bucket's arithmetic is bucket.lua's, which runs before this: its
-- refill on Redis TIME, with its fresh-bucket grace and debt credit kept
-- the same way (a check takes as grant does with want = min = cost); the
-- bucket's d (demand) is left alone. Every write sets the bucket's expiry
-- as lease.lua does and the record's to the horizon.
--
-- Reply: { status (0 applied, 1 replayed, 2 unknown, 3 over, 4 conflict),
-- allowed (the check's decision, 0 without one), charged, refunded, the
-- applied cost of the operation (for a replay or conflict: the first),
-- tokens (string: a float), store time (microseconds) }.
-- Errors: an argument out of range is refused before anything is read or
-- written; a key of another type fails at the first HMGET, before any
-- write.

local op = ARGV[1]
if op ~= 'check' and op ~= 'refund' and op ~= 'charge' then
  return redis.error_reply('ERR quota request: ARGV[1] op must be check, refund or charge, got ' .. tostring(op))
end
local v, refused = parseArgs('request', { { 'rate' }, { 'capacity' }, { 'cost', 1 }, { 'horizon', 1 }, { 'grace', 0 } }, 2)
if refused then
  return refused
end
local rate, capacity, cost, horizon, grace = v[1], v[2], v[3], v[4], v[5]

local now = storeTime()
local rec = redis.call('HMGET', KEYS[2], 'a', 'ac', 'p', 'r')
local a, ac, p, r = tonumber(rec[1]), tonumber(rec[2]) or 0, tonumber(rec[3]), tonumber(rec[4])
local b = loadBucket(KEYS[1], rate, capacity, grace, now)
chargeDebt(b, 0, capacity, grace, now)

local function charged()
  local c = 0
  if a == 1 then
    c = ac
  end
  return c + (p or 0)
end
local function answer(status, applied)
  return { status, a or 0, charged(), r or 0, applied, formatTokens(b.tokens), now }
end

if op == 'check' then
  if a ~= nil then
    return answer(1, ac)
  end
  a = 0
  if ARGV[7] ~= '1' and grant(b, cost, cost, 1) > 0 then
    a = 1
  end
  ac = cost
  redis.call('HSET', KEYS[2], 'a', a, 'ac', ac)
elseif op == 'charge' then
  if p ~= nil then
    if p == cost then
      return answer(1, p)
    end
    return answer(4, p)
  end
  b.tokens = math.max(-capacity, b.tokens - cost)
  p = cost
  redis.call('HSET', KEYS[2], 'p', p)
else -- refund
  if a == nil and p == nil and r == nil then
    return answer(2, 0)
  end
  if r ~= nil then
    if r == cost then
      return answer(1, r)
    end
    return answer(4, r)
  end
  if cost > charged() then
    return answer(3, 0)
  end
  b.tokens = math.min(capacity, b.tokens + cost)
  r = cost
  redis.call('HSET', KEYS[2], 'r', r)
end
redis.call('PEXPIRE', KEYS[2], string.format('%d', horizon))
saveBucket(KEYS[1], b, rate, capacity)
return answer(0, cost)
