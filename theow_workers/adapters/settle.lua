-- Replace a request's estimated token count with the real one, at the same time.
-- KEYS[1] tokens sorted set (see ratelimit.lua)
-- ARGV[1] "<id>:<estimated>"   ARGV[2] "<id>:<actual>"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], score, ARGV[2])
return 1
