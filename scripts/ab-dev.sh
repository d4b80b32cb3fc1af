#!/usr/bin/env bash
# Compares the dev cluster of two revisions, alternating them round by
# round, because on a shared machine figures move from minute to minute:
# each round starts a fresh `quorumbus dev` of one binary and measures
# sends (two connections of two links, 1,024 in flight each), peek-lock
# receive + complete of what was sent, and one synchronous sender
# (`-window 1`) for 10 s; then the other binary. Each line ends with the
# cores other guests stole meanwhile.
#
#   scripts/ab-dev.sh OLD_REV [NEW_REV] [ROUNDS] [COUNT]
#
# NEW_REV defaults to the work tree as it is (uncommitted changes too).
# Like for like across revisions: a binary that knows -plain-cluster runs
# its cluster plane in plain text, as revisions from before mutual TLS
# did.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/ab-dev.sh OLD_REV [NEW_REV] [ROUNDS] [COUNT]}
new=${2:-}
rounds=${3:-3}
count=${4:-200000}
tmp=$(mktemp -d)
dev=
cleanup() {
	[ -n "$dev" ] && kill "$dev" 2>/dev/null
	wait 2>/dev/null || true
	git worktree remove --force "$tmp/src-old" 2>/dev/null || true
	[ -d "$tmp/src-new" ] && git worktree remove --force "$tmp/src-new" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

build() { # build REV OUT: OUT is the quorumbus binary of REV (the work tree when REV is empty)
	if [ -z "$1" ]; then
		go build -o "$2" ./cmd/quorumbus
		return
	fi
	local wt="$tmp/src-$(basename "$2" .bin)"
	git worktree add --detach -q "$wt" "$1"
	(cd "$wt" && go build -o "$2" ./cmd/quorumbus)
}
build "$old" "$tmp/old.bin"
build "$new" "$tmp/new.bin"

. scripts/stolen.sh

round() { # round NAME BINARY
	local bin=$2 url=amqp://127.0.0.1:5692
	rm -rf "$tmp/data"
	local extra=() flags
	flags=$("$bin" dev -h 2>&1 || true)
	if grep -q -- -plain-cluster <<<"$flags"; then
		extra+=(-plain-cluster)
	fi
	if grep -q -- -amqps-addr <<<"$flags"; then
		extra+=(-amqps-addr "") # no AMQPS listener (older revisions had none)
	fi
	"$bin" dev --data "$tmp/data" --amqp-addr 127.0.0.1:5692 --http-addr 127.0.0.1:5392 \
		--node-port 7321 --log-level warn "${extra[@]}" >"$tmp/dev.log" 2>&1 &
	dev=$!
	local ready=
	for _ in $(seq 150); do
		curl -sf 127.0.0.1:5392/readyz >/dev/null && { ready=1; break; }
		sleep 0.2
	done
	if [ -z "$ready" ]; then
		echo "$1: the dev cluster was not ready in 30 s; its log:" >&2
		cat "$tmp/dev.log" >&2
		exit 1
	fi
	"$bin" queue create bench -placement 127.0.0.1:7321 >/dev/null
	"$bin" queue create sync -placement 127.0.0.1:7321 >/dev/null
	printf '%s send:    ' "$1"
	stolen sh -c "'$bin' bench -url $url -queue bench -mode send -conns 2 -links 2 -window 1024 -count $count |
		awk '/msgs\\/s/ { printf \"%s \", \$0 }'"
	printf '%s receive: ' "$1"
	stolen sh -c "'$bin' bench -url $url -queue bench -mode receive -conns 2 -links 2 -count $count |
		awk '/msgs\\/s/ { printf \"%s \", \$0 }'"
	printf '%s sync:    ' "$1"
	stolen sh -c "'$bin' bench -url $url -queue sync -mode send -window 1 -duration 10s |
		awk '/latency/ { printf \"%s \", \$0 }'"
	kill "$dev"; wait "$dev" 2>/dev/null || true
	dev=
}

for _ in $(seq "$rounds"); do
	round old "$tmp/old.bin"
	round new "$tmp/new.bin"
done
