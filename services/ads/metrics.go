package ads

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// metrics of one frontend, named like Istio's where Istio has the same thing.
type metrics struct {
	connections          *prometheus.GaugeVec
	pushes               *prometheus.CounterVec
	rejects              *prometheus.CounterVec
	expiredNonce         *prometheus.CounterVec
	sendErrors           *prometheus.CounterVec
	badRequests          *prometheus.CounterVec
	shed                 *prometheus.CounterVec
	badRecords           prometheus.Counter
	appliedSeq           prometheus.Gauge
	snapshotSeq          prometheus.Gauge
	snapshotUnusable     prometheus.Counter
	compactRefused       prometheus.Counter
	snapshotViewUnusable prometheus.Counter
	bootstrapView        prometheus.Gauge
	bootstrapBallast     prometheus.Gauge
	orders               *prometheus.CounterVec
	orderSeqs            *prometheus.CounterVec
	ordersDropped        prometheus.Counter
	responseBytes        *prometheus.CounterVec
	registryErrors       prometheus.Counter
	registryWrites       prometheus.Counter
	deliveryDrops        prometheus.Counter
	admitRejects         prometheus.Counter
	admitWaiting         prometheus.Gauge
	admitWait            prometheus.Histogram
	convergence          prometheus.Histogram
	pushTime             *prometheus.HistogramVec
	sendTime             prometheus.Histogram
	configSize           *prometheus.HistogramVec
	deferred             *prometheus.CounterVec
	reregistrations      prometheus.Counter
	doneErrors           prometheus.Counter
	doneMessages         prometheus.Counter
	generateErrors       *prometheus.CounterVec
	routers              prometheus.Counter
	internalErrors       prometheus.Counter
	debugRequests        *prometheus.CounterVec
	debugTruncated       prometheus.Counter
	configIgnored        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilot_xds", Help: "Connected xDS clients on this frontend, by the proxy's ISTIO_VERSION metadata (\"unknown\" without).",
		}, []string{"version"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_pushes", Help: "xDS responses sent, by type (cds, eds, lds, rds).",
		}, []string{"type"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_total_xds_rejects", Help: "xDS responses rejected (NACKed) by proxies, by type.",
		}, []string{"type"}),
		expiredNonce: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_expired_nonce", Help: "Requests ignored because their nonce was not the last one sent, by type.",
		}, []string{"type"}),
		sendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_write_error", Help: "Errors sending xDS responses, by type.",
		}, []string{"type"}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_bad_requests_total", Help: "Malformed xDS requests, by reason.",
		}, []string{"reason"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_streams_shed_total", Help: "Streams this frontend closed because of what their client did, by reason (node, identity, type_url, too_many_names, forged_nonce, request_rate, send_timeout, debug_auth, debug_request).",
		}, []string{"reason"}),
		internalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_total_xds_internal_errors", Help: "Config objects (or parts of them) the model ignores as invalid, conflicting or not supported; /debug/configz lists them.",
		}),
		configIgnored: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ads_config_ignored",
			Help: "Config objects (or parts of them) the model ignores now, by kind and severity (error: leaving it out lets through traffic it would refuse, as a DENY AuthorizationPolicy); /debug/configz lists them.",
		}, []string{"kind", "severity"}),
		routers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_router_connections_total", Help: "Connections from routers (gateways).",
		}),
		badRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_bad_change_records_total", Help: "Change records the model could not decode or apply.",
		}),
		appliedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_applied_seq", Help: "Change-stream sequence the model has applied.",
		}),
		snapshotUnusable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_snapshot_unusable_total", Help: "Starts that found a snapshot they could not list or read, and read the change stream instead.",
		}),
		compactRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_snapshot_compact_forms_refused_total", Help: "Compact forms in a snapshot that did not decode; the record beside each was decoded instead.",
		}),
		snapshotViewUnusable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_snapshot_views_unusable_total", Help: "Starts that found a snapshot's view they could not read or decode, and read the snapshot itself instead.",
		}),
		bootstrapView: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_bootstrap_snapshot_view", Help: "1 when the model started from a snapshot's view (compact forms alone), 0 otherwise.",
		}),
		bootstrapBallast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_bootstrap_heap_ballast_bytes", Help: "Heap mapped in huge pages before the model was built from a snapshot (--bootstrap-heap; 0: none).",
		}),
		snapshotSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_bootstrap_snapshot_seq", Help: "Sequence of the snapshot the model started from (0: it read the stream).",
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_push_orders_total", Help: "Push orders handled, by result.",
		}, []string{"result"}),
		orderSeqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_push_orders_not_newer_total", Help: "Push orders whose through_seq was not above the last one the connection handled: older (a PushRequest reordered) or repeated (ordered again: a resync, catch-up or duplicate).",
		}, []string{"kind"}),
		ordersDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_order_batches_undecodable_total", Help: "Push order batches that could not be decoded.",
		}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_response_bytes_total", Help: "Bytes of resources sent, by type.",
		}, []string{"type"}),
		registryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_registry_errors_total", Help: "Failed writes to the connection registry.",
		}),
		registryWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_registry_writes_total", Help: "Connection entries written to (or removed from) the connection registry.",
		}),
		deliveryDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_delivery_records_dropped_total", Help: "Delivery records not recorded: the publish queue was full, the publish failed, or the record could not be marshalled.",
		}),
		admitRejects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_streams_rejected_total", Help: "New streams refused by the admission rate limit.",
		}),
		admitWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_streams_waiting", Help: "New streams waiting for an admission slot.",
		}),
		admitWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilotwire_ads_admission_wait_seconds",
			Help:    "Time new streams that had to wait waited for an admission slot.",
			Buckets: []float64{.01, .05, .1, .5, 1, 2, 5, 10, 30},
		}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_proxy_convergence_time",
			Help:    "Delay in seconds between a config change being observed and a proxy receiving it.",
			Buckets: []float64{.01, .05, .1, .2, .5, 1, 3, 5, 10, 20, 30},
		}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pilot_xds_push_time",
			Help:    "Time in seconds to generate and send one pushed response, by type.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1},
		}, []string{"type"}),
		sendTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_xds_send_time",
			Help:    "Time in seconds a response took to be handed to the stream.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5},
		}),
		configSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pilot_xds_config_size_bytes",
			Help:    "Bytes of resources in one response, by type.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10),
		}, []string{"type"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_pushes_deferred_total", Help: "Pushes held back because the proxy had not answered the previous response of the type, or of a type it depends on (clusters before load assignments and listeners, listeners before routes), by type.",
		}, []string{"type"}),
		reregistrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_reregistrations_total", Help: "Times this frontend found its registry entry removed (timed out by a pusher) and registered its connections again.",
		}),
		doneErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_push_done_errors_total", Help: "PushDone reports that could not be published (the pusher's timeout re-queues the push).",
		}),
		doneMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_push_done_batches_total", Help: "PushDoneBatch messages published (each carries the completions gathered while the previous one was sent).",
		}),
		debugRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_debug_requests_total", Help: "Debug requests over xDS (istio.io/debug...), answered or not, by type (syncz, config_dump, debug, unknown).",
		}, []string{"type"}),
		debugTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_debug_responses_truncated_total", Help: "Debug answers over xDS cut at their bound (16 MiB of resources).",
		}),
		generateErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_generate_errors_total", Help: "Failed generations of a response, by type.",
		}, []string{"type"}),
	}
	marshals := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pilotwire_xds_marshals_total", Help: "xDS resources marshalled (once per resource version, shared by every proxy).",
	}, func() float64 { return float64(xdsgen.Marshals()) })
	reg.MustRegister(marshals, m.routers, m.connections, m.pushes, m.rejects, m.expiredNonce, m.sendErrors, m.badRequests, m.shed,
		m.badRecords, m.appliedSeq, m.snapshotSeq, m.snapshotUnusable, m.compactRefused, m.snapshotViewUnusable, m.bootstrapView, m.bootstrapBallast, m.orders, m.orderSeqs, m.ordersDropped, m.responseBytes, m.registryErrors, m.registryWrites,
		m.deliveryDrops, m.admitRejects, m.admitWaiting, m.admitWait, m.convergence, m.pushTime, m.sendTime, m.configSize, m.deferred, m.reregistrations, m.doneErrors, m.doneMessages, m.generateErrors, m.debugRequests, m.debugTruncated,
		m.internalErrors, m.configIgnored)
	return m
}
