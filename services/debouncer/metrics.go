package debouncer

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	debounceTime   prometheus.Histogram
	inbound        *prometheus.CounterVec
	triggers       *prometheus.CounterVec
	merged         prometheus.Histogram
	pending        prometheus.Gauge
	skipped        prometheus.Counter
	badRecords     prometheus.Counter
	consumeErrors  prometheus.Counter
	deliveriesLost prometheus.Counter
	publishErrors  prometheus.Counter
	published      prometheus.Counter
	oversized      *prometheus.CounterVec
	restarts       prometheus.Counter
	resumeRetries  prometheus.Counter
	fenced         prometheus.Counter
	lastConsumed   atomic.Int64 // unix nanoseconds; 0 when not active
	lastThroughSeq prometheus.Gauge
	leader         prometheus.Gauge
	// The endpoint index rebuilt at the start of a term (podindex.go).
	indexSlices, indexPods, indexSeconds prometheus.Gauge
	indexTruncated                       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		debounceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_debounce_time",
			Help:    "Delay in seconds between the first merged change and the PushRequest being emitted.",
			Buckets: []float64{.01, .05, .1, .2, .5, 1, 3, 5, 10, 20},
		}),
		inbound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_inbound_updates", Help: "Change records received by the debouncer, by type.",
		}, []string{"type"}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_push_triggers", Help: "Merged changes per push reason, counted when a PushRequest is emitted.",
		}, []string{"type"}),
		merged: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilotwire_debounce_merged_events",
			Help:    "Change records merged into one PushRequest.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debounce_pending", Help: "Change records received and not yet in an emitted PushRequest.",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_redeliveries_skipped_total", Help: "Redelivered change records already covered by a published PushRequest.",
		}),
		badRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_bad_records_total", Help: "Undecodable change records (merged as full pushes with reason unknown).",
		}),
		consumeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_consume_errors_total", Help: "Errors reading the next change record from the consumer (the consumer carries on).",
		}),
		deliveriesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_deliveries_lost_total", Help: "Change deliveries that never arrived (a gap in the consumer's delivery numbers, a connection dying with them in flight); each gap ends the term, which resumes from the floor.",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_publish_errors_total", Help: "Failed PushRequest publishes (retried).",
		}),
		oversized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_debounce_oversized_requests_total",
			Help: "PushRequests over the size bound, sent as full pushes without keys; how: keys (dropped), joined (also covered ranges joined), range (covered made one range).",
		}, []string{"how"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_restarts_total", Help: "Terms as the active instance ended by an error (the lease is given up and the work starts again).",
		}),
		resumeRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_resume_retries_total", Help: "Failed tries to resume (read the consumer's floor, recreate the consumer) at the start of a term, retried within it.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_fenced_total", Help: "PushRequest publishes rejected because another instance wrote to PUSHES (this one then stands by).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_push_requests_total", Help: "PushRequests published.",
		}),
		lastThroughSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debounce_through_seq", Help: "through_seq of the last published PushRequest.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debouncer_leader", Help: "1 while this debouncer holds the lease and is active.",
		}),
		indexSlices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debounce_index_rebuild_slices", Help: "EndpointSlices read into the endpoint index at the start of the last term.",
		}),
		indexPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debounce_index_rebuild_pods", Help: "Pods read into the endpoint index at the start of the last term.",
		}),
		indexSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_debounce_index_rebuild_seconds", Help: "Seconds the endpoint index rebuild took at the start of the last term.",
		}),
		indexTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_debounce_index_rebuild_truncated_total", Help: "Endpoint index rebuilds stopped at --index-rebuild-max records (some pods' first label change then reaches no proxy).",
		}),
	}
	lastConsumedAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pilotwire_debounce_last_consumed_age_seconds",
		Help: "While active: seconds since the last change record was consumed (or since the term began). A watchdog: it grows while the CHANGES stream grows only if consuming has stalled. 0 on a standby.",
	}, func() float64 {
		at := m.lastConsumed.Load()
		if at == 0 {
			return 0
		}
		return time.Since(time.Unix(0, at)).Seconds()
	})
	reg.MustRegister(lastConsumedAge, m.leader, m.debounceTime, m.inbound, m.triggers, m.merged, m.pending, m.skipped, m.badRecords,
		m.consumeErrors, m.deliveriesLost, m.publishErrors, m.published, m.oversized, m.restarts, m.resumeRetries, m.fenced, m.lastThroughSeq,
		m.indexSlices, m.indexPods, m.indexSeconds, m.indexTruncated)
	return m
}

// consumedAt records when a change record was last consumed; the zero time
// means not active.
func (m *metrics) consumedAt(t time.Time) {
	if t.IsZero() {
		m.lastConsumed.Store(0)
		return
	}
	m.lastConsumed.Store(t.UnixNano())
}
