#!/usr/bin/env bash
# Fails when a product binary links what only the benchmark harness or the
# tests should: go-control-plane's cache and server (the baseline), gonum
# (the charts), the test kits, pilotwire's bench module, or the deploy
# tests and build tools (deploy/, hack/). Run by
# `make check-deps`, part of `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deps=$(go list -deps ./cmd/... ./services/ingest/cmd/... ./services/debouncer/cmd/... ./services/pusher/cmd/... ./services/ads/cmd/... ./services/ca/cmd/...)
bad=$(grep -E '^(github\.com/envoyproxy/go-control-plane/pkg/(cache|server)|gonum\.org/|github\.com/pilotwire/pilotwire/(internal/testkit|bench|deploy|hack)(/|$))' <<<"$deps" || true)
if [ -n "$bad" ]; then
	echo "product binaries link benchmark or test packages:"
	echo "$bad"
	exit 1
fi
echo "deps: product binaries link no benchmark or test packages"
