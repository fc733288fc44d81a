package filesource

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/services/ingest/internal/promreg"
)

type metrics struct {
	invalid    *prometheus.CounterVec
	duplicates prometheus.Counter
	files      prometheus.Gauge
	pending    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		invalid: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_invalid_documents_total",
			Help: "Manifest documents (or files) skipped each time they were read, by reason.",
		}, []string{"reason"})),
		duplicates: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_duplicate_objects_total",
			Help: "Objects found defined more than once (in several files or twice in one), counted per read.",
		})),
		files: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_manifest_files",
			Help: "Manifest files the directory source holds objects from.",
		})),
		pending: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_pending_paths",
			Help: "Paths with file system events waiting for their coalescing timer.",
		})),
	}
}
