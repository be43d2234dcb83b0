#!/usr/bin/env bash
# Runs the benchmark suite (or one group) and writes BENCHMARKS.md plus SVGs.
#   bash benches/run.sh                # everything
#   bash benches/run.sh ratelimit      # readiness|generation|ratelimit|configguard|ledger|http|memory
# Measurement settings: MEASURE_SECS (default 3), WARMUP_SECS (default 1),
# HTTP_SECS (default 5), HTTP_CONNECTIONS (default 16).
set -euo pipefail
cd "$(dirname "$0")/.."
export K8S_OPENAPI_ENABLED_VERSION="${K8S_OPENAPI_ENABLED_VERSION:-1.37}"
group="${1:-all}"
measure="${MEASURE_SECS:-3}"
warmup="${WARMUP_SECS:-1}"
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target/ate-bench"
# The durable ledger bench fsyncs: run it on the project's disk, not tmpfs.
export ATE_BENCH_DIR="$target/ate-bench"
commands=""

run() {
  commands+="$*"$'\n'
  "$@"
}

for b in readiness generation ratelimit configguard ledger; do
  if [[ "$group" == all || "$group" == "$b" ]]; then
    run cargo bench -p ate-benches --bench "$b" -- --warm-up-time "$warmup" --measurement-time "$measure"
  fi
done
if [[ "$group" == all || "$group" == memory ]]; then
  run cargo build --release -p ate-benches --bin memory
  commands+="$target/release/memory > $target/ate-bench/memory.jsonl"$'\n'
  "$target/release/memory" | tee "$target/ate-bench/memory.jsonl"
fi
if [[ "$group" == all || "$group" == http ]]; then
  run cargo build --release -p ate-benches --bin http_overhead
  commands+="$target/release/http_overhead ${HTTP_SECS:-5} ${HTTP_CONNECTIONS:-16} > $target/ate-bench/http.jsonl"$'\n'
  "$target/release/http_overhead" "${HTTP_SECS:-5}" "${HTTP_CONNECTIONS:-16}" | tee "$target/ate-bench/http.jsonl"
fi
python3 benches/summarize.py "$target" BENCHMARKS.md benches "$commands"
