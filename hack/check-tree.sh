#!/usr/bin/env bash
# Fails when the repository tracks build output: any file over 1 MiB, or
# any executable binary (ELF, or Mach-O in any of its byte orders and the
# universal form). Run by `make check-tree`, part of `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=$((1024 * 1024))
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted in the work tree, not yet committed
	size=$(stat -c %s -- "$f")
	if [ "$size" -gt "$limit" ]; then
		echo "tracked file over 1 MiB: $f ($size bytes)"
		bad=1
	fi
	magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) echo "tracked ELF binary: $f"; bad=1 ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe | bebafeca)
		echo "tracked Mach-O binary: $f"; bad=1 ;;
	esac
done < <(git ls-files -z)
if [ "$bad" != 0 ]; then
	echo "check-tree: remove build output from the index (git rm --cached) and ignore it"
	exit 1
fi
echo "tree: no tracked binaries, no file over 1 MiB"
