#!/usr/bin/env bash
# Runs the benchmark suite (or some groups) and writes BENCHMARKS.md,
# benches/README.md and the SVGs from every result found in target/.
#   bash benches/run.sh                     # everything
#   bash benches/run.sh ratelimit memory    # some groups (all_groups below); the tables are rewritten once target/ holds every group's results
# Settings: MEASURE_SECS (default 3), WARMUP_SECS (default 1),
# HTTP_SECS (default 5), HTTP_CONNECTIONS (default 16).
set -euo pipefail
cd "$(dirname "$0")/.."
export K8S_OPENAPI_ENABLED_VERSION="${K8S_OPENAPI_ENABLED_VERSION:-1.37}"
measure="${MEASURE_SECS:-3}"
warmup="${WARMUP_SECS:-1}"
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target/ate-bench"
out="$(cd "$target/ate-bench" && pwd)"
# The durable ledger bench fsyncs: run it on the project's disk, not tmpfs.
export ATE_BENCH_DIR="$out"
# Every group. summarize.py knows where each one's results are and checks
# that it was given this same list, so a group is added in both places.
all_groups=(readiness generation ratelimit configguard ledger ledger_latency ledger_pg_ab wiring memory direct_ab keyed_ab redis_ab http)
groups=("$@")
[[ ${#groups[@]} -eq 0 ]] && groups=("${all_groups[@]}")

for g in "${groups[@]}"; do
  case "$g" in
    readiness|generation|ratelimit|configguard|ledger|wiring)
      cmd="cargo bench -p ate-benches --bench $g -- --warm-up-time $warmup --measurement-time $measure"
      $cmd
      ;;
    ledger_latency)
      cargo build --release -p ate-benches --bin ledger_latency
      cmd="cargo run --release -p ate-benches --bin ledger_latency -- 300 $target/ate-bench"
      "$target/release/ledger_latency" 300 "$out" | tee "$out/ledger_latency.jsonl"
      ;;
    direct_ab|keyed_ab|redis_ab|ledger_pg_ab)
      cargo build --release -p ate-benches --bin "$g"
      cmd="cargo run --release -p ate-benches --bin $g"
      "$target/release/$g" | tee "$out/$g.jsonl"
      ;;
    memory)
      cargo build --release -p ate-benches --bin memory
      cmd="cargo run --release -p ate-benches --bin memory"
      "$target/release/memory" | tee "$out/memory.jsonl"
      ;;
    http)
      cargo build --release -p ate-benches --bin http_overhead
      cmd="cargo run --release -p ate-benches --bin http_overhead -- ${HTTP_ROUNDS:-20} ${HTTP_CONNECTIONS:-16}"
      "$target/release/http_overhead" "${HTTP_ROUNDS:-20}" "${HTTP_CONNECTIONS:-16}" | tee "$out/http.jsonl"
      ;;
    *)
      echo "unknown group $g (${all_groups[*]})" >&2
      exit 2
      ;;
  esac
  echo "$cmd" > "$out/cmd-$g.txt"
done
commands="$(cat "$out"/cmd-*.txt 2>/dev/null || true)"
python3 benches/summarize.py "$target" BENCHMARKS.md benches "$commands" "${all_groups[*]}"
