#!/usr/bin/env bash
# Measures the dev cluster's memory under a backlog far larger than its
# caches: builds quorumbus, starts `quorumbus dev` on spare ports with a
# fresh data directory, sends MESSAGES messages of SIZE bytes to one queue
# without receiving any, and samples the process's RSS every 2 s.
#
#   scripts/backlog-rss.sh [MESSAGES] [SIZE] [CACHE_MB]
#
# Defaults: 2,000,000 x 1 KiB (2 GB of payload, 6 GB across the three
# replicas) with a 32 MiB cache per group. Needs about 8 GB of free disk.
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${1:-2000000}
size=${2:-1024}
cache=${3:-32}
bin=$(mktemp -d)/quorumbus
data=$(mktemp -d)
trap 'kill $dev 2>/dev/null || true; wait 2>/dev/null; rm -rf "$data" "$(dirname "$bin")"' EXIT

go build -o "$bin" ./cmd/quorumbus
"$bin" dev --data "$data" --amqp-addr 127.0.0.1:5690 --http-addr 127.0.0.1:5390 \
	--node-port 7301 --cache-mb "$cache" --log-level warn >"$data/dev.log" 2>&1 &
dev=$!
for _ in $(seq 100); do curl -sf 127.0.0.1:5390/readyz >/dev/null && break; sleep 0.2; done
"$bin" queue create backlog -placement 127.0.0.1:7301 -cluster-tls-dir "$data/cluster-tls" -max-size-mb 81920 >/dev/null

peak=0
sample() {
	local rss
	rss=$(awk '/VmRSS/ {print $2}' /proc/$dev/status)
	[ "$rss" -gt "$peak" ] && peak=$rss
	printf 'rss %6d MiB  data %s\n' $((rss / 1024)) "$(du -sh "$data" | cut -f1)"
}
( while kill -0 $dev 2>/dev/null; do sample; sleep 2; done ) &
sampler=$!
"$bin" bench -url amqp://127.0.0.1:5690 -queue backlog -mode send -count "$messages" -size "$size" -window 256 | tail -4
kill $sampler 2>/dev/null || true
sample
echo "cache per group: ${cache} MiB; backlog: ${messages} x ${size} B"
