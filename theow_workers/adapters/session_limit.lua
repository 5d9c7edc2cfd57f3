-- Take one LLM session from a session id's budget, atomically across workers.
-- KEYS[1] counter   ARGV[1] limit   ARGV[2] TTL in seconds
-- Returns the session's number (1..limit), or -1 when the budget is used up.
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then
  return -1
end
used = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return used
