-- Global LLM rate limit for one model: requests/min and tokens/min, shared by
-- every explorer worker. Sliding window over the server's clock (TIME), so
-- workers on machines with skewed clocks still agree.
--
-- KEYS[1]  sorted set: one member per request in the window, score = ms
-- KEYS[2]  sorted set: "<request id>:<tokens>" per request, score = ms
-- KEYS[3]  back-off after a per-minute 429 (string with a TTL)
-- KEYS[4]  stop after a per-day 429 (string with a TTL, value = reason)
-- ARGV[1]  requests per window      ARGV[2]  tokens per window
-- ARGV[3]  tokens of this request   ARGV[4]  request id
-- ARGV[5]  window in ms
--
-- Returns {0, 0} (granted and recorded), {1, ms to wait}, or {2, ms until the stop ends}.
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens, id, window = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])

if redis.call('EXISTS', KEYS[4]) == 1 then
  return {2, redis.call('PTTL', KEYS[4])}
end
local backoff = redis.call('PTTL', KEYS[3])
if backoff > 0 then
  return {1, backoff}
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)

local count = redis.call('ZCARD', KEYS[1])
if count >= rpm then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, math.max(1, tonumber(oldest[2]) + window - now)}
end

local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local used = 0
for i = 1, #entries, 2 do
  used = used + tonumber(string.match(entries[i], ':(%-?%d+)$'))
end
if count > 0 and used + tokens > tpm then
  -- wait until enough of the oldest requests leave the window
  local freed = 0
  for i = 1, #entries, 2 do
    freed = freed + tonumber(string.match(entries[i], ':(%-?%d+)$'))
    if used - freed + tokens <= tpm then
      return {1, math.max(1, tonumber(entries[i + 1]) + window - now)}
    end
  end
  return {1, window}
end

redis.call('ZADD', KEYS[1], now, id)
redis.call('ZADD', KEYS[2], now, id .. ':' .. tokens)
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('PEXPIRE', KEYS[2], window * 2)
return {0, 0}
