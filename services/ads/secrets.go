package ads

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

// The gateway credentials a frontend serves over SDS (sds.go) come from
// Kubernetes Secrets that the frontend reads itself, with its own client:
// they never pass through ingest, the change stream or any other NATS
// subject, and they are held in memory only. Secrets are read as Istio
// reads them (pilot/pkg/credentials/kube): the certificate and key from
// cert/key, else tls.crt/tls.key; the CA bundle from cacert, else ca.crt.

// The data keys of a Secret that SDS reads; every other key is dropped as
// the Secret enters the informer's cache, and with it the annotations (a
// kubectl apply keeps the whole Secret, data included, in one) and the
// managed fields.
const (
	keyGenericCert   = "cert"
	keyGenericKey    = "key"
	keyGenericCA     = "cacert"
	keyGenericCRL    = "crl"
	keyTLSCert       = "tls.crt"
	keyTLSKey        = "tls.key"
	keyTLSCA         = "ca.crt"
	keyTLSCRL        = "ca.crl"
	keyTLSOCSPStaple = "tls.ocsp-staple"
)

var credentialKeys = []string{keyGenericCert, keyGenericKey, keyGenericCA, keyGenericCRL, keyTLSCert, keyTLSKey, keyTLSCA, keyTLSCRL, keyTLSOCSPStaple}

// secretsFieldSelector leaves out, at the API server, the two kinds of
// Secret that are large and common and never hold a credential: Helm
// releases and service-account tokens (Istio's selector).
var secretsFieldSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("type", "helm.sh/release.v1"),
	fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)),
).String()

// Authorization results are kept this long: a refusal one minute, a grant
// five (Istio's times).
const (
	authzDeniedTTL  = time.Minute
	authzAllowedTTL = 5 * time.Minute
	authzTimeout    = 5 * time.Second
	// maxAuthzEntries bounds the authorization cache; it is cleared whole
	// past it.
	maxAuthzEntries = 10000
)

// certInfo is what a Secret gives SDS: a certificate chain and its key,
// or a CA bundle (cert only).
type certInfo struct {
	cert, key, staple, crl []byte
	version                string // the Secret's resourceVersion
}

// secretWatcher keeps the credential keys of the Secrets of one cluster
// and tells onChange which Secret (namespace/name) changed. It also
// answers whether a service account may read the Secrets of its
// namespace (a SubjectAccessReview, cached).
type secretWatcher struct {
	// set at construction
	kube     kubernetes.Interface
	inf      cache.SharedIndexInformer
	log      *slog.Logger
	m        *sdsMetrics
	onChange func(key string, at time.Time)
	now      func() time.Time

	// guarded by mu
	mu    sync.Mutex
	authz map[string]authzResult // service-account user → result
}

type authzResult struct {
	err     error
	expires time.Time
}

// newSecretWatcher builds the watcher; Start runs it.
func newSecretWatcher(kube kubernetes.Interface, log *slog.Logger, m *sdsMetrics, onChange func(key string, at time.Time)) (*secretWatcher, error) {
	w := &secretWatcher{kube: kube, log: log, m: m, onChange: onChange, now: time.Now, authz: make(map[string]authzResult)}
	w.inf = coreinformers.NewFilteredSecretInformer(kube, metav1.NamespaceAll, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = secretsFieldSelector
	})
	if err := w.inf.SetTransform(credentialsOnly); err != nil {
		return nil, fmt.Errorf("secret informer transform: %w", err)
	}
	if err := w.inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		log.Warn("list/watch of Secrets failed; client-go retries", "err", err)
	}); err != nil {
		return nil, fmt.Errorf("secret informer error handler: %w", err)
	}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.changed(obj, "add") },
		UpdateFunc: func(oldObj, newObj any) {
			o, _ := oldObj.(*corev1.Secret)
			n, _ := newObj.(*corev1.Secret)
			if o != nil && n != nil && maps.EqualFunc(o.Data, n.Data, bytes.Equal) {
				return // metadata only: what SDS serves is the same
			}
			w.changed(newObj, "update")
		},
		DeleteFunc: func(obj any) { w.changed(obj, "delete") },
	}); err != nil {
		return nil, fmt.Errorf("secret informer handler: %w", err)
	}
	return w, nil
}

// credentialsOnly is the informer's transform: a Secret keeps its name,
// namespace, uid, resourceVersion and type, and of its data only the
// credential keys. The cache therefore holds no more than the TLS
// material of the cluster.
func credentialsOnly(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil // a tombstone: made from what the cache held
	}
	out := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion},
		Type:       s.Type,
	}
	for _, k := range credentialKeys {
		if v, ok := s.Data[k]; ok {
			if out.Data == nil {
				out.Data = make(map[string][]byte, 2)
			}
			out.Data[k] = v
		}
	}
	return out, nil
}

func (w *secretWatcher) changed(obj any, op string) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	w.m.secretEvents.WithLabelValues(op).Inc()
	w.log.Debug("secret changed", "secret", key, "op", op)
	w.onChange(key, w.now())
}

// run runs the informer until ctx ends, and returns once it has stopped.
func (w *secretWatcher) run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.inf.RunWithContext(ctx)
	}()
	if cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		w.log.Info("secrets listed for SDS", "secrets", len(w.inf.GetStore().ListKeys()))
	}
	<-ctx.Done()
	<-done
}

// cached counts the Secrets held.
func (w *secretWatcher) cached() int { return len(w.inf.GetStore().ListKeys()) }

func (w *secretWatcher) get(namespace, name string) *corev1.Secret {
	obj, ok, err := w.inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	s, _ := obj.(*corev1.Secret)
	return s
}

// errSecretNotFound: no such Secret (or not yet listed).
var errSecretNotFound = errors.New("secret not found")

// certificate reads a certificate chain and key: cert and key, else
// tls.crt and tls.key (with tls.ocsp-staple and ca.crl), as Istio.
func (w *secretWatcher) certificate(namespace, name string) (*certInfo, error) {
	s := w.get(namespace, name)
	if s == nil {
		return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, errSecretNotFound)
	}
	d := s.Data
	switch {
	case len(d[keyGenericCert]) > 0 && len(d[keyGenericKey]) > 0:
		return &certInfo{cert: d[keyGenericCert], key: d[keyGenericKey], crl: d[keyGenericCRL], version: s.ResourceVersion}, nil
	case len(d[keyTLSCert]) > 0 && len(d[keyTLSKey]) > 0:
		return &certInfo{cert: d[keyTLSCert], key: d[keyTLSKey], staple: d[keyTLSOCSPStaple], crl: d[keyTLSCRL], version: s.ResourceVersion}, nil
	}
	return nil, fmt.Errorf("secret %s/%s has neither %q and %q nor %q and %q (or they are empty)", namespace, name, keyGenericCert, keyGenericKey, keyTLSCert, keyTLSKey)
}

// caBundle reads a CA bundle, for name-cacert: the Secret of that name,
// else the one without the suffix; cacert, else ca.crt (with the CRL).
func (w *secretWatcher) caBundle(namespace, name string) (*certInfo, error) {
	s := w.get(namespace, name)
	if s == nil {
		name = strings.TrimSuffix(name, sdsCASuffix)
		if s = w.get(namespace, name); s == nil {
			return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, errSecretNotFound)
		}
	}
	d := s.Data
	switch {
	case len(d[keyGenericCA]) > 0:
		return &certInfo{cert: d[keyGenericCA], crl: d[keyGenericCRL], version: s.ResourceVersion}, nil
	case len(d[keyTLSCA]) > 0:
		return &certInfo{cert: d[keyTLSCA], crl: d[keyTLSCRL], version: s.ResourceVersion}, nil
	}
	return nil, fmt.Errorf("secret %s/%s has no CA certificate in %q or %q", namespace, name, keyGenericCA, keyTLSCA)
}

// authorize reports whether service account sa of namespace may read the
// Secrets of its namespace: a SubjectAccessReview of "list secrets" for
// system:serviceaccount:<ns>:<sa>, as Istio asks it, cached.
func (w *secretWatcher) authorize(ctx context.Context, namespace, sa string) error {
	user := "system:serviceaccount:" + namespace + ":" + sa
	now := w.now()
	w.mu.Lock()
	if r, ok := w.authz[user]; ok && now.Before(r.expires) {
		w.mu.Unlock()
		return r.err
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, authzTimeout)
	defer cancel()
	resp, err := w.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "list", Resource: "secrets"},
		},
	}, metav1.CreateOptions{})
	switch {
	case err != nil:
		// Not cached: the API server may answer the next time.
		w.m.authzErrors.Inc()
		return fmt.Errorf("review of %s: %w", user, err)
	case !resp.Status.Allowed:
		err = fmt.Errorf("%s may not list secrets in %s (%s)", user, namespace, resp.Status.Reason)
	}
	ttl := authzAllowedTTL
	if err != nil {
		ttl = authzDeniedTTL
	}
	w.mu.Lock()
	if len(w.authz) >= maxAuthzEntries {
		w.authz = make(map[string]authzResult)
	}
	w.authz[user] = authzResult{err: err, expires: now.Add(ttl)}
	w.mu.Unlock()
	return err
}

// kubeClientConfig is the client config of --kubeconfig or --in-cluster.
func kubeClientConfig(kubeconfig string, inCluster bool) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if inCluster {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	cfg.UserAgent = "pilotwire-ads"
	return cfg, nil
}

// startSDS builds the frontend's SDS when a cluster is named (nil
// otherwise); its watch is run by Run.
func startSDS(cfg Config, d svc.Deps, log *slog.Logger) (*sdsServer, error) {
	switch {
	case cfg.Kubeconfig != "" && cfg.InCluster:
		return nil, errors.New("--kubeconfig and --in-cluster are exclusive")
	case cfg.Kubeconfig == "" && !cfg.InCluster:
		return nil, nil
	}
	rc, err := kubeClientConfig(cfg.Kubeconfig, cfg.InCluster)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return newSDSServer(kube, d.Reg, log)
}
