package kubesource

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/pilotwire/pilotwire/services/ingest/internal/promreg"
)

// Event labels of pilotwire_ingest_kube_events_total.
const (
	eventAdd    = "add"
	eventUpdate = "update"
	eventDelete = "delete"
	// eventUnchanged is an update that changed nothing the record holds:
	// a resync or relist (same resourceVersion), or a write to fields the
	// transform drops. It is not queued.
	eventUnchanged = "unchanged"
)

// Error reasons of pilotwire_ingest_kube_errors_total.
const (
	errWatch      = "watch"      // a list or watch failed (retried by client-go)
	errEncode     = "encode"     // an object could not be turned into JSON
	errStore      = "store"      // the informer cache could not be read
	errKubeconfig = "kubeconfig" // a multicluster Secret holds an unusable kubeconfig
	errDuplicate  = "duplicate"  // a multicluster Secret names a cluster id already in use
	errClient     = "client"     // building a cluster's clients failed
)

type metrics struct {
	synced     *prometheus.GaugeVec
	timeouts   *prometheus.CounterVec
	events     *prometheus.CounterVec
	errors     *prometheus.CounterVec
	kinds      *prometheus.GaugeVec
	forbidden  *prometheus.GaugeVec
	depth      *prometheus.GaugeVec
	adds       *prometheus.CounterVec
	processed  *prometheus.CounterVec
	clusters   *prometheus.GaugeVec
	syncedSecs *prometheus.GaugeVec
	stale      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		stale: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_stale_clusters_total",
			Help: "Clusters from multicluster Secrets found on the stream at start with no Secret naming them any more; their objects are deleted (subject to the mass-delete guard).",
		})),
		synced: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_cluster_synced",
			Help: "1 once a cluster's informers have synced and its objects are on the stream, else 0.",
		}, []string{"cluster"})),
		timeouts: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_cluster_sync_timeouts_total",
			Help: "Clusters that did not sync within the sync timeout (Istio: remote_cluster_sync_timeouts_total).",
		}, []string{"cluster"})),
		events: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_events_total",
			Help: "Informer events by cluster, kind and event (add, update, delete, unchanged) (Istio: pilot_k8s_cfg_events, pilot_k8s_reg_events).",
		}, []string{"cluster", "kind", "event"})),
		errors: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_errors_total",
			Help: "Errors of the Kubernetes source by cluster and reason (watch, encode, kubeconfig, duplicate, client).",
		}, []string{"cluster", "reason"})),
		kinds: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_watched_kinds",
			Help: "Kinds watched per cluster (core kinds plus installed, enabled CRD kinds).",
		}, []string{"cluster"})),
		forbidden: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_forbidden_kinds",
			Help: "1 for each watched kind the API server forbids the source to list (RBAC), by cluster and kind; the cluster syncs without it.",
		}, []string{"cluster", "kind"})),
		depth: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_queue_depth",
			Help: "Keys waiting in a cluster's work queue.",
		}, []string{"cluster"})),
		adds: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_queue_adds_total",
			Help: "Keys added to a cluster's work queue.",
		}, []string{"cluster"})),
		processed: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ingest_kube_keys_processed_total",
			Help: "Queued keys the worker has handed to the publisher.",
		}, []string{"cluster"})),
		clusters: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_clusters",
			Help: "Clusters the source runs, by origin (flag, in-cluster, secret) (Istio: istiod_managed_clusters).",
		}, []string{"origin"})),
		syncedSecs: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_kube_cluster_sync_seconds",
			Help: "How long a cluster's initial sync took, once it synced.",
		}, []string{"cluster"})),
	}
}

// forget drops a removed cluster's series.
func (m *metrics) forget(cluster string) {
	m.synced.DeleteLabelValues(cluster)
	m.kinds.DeleteLabelValues(cluster)
	m.forbidden.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	m.depth.DeleteLabelValues(cluster)
	m.syncedSecs.DeleteLabelValues(cluster)
}

// queueMetrics is a workqueue.MetricsProvider that reports a cluster's
// queue depth and adds (the queue is named after its cluster) on the
// source's registry; client-go's other queue metrics are not kept.
type queueMetrics struct{ m *metrics }

var _ workqueue.MetricsProvider = queueMetrics{}

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.m.depth.WithLabelValues(name)
}

func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.m.adds.WithLabelValues(name)
}

func (queueMetrics) NewLatencyMetric(string) workqueue.HistogramMetric      { return noopMetric{} }
func (queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noopMetric{} }
func (queueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopMetric{}
}

func (queueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopMetric{}
}
func (queueMetrics) NewRetriesMetric(string) workqueue.CounterMetric { return noopMetric{} }

type noopMetric struct{}

func (noopMetric) Inc()            {}
func (noopMetric) Dec()            {}
func (noopMetric) Set(float64)     {}
func (noopMetric) Observe(float64) {}
