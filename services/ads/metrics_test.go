package ads

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestInternalErrorsExported: the count of config the model ignores is
// on the frontend's registry, where /metrics serves it.
func TestInternalErrorsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.internalErrors.Add(3)
	if got := testutil.Metric(reg, "pilot_total_xds_internal_errors"); got != 3 {
		t.Errorf("pilot_total_xds_internal_errors = %v on the registry, want 3", got)
	}
}
