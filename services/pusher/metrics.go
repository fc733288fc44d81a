package pusher

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	queueTime       prometheus.Histogram
	orders          *prometheus.CounterVec
	queueLen        prometheus.Gauge
	inFlight        prometheus.Gauge
	doneTimeouts    prometheus.Counter
	skipped         *prometheus.CounterVec
	dones           *prometheus.CounterVec
	connections     prometheus.Gauge
	frontends       prometheus.Gauge
	badMessages     *prometheus.CounterVec
	pushRequests    prometheus.Counter
	latestSeq       prometheus.Gauge
	leader          prometheus.Gauge
	batchSize       prometheus.Histogram
	registryErrors  prometheus.Counter
	consumeErrors   prometheus.Counter
	requestsLost    prometheus.Counter
	sendErrors      prometheus.Counter
	oversized       prometheus.Counter
	lost            *prometheus.CounterVec
	resyncs         prometheus.Counter
	behind          prometheus.Gauge
	registryDones   prometheus.Counter
	stalls          prometheus.Counter
	restarts        prometheus.Counter
	lateSweeps      prometheus.Counter
	expirySuspended prometheus.Gauge
	consumerRetries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_proxy_queue_time",
			Help:    "Time in seconds a connection waits in the push queue before its push is dispatched.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 3, 5, 10, 20, 30},
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_pusher_orders_total", Help: "Push orders dispatched to frontends, by type (full, eds).",
		}, []string{"type"}),
		queueLen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_queue_length", Help: "Connections waiting in the push queue.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_in_flight", Help: "Connections with a push order dispatched and not yet done.",
		}),
		doneTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_done_timeouts_total", Help: "Push orders whose completion never came in time.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_pusher_skipped_total", Help: "Connections not pushed for a PushRequest, by reason (scope, synced, ordered: covered by an order already sent).",
		}, []string{"reason"}),
		dones: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_pusher_done_total", Help: "Push completions reported by frontends, by result.",
		}, []string{"result"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_connections", Help: "Connections known from the registry.",
		}),
		frontends: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_frontends", Help: "Live frontends known from the registry.",
		}),
		badMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_pusher_bad_messages_total", Help: "Undecodable messages, by source.",
		}, []string{"source"}),
		pushRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_push_requests_total", Help: "PushRequests consumed.",
		}),
		latestSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_latest_through_seq", Help: "through_seq of the latest PushRequest.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_leader", Help: "1 while this pusher holds its shard's lease and is active.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilotwire_pusher_batch_orders",
			Help:    "Push orders per message sent to a frontend.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		consumerRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_consumer_retries_total", Help: "Failed tries to create the PUSHES consumer at the start of a term, retried within it.",
		}),
		expirySuspended: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_frontend_expiry_suspended", Help: "1 while every frontend (two or more) is silent at once: the registry is not delivering heartbeats, and no frontend is expired until one is heard from.",
		}),
		lateSweeps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_late_sweeps_total", Help: "Sweeps that ran more than 2 s late (the process stopped or starved); the delay is not counted against heartbeats or push deadlines.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_restarts_total", Help: "Terms as the active pusher ended by an error (the lease is given up and the work starts again).",
		}),
		registryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_registry_errors_total", Help: "Failed writes to and watches of the registry bucket (watches are retried every second).",
		}),
		requestsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_push_requests_lost_total", Help: "PushRequest deliveries that never arrived (a gap in the consumer's delivery numbers: a connection died with them in flight); the requests are read from the stream at once instead of after the ack wait.",
		}),
		consumeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_consume_errors_total", Help: "Errors reading the next PushRequest from the consumer (the consumer carries on).",
		}),
		sendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_send_errors_total", Help: "Push order batches that could not be sent (their done timeout re-queues them).",
		}),
		oversized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_oversized_orders_total", Help: "Push orders past the max payload, sent as full pushes without their config keys.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_pusher_lost_pushes_total", Help: "Push orders lost, by reason (timeout, send, failed, frontend_reconnected, pusher_reconnected): the connection is resynced after a backoff.",
		}, []string{"reason"}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_resyncs_total", Help: "Catch-up pushes queued for connections behind the latest PushRequest.",
		}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_pusher_connections_behind", Help: "Connections behind the latest PushRequest, as of the last sweep.",
		}),
		registryDones: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_registry_dones_total", Help: "Push orders ended by the connection's registry entry (synced past the order) because their done did not come.",
		}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_pusher_consumer_stalls_total", Help: "Times the newest PushRequest was not delivered within the consumer's ack wait and every connection behind it was caught up.",
		}),
	}
	reg.MustRegister(m.stalls, m.restarts, m.lateSweeps, m.expirySuspended, m.consumerRetries, m.lost, m.resyncs, m.behind, m.registryDones, m.oversized, m.registryErrors, m.consumeErrors, m.requestsLost, m.sendErrors, m.leader, m.batchSize, m.queueTime, m.orders, m.queueLen, m.inFlight, m.doneTimeouts, m.skipped, m.dones,
		m.connections, m.frontends, m.badMessages, m.pushRequests, m.latestSeq)
	return m
}

// Reasons a push order is lost: the reason label of
// pilotwire_pusher_lost_pushes_total.
const (
	LostTimeout             = "timeout"              // no done within the push timeout
	LostSend                = "send"                 // the order batch could not be sent
	LostFailed              = "failed"               // the frontend reported the push failed
	LostFrontendReconnected = "frontend_reconnected" // the frontend's NATS connection came back
	LostPusherReconnected   = "pusher_reconnected"   // the pusher's own NATS connection came back
)

// LostReasons lists every reason, in the order reports show them.
var LostReasons = []string{LostTimeout, LostSend, LostFailed, LostFrontendReconnected, LostPusherReconnected}
