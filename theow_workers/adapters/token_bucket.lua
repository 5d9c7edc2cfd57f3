-- A token bucket for one name (an agent's runs), shared by every worker: `rate`
-- tokens a millisecond up to `burst`, one taken per call. Over the server's clock
-- (TIME), so workers with skewed clocks agree. The same arithmetic as the web
-- process's in-memory buckets (theow_workers/web/rate.py).
--
-- KEYS[1]  hash: tokens (a float, as text), at (ms of the last call)
-- ARGV[1]  tokens a millisecond    ARGV[2]  burst    ARGV[3]  TTL of the hash in ms
--
-- Returns 0 (a token taken) or the ms to wait for one (nothing taken).
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.max(1, math.ceil((1 - tokens) / rate))
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return wait
