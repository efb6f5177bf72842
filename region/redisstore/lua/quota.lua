-- quota.lua: one call to a key's regional quota counters, atomically over
-- all of its periods (docs/design.md [quotas]).
--
-- KEYS[i]  the counter of period i, a hash, e.g.
--          "quota:{acct_1}:q:month:1796083200" (the hash tag keeps every
--          counter of a key on its bucket's Redis Cluster slot)
-- ARGV[1]  want (integer >= 0)
-- ARGV[2]  min (integer in [0, want])
-- ARGV[3]  charge (integer >= 0): added to every counter after its return
-- ARGV[4]  needbase: "1" grants nothing while a counter holds no base after
--          the call (its returns and charge still apply); "0" grants on the
--          counter alone
-- then, per period i, 7 values from ARGV[5 + 7(i-1)]:
--   limit (integer >= 1), share (float in (0, 1]), return (integer >= 0),
--   expire-at (unix milliseconds), base total, base region, base time
--   (unix microseconds; 0 = no base in the call)
--
-- Counter fields: c = the region's spend and leases in the period, b and
-- br = the base's total and region spend, bt = the base's time (absent: no
-- base, b = br = 0).
--
-- Time is Redis' (TIME). A period whose expire-at has passed can no
-- longer be bounded (its counter is gone): the call grants nothing and
-- that period is neither read nor written (reply c = 0, allowance = 0,
-- ended = 1).
--
-- A newer base replaces the counter's (and c becomes at least br), each
-- floored at 0 and br at most b: spend is never negative, whatever refunds a
-- base counted, and no region spent more than the fleet; the
-- return is taken back (c never below 0) and the charge added; then each counter's room is
-- floor(br + share × (limit − b)) − c, and every counter grants
-- g = min(want, every room), or 0 when g < min.
--
-- Reply: { granted, then per period: c, allowance, bt, ended (0 or 1) }.

local want = tonumber(ARGV[1])
local min = tonumber(ARGV[2])
local charge = tonumber(ARGV[3])
local needbase = ARGV[4] == '1'
local n = #KEYS
local state = {}
local g = want
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, n do
  local a = 5 + 7 * (i - 1)
  if nowms >= tonumber(ARGV[a + 3]) then
    g = 0
    state[i] = false
  else
    local limit = tonumber(ARGV[a])
    local share = tonumber(ARGV[a + 1])
    local ret = tonumber(ARGV[a + 2])
    local bt_new = tonumber(ARGV[a + 6])
    local f = redis.call('HMGET', KEYS[i], 'c', 'b', 'br', 'bt')
    local c = tonumber(f[1]) or 0
    local b = tonumber(f[2]) or 0
    local br = tonumber(f[3]) or 0
    local bt = tonumber(f[4]) or 0
    if bt_new > bt then
      b = math.max(0, tonumber(ARGV[a + 4]))
      br = math.min(math.max(0, tonumber(ARGV[a + 5])), b)
      bt = bt_new
      if c < br then c = br end
    end
    c = c - ret
    if c < 0 then c = 0 end
    c = c + charge
    local allowance = br + math.floor(share * (limit - b))
    local room = allowance - c
    if room < g then g = room end
    if needbase and bt == 0 then g = 0 end
    state[i] = { c, b, br, bt, allowance, tonumber(ARGV[a + 3]) }
  end
end
if g < min or g < 0 then g = 0 end
local reply = { g }
for i = 1, n do
  local s = state[i]
  if s then
    local c = s[1] + g
    redis.call('HSET', KEYS[i], 'c', c, 'b', s[2], 'br', s[3], 'bt', s[4])
    redis.call('PEXPIREAT', KEYS[i], s[6])
    reply[#reply + 1] = c
    reply[#reply + 1] = s[5]
    reply[#reply + 1] = s[4]
    reply[#reply + 1] = 0
  else
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = 1
  end
end
return reply
