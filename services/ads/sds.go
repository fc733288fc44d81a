package ads

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// SDS over ADS: gateway credentials, as Istio's SecretGen serves them to
// gateways (pilot/pkg/xds/sds.go). A router's listeners name their
// certificates kubernetes://<name> (an Istio Gateway's credentialName) or
// kubernetes-gateway://<namespace>/<name> (a Gateway API certificateRef),
// and <that>-cacert for the CA that MUTUAL servers check clients against;
// the proxy asks for those names on its ADS stream with the Secret type.
//
// The credentials come from the frontend's own Secret watch (secrets.go),
// never from the change stream: no private key is ever in a change
// record, a push order, a delivery record (those carry names and
// versions) or a log line. A Secret's change reaches the connections
// that asked for it through the frontend's own index (sdsServer.changed),
// not through the pusher: each is kicked once (a channel of one), and its
// loop sends what changed, or, while its last response is unanswered,
// once it is answered.
//
// Who may read what, as Istio:
//   - only a proxy with a verified identity (mutual TLS with --client-ca,
//     whose SPIFFE namespace the identity check ties to the node's): on a
//     plaintext port nothing is served;
//   - only Secrets of its own namespace;
//   - kubernetes://<name>: when its service account may list Secrets in
//     its namespace (a SubjectAccessReview, cached); a -cacert name (a CA
//     bundle, public) without that review;
//   - kubernetes-gateway://<ns>/<name>: only a name the proxy's own
//     listeners reference (Istio's verified certificate references: the
//     Gateway API conversion admits a certificateRef only in the Gateway's
//     namespace or under a ReferenceGrant).
//
// A name refused, malformed, or naming a missing or incomplete Secret is
// left out of the response (counted in pilot_sds_certificate_errors_total
// and logged once per connection, name and reason); the stream goes on,
// and a Secret created later is sent then.

const (
	sdsKubernetes = "kubernetes://"
	sdsGateway    = "kubernetes-gateway://"
	// sdsCASuffix names the CA bundle of a credential (Istio's SdsCaSuffix).
	sdsCASuffix = "-cacert"
	// maxSDSBuilt bounds the marshalled secrets kept; cleared whole past it.
	maxSDSBuilt = 4096
)

// sdsRef is a parsed SDS resource name.
type sdsRef struct {
	gateway   bool   // kubernetes-gateway://
	namespace string // where the Secret is
	secret    string // the Secret's name as asked, -cacert included
	caOnly    bool   // -cacert: the CA bundle only
}

// parseSDSName parses kubernetes://<name>, kubernetes://<ns>/<name> and
// kubernetes-gateway://<ns>/<name> (Istio's credentials.ParseResourceName;
// a name with more slashes is refused here, not cut).
func parseSDSName(rn, proxyNamespace string) (sdsRef, error) {
	var ref sdsRef
	switch {
	case strings.HasPrefix(rn, sdsGateway):
		ns, name, ok := strings.Cut(rn[len(sdsGateway):], "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return ref, fmt.Errorf("resource name %.256q: want %s<namespace>/<name>", rn, sdsGateway)
		}
		ref = sdsRef{gateway: true, namespace: ns, secret: name}
	case strings.HasPrefix(rn, sdsKubernetes):
		ns, name := proxyNamespace, rn[len(sdsKubernetes):]
		if a, b, ok := strings.Cut(name, "/"); ok {
			ns, name = a, b
		}
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return ref, fmt.Errorf("resource name %.256q: want %s<name> or %s<namespace>/<name>", rn, sdsKubernetes, sdsKubernetes)
		}
		ref = sdsRef{namespace: ns, secret: name}
	default:
		return ref, fmt.Errorf("resource name %.256q: only Kubernetes Secrets (%s, %s) are served", rn, sdsKubernetes, sdsGateway)
	}
	ref.caOnly = strings.HasSuffix(ref.secret, sdsCASuffix)
	return ref, nil
}

// deps are the Secrets (namespace/name) the resource is read from: a CA
// bundle falls back to the Secret without the suffix.
func (r sdsRef) deps() []string {
	k := r.namespace + "/" + r.secret
	if r.caOnly {
		return []string{k, r.namespace + "/" + strings.TrimSuffix(r.secret, sdsCASuffix)}
	}
	return []string{k}
}

// sdsResource is one marshalled Secret, shared by every connection sent
// it; read-only.
type sdsResource struct {
	name    string
	any     *anypb.Any
	version string
}

type sdsBuiltKey struct {
	name, namespace, secret, version string
}

// sdsServer is a frontend's SDS: the Secret watch, which connections
// asked for which Secret, and the marshalled secrets.
type sdsServer struct {
	// set at construction
	secrets *secretWatcher
	m       *sdsMetrics
	log     *slog.Logger

	// guarded by mu
	mu     sync.Mutex
	subs   map[string]map[*conn]struct{} // Secret (namespace/name) → connections
	byConn map[*conn][]string            // connection → its Secrets
	built  map[sdsBuiltKey]*sdsResource
}

// newSDSServer builds the frontend's SDS on a Kubernetes client; run
// starts its watch.
func newSDSServer(kube kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger) (*sdsServer, error) {
	x := &sdsServer{
		m:      newSDSMetrics(reg),
		log:    log.With("sds", true),
		subs:   make(map[string]map[*conn]struct{}),
		byConn: make(map[*conn][]string),
		built:  make(map[sdsBuiltKey]*sdsResource),
	}
	w, err := newSecretWatcher(kube, x.log, x.m, x.changed)
	if err != nil {
		return nil, err
	}
	x.secrets = w
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pilotwire_ads_sds_secrets_cached", Help: "Secrets held by the frontend's SDS watch (credential keys only)."}, func() float64 { return float64(w.cached()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pilotwire_ads_sds_subscribed_secrets", Help: "Distinct Secrets that connected proxies asked for over SDS."}, func() float64 {
			x.mu.Lock()
			defer x.mu.Unlock()
			return float64(len(x.subs))
		}),
	)
	return x, nil
}

func (x *sdsServer) run(ctx context.Context) { x.secrets.run(ctx) }

// changed is the watch's news of a Secret: every connection that asked
// for it is kicked (at most one kick waits per connection).
func (x *sdsServer) changed(key string, at time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for c := range x.subs[key] {
		c.kickSDS(at)
		x.m.notifications.Inc()
	}
}

// subscribe makes the connection's Secrets those of names.
func (x *sdsServer) subscribe(c *conn, names []string, proxyNamespace string) {
	var keys []string
	for _, n := range names {
		if ref, err := parseSDSName(n, proxyNamespace); err == nil {
			keys = append(keys, ref.deps()...)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unsubscribeLocked(c)
	if len(keys) == 0 {
		return
	}
	x.byConn[c] = keys
	for _, k := range keys {
		m := x.subs[k]
		if m == nil {
			m = make(map[*conn]struct{})
			x.subs[k] = m
		}
		m[c] = struct{}{}
	}
}

// forget drops a closed connection.
func (x *sdsServer) forget(c *conn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unsubscribeLocked(c)
}

func (x *sdsServer) unsubscribeLocked(c *conn) {
	for _, k := range x.byConn[c] {
		delete(x.subs[k], c)
		if len(x.subs[k]) == 0 {
			delete(x.subs, k)
		}
	}
	delete(x.byConn, c)
}

// build reads the Secret a name refers to and returns it as an Envoy
// Secret named name: a TlsCertificate with the chain and key inline, or
// for -cacert a ValidationContext with the CA inline (and the CRL), as
// Istio sends them. It is marshalled once per name and Secret version.
func (x *sdsServer) build(name string, ref sdsRef) (*sdsResource, error) {
	var info *certInfo
	var err error
	if ref.caOnly {
		info, err = x.secrets.caBundle(ref.namespace, ref.secret)
	} else {
		info, err = x.secrets.certificate(ref.namespace, ref.secret)
	}
	if err != nil {
		return nil, err
	}
	key := sdsBuiltKey{name: name, namespace: ref.namespace, secret: ref.secret, version: info.version}
	x.mu.Lock()
	r := x.built[key]
	x.mu.Unlock()
	if r != nil {
		return r, nil
	}
	s := &tlsv3.Secret{Name: name}
	if ref.caOnly {
		vc := &tlsv3.CertificateValidationContext{TrustedCa: inlineBytes(info.cert)}
		if len(info.crl) > 0 {
			vc.Crl = inlineBytes(info.crl)
		}
		s.Type = &tlsv3.Secret_ValidationContext{ValidationContext: vc}
	} else {
		tc := &tlsv3.TlsCertificate{CertificateChain: inlineBytes(info.cert), PrivateKey: inlineBytes(info.key)}
		if len(info.staple) > 0 {
			tc.OcspStaple = inlineBytes(info.staple)
		}
		s.Type = &tlsv3.Secret_TlsCertificate{TlsCertificate: tc}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal secret %s: %w", name, err)
	}
	sum := sha256.Sum256(b)
	r = &sdsResource{name: name, any: &anypb.Any{TypeUrl: resource.SecretType, Value: b}, version: hex.EncodeToString(sum[:16])}
	x.mu.Lock()
	if len(x.built) >= maxSDSBuilt {
		x.built = make(map[sdsBuiltKey]*sdsResource)
	}
	x.built[key] = r
	x.mu.Unlock()
	return r, nil
}

func inlineBytes(b []byte) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b}}
}

// sdsWatch is one connection's SDS subscription; owned by the loop.
type sdsWatch struct {
	delta      bool
	names      []string          // sorted: asked for (state of the world) or subscribed (delta)
	subscribed map[string]bool   // delta only
	sent       map[string]string // name → version the client has (delta: absent, told it does not exist)
	// last response
	nonce, sentVersion string
	awaiting, pending  bool // a response is unanswered; a Secret changed meanwhile
	// client's answers
	ackedVersion, nackError, nackedNonce string
	// refused: name → reason last logged, so a refusal is logged once
	refused map[string]string
	// the proxy's verified identity, read once
	identity     *sdsIdentity
	identityRead bool
	// the listeners last scanned for certificate references, and those
	lds     *xdsgen.Set
	ldsRefs map[string]bool
}

// sdsIdentity is a proxy's verified identity.
type sdsIdentity struct{ namespace, serviceAccount string }

// kickSDS tells the loop a Secret it asked for changed; at is when the
// watch saw it (the earliest unsent change is kept, for the latency).
func (c *conn) kickSDS(at time.Time) {
	c.sdsSince.CompareAndSwap(0, at.UnixNano())
	select {
	case c.sdsKick <- struct{}{}:
	default:
	}
}

// handleSDS applies one state-of-the-world request for secrets.
func (c *conn) handleSDS(req *discovery.DiscoveryRequest) error {
	if c.s.sds == nil {
		c.s.metrics.badRequests.WithLabelValues("unsupported_type").Inc()
		c.log.Debug("ignoring SDS request: no Kubernetes client (--kubeconfig or --in-cluster) to read Secrets with")
		return nil
	}
	if err := c.checkNames(resource.SecretType, len(req.GetResourceNames())); err != nil {
		return err
	}
	w, first := c.sds, c.sds == nil
	if first {
		w = &sdsWatch{sent: make(map[string]string), refused: make(map[string]string)}
		c.sds = w
	}
	nonce := req.GetResponseNonce()
	if first {
		nonce = "" // from another stream
	}
	if stale, err := c.checkSDSNonce(w, nonce); stale || err != nil {
		return err
	}
	names := slices.Sorted(slices.Values(req.GetResourceNames()))
	names = slices.Compact(names)
	changed := first || !slices.Equal(names, w.names)
	if nonce != "" {
		c.sdsAnswered(w, nonce, req.GetVersionInfo(), req.GetErrorDetail() != nil, req.GetErrorDetail().GetMessage())
	}
	if !changed {
		if w.pending && !w.awaiting {
			return c.respondSDS(false)
		}
		return nil
	}
	w.names = names
	for n := range w.sent {
		if _, ok := slices.BinarySearch(names, n); !ok {
			delete(w.sent, n) // the client forgets what it no longer asks for
		}
	}
	c.s.sds.subscribe(c, names, c.proxy.Namespace)
	return c.respondSDS(true)
}

// handleDeltaSDS applies one incremental request for secrets.
func (c *conn) handleDeltaSDS(req *discovery.DeltaDiscoveryRequest) error {
	if c.s.sds == nil {
		c.s.metrics.badRequests.WithLabelValues("unsupported_type").Inc()
		c.log.Debug("ignoring SDS request: no Kubernetes client (--kubeconfig or --in-cluster) to read Secrets with")
		return nil
	}
	if err := c.checkNames(resource.SecretType, max(len(req.GetResourceNamesSubscribe()), len(req.GetInitialResourceVersions()))); err != nil {
		return err
	}
	w, first := c.sds, c.sds == nil
	if first {
		w = &sdsWatch{delta: true, sent: make(map[string]string), subscribed: make(map[string]bool), refused: make(map[string]string)}
		for n, v := range req.GetInitialResourceVersions() {
			w.sent[n] = v
		}
		c.sds = w
	}
	if nonce := req.GetResponseNonce(); nonce != "" && !first {
		stale, err := c.checkSDSNonce(w, nonce)
		if err != nil {
			return err
		}
		if !stale {
			c.sdsAnswered(w, nonce, w.sentVersion, req.GetErrorDetail() != nil, req.GetErrorDetail().GetMessage())
		}
	}
	changed := first
	for _, n := range req.GetResourceNamesSubscribe() {
		if n == "*" {
			continue // no wildcard of secrets
		}
		if !w.subscribed[n] {
			w.subscribed[n], changed = true, true
		}
		if !first {
			delete(w.sent, n) // a subscribe asks for the resource again
			changed = true
		}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if w.subscribed[n] {
			delete(w.subscribed, n)
			changed = true
		}
		delete(w.sent, n)
	}
	if err := c.checkNames(resource.SecretType, len(w.subscribed)); err != nil {
		return err
	}
	if !changed {
		if w.pending && !w.awaiting {
			return c.respondSDS(false)
		}
		return nil
	}
	w.names = slices.Sorted(func(yield func(string) bool) {
		for n := range w.subscribed {
			if !yield(n) {
				return
			}
		}
	})
	c.s.sds.subscribe(c, w.names, c.proxy.Namespace)
	return c.respondSDS(true)
}

// checkSDSNonce is checkNonce for the secrets watch.
func (c *conn) checkSDSNonce(w *sdsWatch, nonce string) (stale bool, err error) {
	if nonce == "" || nonce == w.nonce {
		return false, nil
	}
	if !c.issued(nonce) {
		c.s.metrics.badRequests.WithLabelValues("forged_nonce").Inc()
		return false, shed(codes.InvalidArgument, "forged_nonce", "response_nonce %.64q was never sent on this stream", nonce)
	}
	c.s.metrics.expiredNonce.WithLabelValues("sds").Inc()
	return true, nil
}

// sdsAnswered records the client's answer (an ACK, or a NACK with its
// message) to the last response.
func (c *conn) sdsAnswered(w *sdsWatch, nonce, version string, nack bool, msg string) {
	c.releaseAdmission()
	w.awaiting = false
	if nack {
		if w.nackedNonce == nonce {
			c.s.metrics.badRequests.WithLabelValues("repeated_nack").Inc()
			return
		}
		w.nackedNonce, w.nackError = nonce, msg
		c.s.metrics.rejects.WithLabelValues("sds").Inc()
		c.log.Warn("secrets rejected", "type", "sds", "version", w.sentVersion, "nonce", nonce, "err", msg)
		c.s.record(c, pb.DeliveryRecord_NACK, resource.SecretType, w.sentVersion, nonce, nil, 0, msg)
		return
	}
	w.nackError = ""
	if w.ackedVersion != version {
		w.ackedVersion = version
		c.s.record(c, pb.DeliveryRecord_ACK, resource.SecretType, version, nonce, nil, 0, "")
	}
}

// pushSDS is the loop's answer to a kick: the secrets asked for are sent
// when they changed, or once the client answers its last response.
func (c *conn) pushSDS() error {
	w := c.sds
	if w == nil {
		c.sdsSince.Store(0)
		return nil
	}
	if w.awaiting {
		if !w.pending {
			c.s.metrics.deferred.WithLabelValues("sds").Inc()
		}
		w.pending = true
		return nil
	}
	return c.respondSDS(false)
}

// respondSDS sends the secrets the client asked for whose version differs
// from what it has (all of them when force: an answer to a request), and
// on a delta stream the removal of those it has that are gone. A forced
// state-of-the-world answer is sent even when empty.
func (c *conn) respondSDS(force bool) error {
	w := c.sds
	w.pending = false
	since := c.sdsSince.Swap(0)
	have := c.sdsGenerate(w)
	var send []*sdsResource
	var removed []string
	all := make([]*xdsgen.Resource, 0, len(have))
	for _, n := range w.names {
		r := have[n]
		if r == nil {
			if v, ok := w.sent[n]; w.delta && (!ok || v != absent) {
				removed = append(removed, n)
			}
			continue
		}
		all = append(all, &xdsgen.Resource{Name: n, Any: r.any, Version: r.version})
		if w.sent[n] == r.version && (!force || w.delta) {
			continue
		}
		send = append(send, r)
	}
	if w.delta {
		for n := range w.sent {
			if !w.subscribed[n] {
				removed = append(removed, n)
			}
		}
		slices.Sort(removed)
	}
	if len(send) == 0 && len(removed) == 0 && !force {
		return nil
	}
	version := xdsgen.VersionOf(all)
	c.nonceSeq++
	nonce := c.id + "-" + strconv.FormatUint(c.nonceSeq, 36)
	bytes := 0
	names := make([]string, 0, len(send))
	var err error
	sendStart := time.Now()
	if w.delta {
		resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: resource.SecretType, Nonce: nonce, RemovedResources: removed}
		for _, r := range send {
			resp.Resources = append(resp.Resources, &discovery.Resource{Name: r.name, Version: r.version, Resource: r.any})
		}
		err = c.sendTimed(func() error { return c.delta.Send(resp) })
	} else {
		resp := &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: resource.SecretType, Nonce: nonce}
		for _, r := range send {
			resp.Resources = append(resp.Resources, r.any)
		}
		err = c.sendTimed(func() error { return c.sotw.SendMsg(resp) })
	}
	c.s.metrics.sendTime.Observe(time.Since(sendStart).Seconds())
	if err != nil {
		c.s.metrics.sendErrors.WithLabelValues("sds").Inc()
		return fmt.Errorf("send sds to %s: %w", c.proxy.ID, err)
	}
	for _, r := range send {
		w.sent[r.name] = r.version
		names = append(names, r.name)
		bytes += len(r.any.GetValue())
	}
	for _, n := range removed {
		if w.subscribed[n] {
			w.sent[n] = absent
		} else {
			delete(w.sent, n)
		}
	}
	w.nonce, w.sentVersion, w.awaiting = nonce, version, true
	if since != 0 && len(send)+len(removed) > 0 {
		c.s.sds.m.pushLatency.Observe(time.Since(time.Unix(0, since)).Seconds())
	}
	c.s.metrics.pushes.WithLabelValues("sds").Inc()
	c.s.metrics.responseBytes.WithLabelValues("sds").Add(float64(bytes))
	c.s.metrics.configSize.WithLabelValues("sds").Observe(float64(bytes))
	// Names and versions only: never the secrets.
	c.s.record(c, pb.DeliveryRecord_RESPONSE, resource.SecretType, version, nonce, names, 0, "")
	c.log.Debug("sent", "type", "sds", "version", version, "resources", names, "removed", removed)
	return nil
}

// sdsGenerate returns the secrets of w's names that the proxy may read
// and that exist, by name. Every other name is logged once per reason.
func (c *conn) sdsGenerate(w *sdsWatch) map[string]*sdsResource {
	out := make(map[string]*sdsResource, len(w.names))
	var mesh *model.Mesh
	for _, n := range w.names {
		ref, err := parseSDSName(n, c.proxy.Namespace)
		if err == nil {
			if mesh == nil && ref.gateway {
				mesh = c.s.meshes.Snapshot()
			}
			err = c.sdsAuthorize(w, mesh, n, ref)
		}
		var r *sdsResource
		if err == nil {
			r, err = c.s.sds.build(n, ref)
		}
		if err != nil {
			if w.refused[n] != err.Error() {
				w.refused[n] = err.Error()
				c.s.sds.m.certErrors.Inc()
				c.log.Warn("secret not served", "type", "sds", "resource", n, "err", err)
			}
			continue
		}
		delete(w.refused, n)
		out[n] = r
	}
	return out
}

var errNoVerifiedIdentity = errors.New("the proxy has no verified identity: secrets are served only over mutual TLS (--client-ca)")

// sdsAuthorize decides whether the proxy may read the Secret name refers
// to (see the package comment above).
func (c *conn) sdsAuthorize(w *sdsWatch, mesh *model.Mesh, name string, ref sdsRef) error {
	id := c.sdsIdentity(w)
	if id == nil {
		return errNoVerifiedIdentity
	}
	if ref.namespace != id.namespace {
		return fmt.Errorf("secret %s/%s is not in the proxy's namespace %s", ref.namespace, ref.secret, id.namespace)
	}
	if ref.gateway {
		refs, err := c.gatewayRefs(w, mesh)
		if err != nil {
			return err
		}
		if !refs[name] {
			return fmt.Errorf("%s is not a certificate reference of a Gateway this proxy serves", name)
		}
		return nil
	}
	if ref.caOnly {
		return nil // a CA bundle is public
	}
	return c.s.sds.secrets.authorize(c.ctx, id.namespace, id.serviceAccount)
}

// sdsIdentity reads the verified identity of the stream once: the
// SPIFFE identity of the client certificate that the identity check
// matched to the node's namespace; nil without mutual TLS.
func (c *conn) sdsIdentity(w *sdsWatch) *sdsIdentity {
	if w.identityRead {
		return w.identity
	}
	w.identityRead = true
	if c.s.identity == nil {
		return nil
	}
	pr, ok := peer.FromContext(c.ctx)
	if !ok {
		return nil
	}
	ti, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	for _, u := range spiffeIDs(ti.State.PeerCertificates[0]) {
		td, ns, sa, err := parseSPIFFE(u)
		if err != nil || ns != c.proxy.Namespace || (c.s.identity.trustDomain != "" && td != c.s.identity.trustDomain) {
			continue
		}
		w.identity = &sdsIdentity{namespace: ns, serviceAccount: sa}
		break
	}
	return w.identity
}

// gatewayRefs are the SDS names the proxy's own listeners reference (a
// router's): the certificate references verified for it. Kept per
// listener set.
func (c *conn) gatewayRefs(w *sdsWatch, mesh *model.Mesh) (map[string]bool, error) {
	if c.proxy.Type != ProxyRouter || mesh == nil {
		return nil, nil
	}
	set, err := c.s.generate(mesh, c.proxy, resource.ListenerType)
	if err != nil {
		// Withheld as before, for the true reason (logged and counted with
		// the name by the caller), and counted as a failed generation.
		c.s.metrics.generateErrors.WithLabelValues(shortType(resource.ListenerType)).Inc()
		return nil, fmt.Errorf("the gateway's listeners to check the reference against: %w", err)
	}
	if set == w.lds {
		return w.ldsRefs, nil
	}
	refs := make(map[string]bool)
	for _, r := range set.Resources {
		l, ok := r.Msg.(*listenerv3.Listener)
		if !ok {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			var tc tlsv3.DownstreamTlsContext
			if fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tc) != nil {
				continue
			}
			ctx := tc.GetCommonTlsContext()
			for _, s := range ctx.GetTlsCertificateSdsSecretConfigs() {
				refs[s.GetName()] = true
			}
			if v := ctx.GetValidationContextSdsSecretConfig(); v != nil {
				refs[v.GetName()] = true
			}
			if v := ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); v != nil {
				refs[v.GetName()] = true
			}
		}
	}
	w.lds, w.ldsRefs = set, refs
	return refs, nil
}

// sdsMetrics are the SDS metrics of a frontend.
type sdsMetrics struct {
	certErrors    prometheus.Counter
	secretEvents  *prometheus.CounterVec
	notifications prometheus.Counter
	pushLatency   prometheus.Histogram
	authzErrors   prometheus.Counter
}

func newSDSMetrics(reg prometheus.Registerer) *sdsMetrics {
	m := &sdsMetrics{
		certErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_sds_certificate_errors_total", Help: "SDS resource names not served: malformed, refused to the proxy, or naming a missing or incomplete Secret (once per connection, name and reason).",
		}),
		secretEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilotwire_ads_sds_secret_events_total", Help: "Secret adds, updates (of their data) and deletes seen by the frontend's SDS watch, by op.",
		}, []string{"op"}),
		notifications: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_sds_notifications_total", Help: "Connections told that a Secret they asked for changed.",
		}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilotwire_ads_sds_push_latency_seconds",
			Help:    "Time from a Secret change seen by the watch to the response carrying it sent to a connection.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10},
		}),
		authzErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_ads_sds_authz_errors_total", Help: "SubjectAccessReviews that failed (not a refusal: the API server did not answer).",
		}),
	}
	reg.MustRegister(m.certErrors, m.secretEvents, m.notifications, m.pushLatency, m.authzErrors)
	return m
}
