package ads

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// metrics of one frontend, named like Istio's where Istio has the same thing.
type metrics struct {
	connections    prometheus.Gauge
	pushes         *prometheus.CounterVec
	rejects        *prometheus.CounterVec
	expiredNonce   *prometheus.CounterVec
	sendErrors     *prometheus.CounterVec
	badRequests    *prometheus.CounterVec
	badRecords     prometheus.Counter
	appliedSeq     prometheus.Gauge
	orders         *prometheus.CounterVec
	ordersDropped  prometheus.Counter
	responseBytes  *prometheus.CounterVec
	registryErrors prometheus.Counter
	deliveryDrops  prometheus.Counter
	admitRejects   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilot_xds", Help: "Number of connected xDS streams on this frontend.",
		}),
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
		badRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_bad_change_records_total", Help: "Change records the model could not decode or apply.",
		}),
		appliedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ads_applied_seq", Help: "Change-stream sequence the model has applied.",
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_push_orders_total", Help: "Push orders handled, by result.",
		}, []string{"result"}),
		ordersDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_order_batches_undecodable_total", Help: "Push order batches that could not be decoded.",
		}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_response_bytes_total", Help: "Bytes of resources sent, by type.",
		}, []string{"type"}),
		registryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_registry_errors_total", Help: "Failed writes to the connection registry.",
		}),
		deliveryDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_delivery_records_dropped_total", Help: "Delivery records not recorded because the publish queue was full or failed.",
		}),
		admitRejects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_streams_rejected_total", Help: "New streams refused by the admission rate limit.",
		}),
	}
	marshals := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pilotwire_xds_marshals_total", Help: "xDS resources marshalled (once per resource version, shared by every proxy).",
	}, func() float64 { return float64(xdsgen.Marshals()) })
	reg.MustRegister(marshals, m.connections, m.pushes, m.rejects, m.expiredNonce, m.sendErrors, m.badRequests,
		m.badRecords, m.appliedSeq, m.orders, m.ordersDropped, m.responseBytes, m.registryErrors,
		m.deliveryDrops, m.admitRejects)
	return m
}
