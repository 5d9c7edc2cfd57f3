-- Reserve the most a model call may cost from the day's spend cap, shared by every worker.
-- Integer micro-dollars, so concurrent reservations add up exactly.
--
-- KEYS[1]  the day's spend (integer, micro-dollars reserved or spent)
-- KEYS[2]  the day's "budget reached" marker (string: why)
-- ARGV[1]  the cap (micro-dollars)     ARGV[2]  this call's most (micro-dollars)
-- ARGV[3]  seconds until the day ends  ARGV[4]  why, set on KEYS[2] when refused
--
-- Returns {0, spent after} (reserved) or {1, spent} (refused: nothing reserved).
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[2])
if spent + amount > tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[4], 'EX', math.max(1, tonumber(ARGV[3])))
  return {1, spent}
end
local now = redis.call('INCRBY', KEYS[1], amount)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]) + 86400)
return {0, now}
