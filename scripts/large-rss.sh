#!/usr/bin/env bash
# Measures the dev cluster's memory under large messages: builds quorumbus,
# starts `quorumbus dev` on spare ports with a fresh data directory, and
# samples its RSS every second while it
#   1. takes a pipelined burst at a default queue's limit: 2,400 messages
#      of 256 KB from 4 connections with 1,000 in flight each;
#   2. takes four messages of 95 MB, one at a time;
#   3. delivers and completes all of them.
# It prints the peak RSS of each phase beside the memory the configuration
# allows (docs/operations.md, "Memory").
#
#   scripts/large-rss.sh [CACHE_MB]
#
# Needs about 4 GB of free disk; takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${1:-32}
bin=$(mktemp -d)/quorumbus
data=$(mktemp -d)
trap 'kill $dev $sampler 2>/dev/null || true; wait 2>/dev/null; rm -rf "$data" "$(dirname "$bin")"' EXIT

go build -o "$bin" ./cmd/quorumbus
"$bin" dev --data "$data" --amqp-addr 127.0.0.1:5691 --http-addr 127.0.0.1:5391 \
	--node-port 7311 --cache-mb "$cache" --log-level warn >"$data/dev.log" 2>&1 &
dev=$!
for _ in $(seq 150); do curl -sf 127.0.0.1:5391/readyz >/dev/null && break; sleep 0.2; done
"$bin" queue create orders -placement 127.0.0.1:7311 -cluster-tls-dir "$data/cluster-tls" -max-size-mb 5000 >/dev/null
"$bin" queue create big -placement 127.0.0.1:7311 -cluster-tls-dir "$data/cluster-tls" -max-size-mb 5000 -max-message-size-kb 102400 >/dev/null

peakfile=$data/peak
echo 0 >"$peakfile"
( while kill -0 $dev 2>/dev/null; do
	rss=$(awk '/VmRSS/ {print $2}' /proc/$dev/status)
	[ "$rss" -gt "$(cat "$peakfile")" ] && echo "$rss" >"$peakfile"
	sleep 1
done ) &
sampler=$!

phase() {
	local name=$1
	shift
	echo 0 >"$peakfile"
	"$@" | tail -3
	sleep 2
	printf '%-40s peak RSS %6d MiB\n' "$name" $(($(cat "$peakfile") / 1024))
}
url=amqp://127.0.0.1:5691
phase "burst: 2400 x 256 KB, 4 x 1000 in flight" \
	"$bin" bench -url $url -queue orders -mode send -count 2400 -size 262110 -conns 4 -window 1000
phase "large: 4 x 95 MB, one at a time" \
	"$bin" bench -url $url -queue big -mode send -count 4 -size 95000000 -window 1
phase "receive and complete the burst" \
	"$bin" bench -url $url -queue orders -mode receive -count 2400
phase "receive and complete the large" \
	"$bin" bench -url $url -queue big -mode receive -count 4 -credit 1
rss=$(awk '/VmRSS/ {print $2}' /proc/$dev/status)
echo "after the run: RSS $((rss / 1024)) MiB; cache per group ${cache} MiB; data $(du -sh "$data" | cut -f1)"
