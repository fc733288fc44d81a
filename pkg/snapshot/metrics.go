package snapshot

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	writes       prometheus.Counter
	deleted      prometheus.Counter
	errors       *prometheus.CounterVec
	purged       *prometheus.CounterVec
	lastSeq      prometheus.Gauge
	appliedSeq   prometheus.Gauge
	horizon      prometheus.Gauge
	objects      prometheus.Gauge
	bytes        prometheus.Gauge
	viewBytes    prometheus.Gauge
	writeSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_snapshot_writes_total", Help: "Snapshots of the change stream written.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_snapshot_deletes_total", Help: "Snapshots removed by compaction.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_snapshot_errors_total", Help: "Snapshotter failures by step (write, view, delete, purge, gap, consumer); a failure ends the term, which starts again, except a view's (frontends then read the snapshot itself) and the catch-up consumer's (a lost pull or a missed heartbeat: nats.go starts it over).",
		}, []string{"op"}),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_snapshot_purged_subjects_total", Help: "Subjects compacted: deleted (every record of a deleted object) or superseded (a live object's records before its last).",
		}, []string{"what"}),
		lastSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_last_seq", Help: "Change-stream sequence of the newest snapshot written.",
		}),
		appliedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_applied_seq", Help: "Change-stream sequence the snapshotter has read.",
		}),
		horizon: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_horizon_seq", Help: "Oldest change-stream sequence the history can be rebuilt at exactly.",
		}),
		objects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_objects", Help: "Live objects in the newest snapshot.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_bytes", Help: "Size of the newest snapshot.",
		}),
		viewBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_snapshot_view_bytes", Help: "Size of the newest snapshot's view (what frontends read: compact forms instead of records).",
		}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilotwire_snapshot_write_seconds", Help: "Time to write one snapshot.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.deleted, m.errors, m.purged, m.lastSeq, m.appliedSeq, m.horizon, m.objects, m.bytes, m.viewBytes, m.writeSeconds)
	}
	return m
}
