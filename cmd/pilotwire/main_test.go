package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }
