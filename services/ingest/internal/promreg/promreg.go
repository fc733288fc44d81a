// Package promreg registers Prometheus collectors so that registering the
// same metric twice on one registry (a service restarted in-process by a
// test) reuses the first collector instead of panicking.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns the collector in use: c, or the
// equal collector registered before. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	// Only a programming error (two different metrics with one name) gets here.
	panic(fmt.Sprintf("register metric: %v", err))
}
