#!/usr/bin/env bash
# Puts one synchronous sender through the dev cluster beside the floor
# under it, alternating, because on a shared machine both move from minute
# to minute: each round runs BenchmarkFloorRaftSync (a stock three-voter
# hashicorp/raft group on raft-wal, fsync on, nothing of quorumbus's) and
# then `quorumbus bench -window 1` for 10 s against a fresh `quorumbus dev`.
# Each line ends with the cores other guests stole meanwhile.
#
#   scripts/sync-floor.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tmp=$(mktemp -d)
dev=
trap '[ -n "$dev" ] && kill $dev 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

go build -o "$tmp/quorumbus" ./cmd/quorumbus
go test -c -o "$tmp/node.test" ./node/

. scripts/stolen.sh

floor() {
	"$tmp/node.test" -test.run '^$' -test.bench 'FloorRaftSync$' -test.benchtime 8000x |
		awk '/^BenchmarkFloor/ { printf "floor:  p50 %s ms  p99 %s ms", $5, $7 }'
}

broker() {
	rm -rf "$tmp/data"
	"$tmp/quorumbus" dev --data "$tmp/data" --amqp-addr 127.0.0.1:5691 --http-addr 127.0.0.1:5391 \
		--node-port 7311 --log-level warn >"$tmp/dev.log" 2>&1 &
	dev=$!
	for _ in $(seq 100); do curl -sf 127.0.0.1:5391/readyz >/dev/null && break; sleep 0.2; done
	"$tmp/quorumbus" queue create bench -placement 127.0.0.1:7311 -cluster-tls-dir "$tmp/data/cluster-tls" >/dev/null
	"$tmp/quorumbus" bench -url amqp://127.0.0.1:5691 -queue bench -mode send -window 1 -duration 10s |
		awk '/^send latency:/ { printf "broker: p50 %s  p99 %s", $4, $6 }'
	kill $dev; wait $dev 2>/dev/null || true
	dev=
}

for _ in $(seq "$rounds"); do
	stolen floor
	stolen broker
done
