-- wrk script of `cargo xtask bench` (phase 14): POST /tasks, one new task per
-- request, each with its own idempotency key. WRK_URL is the task's url,
-- WRK_RUN a prefix that keeps keys apart between windows. At the end it
-- prints one line the bench reads: requests, duration (µs), non-2xx/3xx
-- answers, socket errors, latency p50 and p99 (µs).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local url = os.getenv("WRK_URL") or "http://127.0.0.1:9/ok"
local run = os.getenv("WRK_RUN") or "wrk"
local headers = {["Content-Type"] = "application/json"}

request = function()
  counter = counter + 1
  local body = string.format('{"url":"%s","idempotency_key":"%s-%d-%d","json":{"n":%d}}',
                             url, run, tid, counter, counter)
  return wrk.format("POST", "/tasks", headers, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK_SUMMARY %d %d %d %d %d %d\n",
    summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
