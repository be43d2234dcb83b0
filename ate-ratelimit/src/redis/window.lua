-- KEYS[i]: limit i's window for this caller.
-- ARGV: cost, '1' to record denials too (CountDenied) or '0' (all or
-- nothing), now rounded down and the attempt's time rounded up, in
-- microseconds ('' for the server's clock), then each limit's N, window
-- in ticks and tick in microseconds.
-- Returns now in microseconds, then per limit: allowed, attempts held
-- before the call, when the same cost fits again and when the oldest
-- attempt held leaves (microseconds, 0 for none).
local cost = tonumber(ARGV[1])
local count_denied = ARGV[2] == '1'
local now_us, at_us
-- The shortest expiry a key gets, in milliseconds of the server's clock.
-- With an explicit time (tests stepping through time) the server cannot
-- relate the caller's clock to its own: a window of a few milliseconds
-- would expire under a test whose steps take longer on a busy machine.
local min_ttl = 1
local server_clock = ARGV[3] == ''
if ARGV[3] ~= '' then
  now_us = tonumber(ARGV[3])
  at_us = tonumber(ARGV[4])
  min_ttl = 60000
else
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  at_us = now_us
end
-- A run is 28 bytes: time, cum and expiry as doubles (whole numbers,
-- exact below 2^53), count as a u32.
local function parse(e)
  if #e ~= 28 then return nil end
  local t, c, cum, ex = struct.unpack('>dI4dd', e)
  return t, c, cum, ex
end
local function enc(t, c, cum, ex)
  return struct.pack('>dI4dd', t, c, cum, ex)
end
local function bad(key)
  return redis.error_reply('WRONGTYPE ' .. key .. ' holds a list that is not a window')
end
-- The tick (1, 1000 or 1000000 microseconds) a stored time `t` is in, on
-- the server's clock: the one that puts it nearest now. The three are a
-- thousandfold apart, so a time of the last few years is never taken for
-- another tick's.
local function tick_of(t)
  local best, gap = nil, nil
  for _, k in ipairs({1, 1000, 1000000}) do
    local d = math.abs(math.log(math.max(t, 1) * k) - math.log(now_us))
    if not gap or d < gap then best, gap = k, d end
  end
  return best
end
-- Rewrites `key`'s runs from ticks of `from` to ticks of `to` microseconds
-- (a limit's window moved across a tick boundary under the same name).
-- Rounded up: an attempt never leaves sooner than it did.
local function convert(key, from, to, window)
  local runs = redis.call('LRANGE', key, 0, -1)
  local ttl = redis.call('PTTL', key)
  -- No expiry past two of the new windows (a month's window made half an
  -- hour must not keep an idle key for two months).
  local cap = math.ceil(now_us / to) + 2 * window
  local out, latest = {}, 0
  for j = 1, #runs do
    local t, c, cum, ex = parse(runs[j])
    if not t then return false end
    ex = math.min(math.ceil(ex * from / to), cap)
    if ex > latest then latest = ex end
    out[j] = enc(math.ceil(t * from / to), c, cum, ex)
  end
  redis.call('DEL', key)
  for from_ = 1, #out, 1000 do
    redis.call('RPUSH', key, unpack(out, from_, math.min(from_ + 999, #out)))
  end
  -- The rewrite keeps the key's expiry (DEL took it): as it was, else
  -- from the runs' own.
  local most = math.ceil((latest * to - now_us) / 1000)
  if ttl <= 0 or ttl > most then ttl = most end
  redis.call('PEXPIRE', key, math.max(min_ttl, ttl))
  return true
end
-- The last run (0-based from the head, at most `hi`) for which `keep`
-- holds, given it holds for the head and, runs being newest first, for
-- every run before one it holds for: a binary search, O(log runs) calls.
local function last_where(key, hi, keep)
  local lo = 0
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    local t, c, cum, ex = parse(redis.call('LINDEX', key, mid))
    if not t then return nil end
    if keep(t, c, cum, ex) then lo = mid else hi = mid - 1 end
  end
  return lo
end
local n = #KEYS
local st = {}
local all = true
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[2 + 3 * i])
  local window = tonumber(ARGV[3 + 3 * i])
  local tick = tonumber(ARGV[4 + 3 * i])
  local now = math.floor(now_us / tick)
  -- Every field named once here: the table is sized once.
  local s = {limit = limit, window = window, tick = tick,
    at = math.ceil(at_us / tick), count = 0, single = false,
    ht = false, hc = 0, hcum = 0, hex = false,
    ot = false, oc = 0, ocum = 0, oex = 0}
  local head = redis.call('LINDEX', key, 0)
  if head and not parse(head) then
    -- A window an earlier release kept: times in microseconds, newest
    -- first. Rewrite it as runs (anything else is not ours).
    local old = redis.call('LRANGE', key, 0, -1)
    local runs, last, c, cum = {}, nil, 0, 0
    for j = #old, 1, -1 do
      local us = tonumber(old[j])
      if not us then return bad(key) end
      local t = math.ceil(us / tick)
      if t ~= last then
        if last then runs[#runs + 1] = enc(last, c, cum, 0) end
        last, c = t, 0
      end
      c = c + 1
      cum = cum + 1
    end
    runs[#runs + 1] = enc(last, c, cum, 0)
    redis.call('DEL', key)
    -- In batches: unpack has a stack limit of a few thousand values.
    for from = 1, #runs, 1000 do
      redis.call('LPUSH', key, unpack(runs, from, math.min(from + 999, #runs)))
    end
    -- It expires as the old key did, a window after its newest attempt,
    -- even if no check records on it again.
    redis.call('PEXPIRE', key, math.max(min_ttl, math.ceil(((last + window) * tick - now_us) / 1000)))
    head = runs[#runs]
  end
  if head and server_clock then
    -- Neither the key nor the runs name their tick: the magnitude does.
    local t0 = parse(head)
    local stored = t0 and tick_of(t0) or tick
    if stored ~= tick then
      if not convert(key, stored, tick, window) then return bad(key) end
      head = redis.call('LINDEX', key, 0)
    end
  end
  if head then
    local ht, hc, hcum, hex = parse(head)
    -- An attempt at tick a counts at now iff a > now - window.
    local edge = now - window
    if ht <= edge then
      redis.call('DEL', key)
    else
      local tail = redis.call('LINDEX', key, -1)
      local ot, oc, ocum, oex = parse(tail)
      if not ot then return bad(key) end
      if ot <= edge then
        -- Expired runs at the tail: found by a binary search and cut in
        -- one LTRIM, however many (one RPOP each was O(runs)).
        local last = last_where(key, redis.call('LLEN', key) - 1,
          function(t) return t > edge end)
        if not last then return bad(key) end
        redis.call('LTRIM', key, 0, last)
        tail = redis.call('LINDEX', key, -1)
        ot, oc, ocum, oex = parse(tail)
      end
      s.ht, s.hc, s.hcum, s.hex = ht, hc, hcum, hex
      s.ot, s.oc, s.ocum, s.oex = ot, oc, ocum, oex
      s.single = tail == head
      s.count = hcum - ocum + oc
    end
  end
  if not count_denied and s.count + cost > limit then all = false end
  st[i] = s
end
local out = {now_us}
for i = 1, n do
  local s = st[i]
  local key, limit, window, tick = KEYS[i], s.limit, s.window, s.tick
  local count = s.count
  local len = count
  if count_denied or all then
    -- Time never goes backwards within a key: runs stay sorted.
    local t = s.at
    if s.ht and s.ht > t then t = s.ht end
    -- More than N at one instant would only push out each other.
    local push = math.min(cost, limit)
    -- The key outlives its newest attempt by a window: extend it to two
    -- windows past this one when it would not.
    local ex = s.hex or 0
    local extend = ex < t + window
    if extend then ex = t + 2 * window end
    len = count + push
    if s.ht == t and s.hc + push > limit then
      -- More than N at one instant: this run alone is the window, its
      -- count N (a count past N could overflow the run's u32 and fail
      -- the script after it had written).
      local cum = s.hcum + push
      redis.call('DEL', key)
      redis.call('LPUSH', key, enc(t, limit, cum, ex))
      s.ht, s.hc, s.hcum, s.hex = t, limit, cum, ex
      s.ot, s.oc, s.ocum, s.oex = t, limit, cum, ex
      s.single = true
      len = limit
      extend = true
    elseif s.ht == t then
      s.hc, s.hcum = s.hc + push, s.hcum + push
      redis.call('LSET', key, 0, enc(t, s.hc, s.hcum, ex))
      if s.single then s.oc, s.ocum, s.oex = s.hc, s.hcum, ex end
    else
      local cum = (s.hcum or 0) + push
      redis.call('LPUSH', key, enc(t, push, cum, ex))
      if not s.ot then
        s.ot, s.oc, s.ocum, s.oex = t, push, cum, ex
        s.single = true
      else
        s.single = false
      end
      s.ht, s.hc, s.hcum = t, push, cum
    end
    if extend then
      redis.call('PEXPIRE', key, math.max(min_ttl, math.ceil((ex * tick - now_us) / 1000)))
    end
    -- The window keeps the newest N attempts: drop the oldest `drop`.
    -- The run that then holds the oldest one kept is the last whose
    -- running total passes them: a binary search, one LTRIM, one LSET.
    local drop = len - limit
    if drop > 0 then
      local base = s.ocum - s.oc
      local last = last_where(key, redis.call('LLEN', key) - 1,
        function(_, _, cum) return cum > base + drop end)
      if not last then return bad(key) end
      redis.call('LTRIM', key, 0, last)
      local ot, oc, ocum, oex = parse(redis.call('LINDEX', key, -1))
      s.ot, s.oc, s.ocum, s.oex = ot, ocum - (base + drop), ocum, oex
      if s.oc ~= oc then
        redis.call('LSET', key, -1, enc(s.ot, s.oc, s.ocum, s.oex))
      end
      len = limit
    end
  end
  -- Until the same cost fits again: when the attempt whose leaving leaves
  -- room for it leaves (the excess-th oldest held).
  local wait = 0
  if len > limit - cost then
    -- The excess-th oldest attempt held: in the last run whose running
    -- total reaches it (a binary search on the totals).
    local excess = len - (limit - cost)
    local t = s.ot
    if excess > s.oc then
      local base = s.ocum - s.oc
      local at = last_where(key, redis.call('LLEN', key) - 1,
        function(_, _, cum) return cum >= base + excess end)
      if not at then return bad(key) end
      t = parse(redis.call('LINDEX', key, at))
    end
    wait = (t + window) * tick
  end
  -- When the oldest attempt held leaves.
  local reset = 0
  if len > 0 then reset = (s.ot + window) * tick end
  out[4 * i - 2] = (count + cost <= limit) and 1 or 0
  out[4 * i - 1] = count
  out[4 * i] = wait
  out[4 * i + 1] = reset
end
return out
