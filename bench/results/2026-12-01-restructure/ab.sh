#!/usr/bin/env bash
# The side-by-side run of this directory: the strongsync before the restructuring (b2b3153) and
# after it (dbdcd99), in turn, with the same bench scripts and tools. Rounds 1-3 run before then
# after, rounds 4-6 after then before. BEFORE and AFTER are the two release binaries, TOOLS a
# directory with the bench tools (cargo build --release -p strongsync-bench --bins).
set -u
cd "$(dirname "$0")/../../.."
OUT=bench/results/2026-12-01-restructure
run() {
    local who=$1 round=$2 bin
    if [ "$who" = before ]; then bin=$BEFORE; else bin=$AFTER; fi
    bench/run profile --strongsync-bin "$bin" --tools-dir "$TOOLS" --out "$OUT/point-$who-$round"
    bench/run profile --workload update_non_index --mode strongsync --strongsync-bin "$bin" \
        --tools-dir "$TOOLS" --out "$OUT/update-$who-$round"
    bench/run matrix --workloads hot --threads 64 --delays 5 --modes strongsync \
        --thread-handling one-thread-per-connection --rounds 1 --time 10 --warmup 2 --tables 4 \
        --table-size 10000 --no-chart --strongsync-bin "$bin" --tools-dir "$TOOLS" \
        --out "$OUT/hot-$who-$round"
}
for round in 1 2 3; do run before $round; run after $round; done
for round in 4 5 6; do run after $round; run before $round; done
