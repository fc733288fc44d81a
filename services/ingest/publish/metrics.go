package publish

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/services/ingest/internal/promreg"
)

// Rejection reasons (label values of pilotwire_ingest_rejected_records_total).
const (
	RejectTooLarge    = "too_large"
	RejectEmptyObject = "empty_object"
	// RejectSubjectTooLong: the object's subject is longer than
	// bus.MaxSubjectLen (a name no API server would accept).
	RejectSubjectTooLong = "subject_too_long"
	// RejectConflicts: the object's subject moved on under every one of
	// MaxReplans re-plans; the change is given up (the source's next event
	// on the object tries again).
	RejectConflicts = "conflicts"
	// RejectKindNotRecorded: the object's kind is off the allowlist
	// (Options.Records); it is never written to the history.
	RejectKindNotRecorded = "kind_not_recorded"
)

// Operations of pilotwire_ingest_publish_retries_total.
const (
	retryStart    = "start"     // Start: ensure the stream, read its current state
	retryPublish  = "publish"   // a round of publishes with failed records
	retryReadLast = "read_last" // reading a deleted object's last record
)

type metrics struct {
	published    *prometheus.CounterVec
	deduplicated prometheus.Counter
	errors       prometheus.Counter
	retries      *prometheus.CounterVec
	conflicts    prometheus.Counter
	replans      prometheus.Counter
	massDeletes  prometheus.Counter
	unreadable   prometheus.Counter
	rejected     *prometheus.CounterVec
	purged       *prometheus.CounterVec
	objects      prometheus.Gauge
	lastSeq      prometheus.Gauge
	inflight     prometheus.Gauge
	// start from a snapshot
	snapshotSeq      prometheus.Gauge
	snapshotUnusable *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		published: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_records_published_total",
			Help: "Change records stored on the CHANGES stream, by kind and op.",
		}, []string{"kind", "op"})),
		deduplicated: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_records_deduplicated_total",
			Help: "Publishes JetStream recognised as already stored (retries, a second writer).",
		})),
		errors: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_publish_errors_total",
			Help: "Failed publish attempts; each is retried with backoff.",
		})),
		retries: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_publish_retries_total",
			Help: "Failed tries retried after a backoff, by operation (start, publish, read_last).",
		}, []string{"op"})),
		conflicts: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_publish_conflicts_total",
			Help: "Publishes refused because the object's subject moved on (another writer); the change is re-planned.",
		})),
		replans: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_publish_replans_total",
			Help: "Changes planned again after a conflict; after the first, each round waits a backoff, and after MaxReplans the change is given up (rejected, reason conflicts).",
		})),
		massDeletes: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_mass_deletes_withheld_total",
			Help: "Syncs whose deletes were withheld because they would have deleted more than the mass-delete threshold of the cluster's live objects.",
		})),
		unreadable: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_unreadable_records_total",
			Help: "Change records of this cluster the publisher could not decode (another writer version, garbage); their sequence is kept, the object treated as unknown.",
		})),
		rejected: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_rejected_records_total",
			Help: "Records not published because they can never be stored, by reason.",
		}, []string{"reason"})),
		purged: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_purged_subjects_total",
			Help: "Subjects of this cluster purged from the CHANGES stream at start because their kind is off the allowlist (stored by an older ingest), by kind.",
		}, []string{"kind"})),
		objects: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_objects",
			Help: "Objects of this cluster live on the CHANGES stream, as this ingest knows them.",
		})),
		lastSeq: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_last_published_seq",
			Help: "Highest CHANGES stream sequence this ingest has stored or read.",
		})),
		inflight: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_publish_inflight",
			Help: "Publishes awaiting their JetStream ack.",
		})),
		snapshotSeq: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_start_snapshot_seq",
			Help: "Sequence of the snapshot the last start read the cluster's objects from, before the records after it (0: the change stream alone).",
		})),
		snapshotUnusable: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_snapshot_unusable_total",
			Help: "Starts that found a snapshot they could not use and read the change stream instead, by reason (unreadable, ahead: past the stream's last seq, gap: the stream lost records after it).",
		}, []string{"reason"})),
	}
}
