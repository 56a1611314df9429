-- A GCRA limiter in Redis Lua, as popular Redis limiters write one: the
-- comparison of docs/REDIS.md's measurements. KEYS[1] is the key; ARGV
-- are CL.THROTTLE's max_burst, count per period, period (seconds) and
-- quantity, and the reply is CL.THROTTLE's five integers. Time is Redis'
-- own clock, in microseconds.
local burst, count, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local q = tonumber(ARGV[4] or "1")
local t = redis.call("TIME")
local now = t[1] * 1000000 + t[2]
local interval = period * 1000000 / count
local tolerance = interval * (burst + 1)
local tat = tonumber(redis.call("GET", KEYS[1]) or now)
if tat < now then tat = now end
local newtat = tat + interval * q
if newtat - tolerance > now then
  local retry = -1
  if interval * q <= tolerance then retry = math.ceil((newtat - tolerance - now) / 1000000) end
  return {1, burst + 1, math.max(0, math.floor((tolerance - (tat - now)) / interval)), retry, math.ceil((tat - now) / 1000000)}
end
redis.call("SET", KEYS[1], newtat, "PX", math.ceil((newtat - now) / 1000) + 1)
return {0, burst + 1, math.floor((tolerance - (newtat - now)) / interval), -1, math.ceil((newtat - now) / 1000000)}
