package ca

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// metrics are the CA's, named as Istio's CA names them (citadel_server_*)
// where Istio has the same thing.
type metrics struct {
	csrs            prometheus.Counter
	authnFailures   prometheus.Counter
	csrParseErrors  prometheus.Counter
	idExtractErrors prometheus.Counter
	signErrors      *prometheus.CounterVec
	issued          prometheus.Counter

	rootCertWrites *prometheus.CounterVec
	rootCertErrors prometheus.Counter

	servingRenewErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		csrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_csr_count", Help: "CreateCertificate requests received.",
		}),
		authnFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_authentication_failure_count", Help: "CreateCertificate requests refused for want of a valid token or client certificate.",
		}),
		csrParseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_csr_parsing_err_count", Help: "CSRs that could not be parsed or whose signature is wrong.",
		}),
		idExtractErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_id_extraction_err_count", Help: "Verified client certificates without a SPIFFE identity.",
		}),
		signErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citadel_server_csr_sign_err_count", Help: "CSRs not signed, by error (CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR).",
		}, []string{"error"}),
		issued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_success_cert_issuance_count", Help: "Certificates issued.",
		}),
		rootCertWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ca_root_cert_configmap_writes", Help: "istio-ca-root-cert ConfigMaps written, by op (create, update).",
		}, []string{"op"}),
		rootCertErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ca_root_cert_configmap_errors", Help: "Failed writes of an istio-ca-root-cert ConfigMap (retried).",
		}),
		servingRenewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ca_serving_cert_renew_errors", Help: "Failed renewals of the CA's own serving certificate (the old one is served while valid; retried at the next handshake).",
		}),
	}
	reg.MustRegister(m.csrs, m.authnFailures, m.csrParseErrors, m.idExtractErrors, m.signErrors, m.issued, m.rootCertWrites, m.rootCertErrors, m.servingRenewErrors)
	for _, kind := range []string{pki.KindCSR, pki.KindTTL, pki.KindCertGen} {
		m.signErrors.WithLabelValues(kind)
	}
	for _, op := range []string{"create", "update"} {
		m.rootCertWrites.WithLabelValues(op)
	}
	return m
}

// registerExpiry exports when the CA's certificates expire, as Istio's
// citadel_server_root_cert_expiry_* (the first root) and, for a plug-in
// CA, citadel_server_cert_chain_expiry_* (the signing certificate).
func registerExpiry(reg prometheus.Registerer, a *pki.Authority, plugin bool) {
	expiry := func(name, what string, at time.Time) {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name + "_timestamp", Help: "Unix time, in seconds, when the " + what + " expires.",
			}, func() float64 { return float64(at.Unix()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name + "_seconds", Help: "Seconds until the " + what + " expires (negative: expired).",
			}, func() float64 { return time.Until(at).Seconds() }),
		)
	}
	expiry("citadel_server_root_cert_expiry", "root certificate", a.RootExpiry())
	if plugin {
		expiry("citadel_server_cert_chain_expiry", "plug-in CA certificate", a.Certificate().NotAfter)
	}
}
