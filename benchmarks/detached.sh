#!/usr/bin/env bash
# A command longer than one device call (10 minutes at most): `start` runs it in a session of its own
# (setsid), detached, so it outlives the call that started it on a machine kept warm between calls;
# `wait` returns when it has ended or at the deadline, with the tail of its log.
#
#   benchmarks/detached.sh start DIR COMMAND [ARG...]    DIR/log, DIR/rc (exit status) when it ends
#   benchmarks/detached.sh wait DIR DEADLINE_S
#
# `start` runs the command in a copy of the repository's code (DIR/tree: the packages, benchmarks,
# configs, pyproject.toml, and .data when there is one), started from there: a tool that copies the
# working tree onto the machine again at each call would otherwise replace the files under a running
# command (seen: an import failing half-way through such a copy).
set -uo pipefail
op=$1; dir=$2; shift 2
case $op in
  start)
    mkdir -p "$dir"
    repo=$(cd "$(dirname "$0")/.." && pwd)
    rm -rf "$dir/tree" && mkdir -p "$dir/tree"
    for p in poxm_core orchestration benchmarks configs pyproject.toml .data; do
      [ -e "$repo/$p" ] && cp -r "$repo/$p" "$dir/tree/"
    done
    printf '%q ' "$@" > "$dir/cmd"
    setsid bash -c "cd $(printf %q "$dir/tree") && $(cat "$dir/cmd") > $(printf %q "$dir/log") 2>&1; echo \$? > $(printf %q "$dir/rc")" \
      < /dev/null > /dev/null 2>&1 &
    echo "started in $dir/tree: $(cat "$dir/cmd")";;
  wait)
    deadline=$(( $(date +%s) + $1 ))
    while [ ! -f "$dir/rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    tail -c 4000 "$dir/log"; echo; echo "rc: $(cat "$dir/rc" 2>/dev/null || echo running)";;
  *) echo "detached.sh: start or wait, got '$op'" >&2; exit 2;;
esac
