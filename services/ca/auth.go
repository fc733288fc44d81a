package ca

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/pkg/spiffe"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// gRPC metadata istio-agent sends (Istio's pkg/security).
const (
	metaAuthorization = "authorization"
	metaClusterID     = "clusterid"
	// metaImpersonate asks a certificate for another identity, which
	// Istio grants only to trusted node agents (CA_TRUSTED_NODE_ACCOUNTS);
	// pilotwire grants it to no one.
	metaImpersonate = "ImpersonatedIdentity"
	bearerPrefix    = "Bearer "
)

// Caller is who asks for a certificate: the identities to certify (SPIFFE
// URIs) and how they were proven.
type Caller struct {
	Identities []string
	// Method is "client-certificate" or "kubernetes-token".
	Method string
}

// Authenticator proves a caller's identity from a request's context.
type Authenticator interface {
	// Name names the method in refusals ("client certificate").
	Name() string
	// Authenticate returns the caller, or why it could not: a refusal
	// (the caller's fault) or errNotPresented (this method was not
	// tried: no token, no certificate).
	Authenticate(ctx context.Context) (*Caller, error)
}

// errNotPresented: the request carries no credential of this kind.
var errNotPresented = errors.New("none presented")

// certAuthenticator accepts a client certificate this CA issued: the TLS
// handshake verified its chain to the CA's roots (tls.VerifyClientCertIfGiven
// with the roots as ClientCAs); the identities are its SPIFFE URI SANs.
type certAuthenticator struct {
	// onNoID counts verified certificates without a SPIFFE identity.
	onNoID func()
}

var _ Authenticator = certAuthenticator{}

func (certAuthenticator) Name() string { return "client certificate" }

func (a certAuthenticator) Authenticate(ctx context.Context) (*Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errNotPresented
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, errNotPresented
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, errors.New("not verified")
	}
	leaf := info.State.VerifiedChains[0][0]
	var ids []string
	for _, u := range leaf.URIs {
		if u.Scheme == "spiffe" {
			ids = append(ids, u.String())
		}
	}
	if len(ids) == 0 {
		if a.onNoID != nil {
			a.onNoID()
		}
		return nil, errors.New("it has no SPIFFE URI SAN")
	}
	return &Caller{Identities: ids, Method: "client-certificate"}, nil
}

// tokenAuthenticator accepts a Kubernetes service-account token (the
// "authorization: Bearer" metadata) that the API server's TokenReview
// finds valid for one of the audiences; the identity is the token's
// service account in the trust domain.
type tokenAuthenticator struct {
	// Set at construction.
	client      kubernetes.Interface
	audiences   []string
	trustDomain string
	clusterID   string
}

var _ Authenticator = (*tokenAuthenticator)(nil)

func (*tokenAuthenticator) Name() string { return "kubernetes token" }

func (a *tokenAuthenticator) Authenticate(ctx context.Context) (*Caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	token := ""
	for _, v := range md.Get(metaAuthorization) {
		if t, ok := strings.CutPrefix(v, bearerPrefix); ok {
			token = t
			break
		}
	}
	if token == "" {
		return nil, errNotPresented
	}
	// Only this cluster's API server can review a token; a caller from
	// another cluster (as istio-agent says with clusterid) would be
	// refused there anyway, so say why.
	if ids := md.Get(metaClusterID); len(ids) == 1 && ids[0] != "" && ids[0] != a.clusterID {
		return nil, fmt.Errorf("the caller is in cluster %q, this CA reviews tokens of cluster %q only", ids[0], a.clusterID)
	}
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		if st.Error != "" {
			return nil, fmt.Errorf("not authenticated for audiences %v: %s", a.audiences, st.Error)
		}
		return nil, fmt.Errorf("not authenticated for audiences %v", a.audiences)
	}
	if !slices.Contains(st.User.Groups, "system:serviceaccounts") {
		return nil, fmt.Errorf("%q is not a service account", st.User.Username)
	}
	// system:serviceaccount:<namespace>:<name>
	parts := strings.Split(st.User.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return nil, fmt.Errorf("user %q is not a service account name", st.User.Username)
	}
	return &Caller{Identities: []string{spiffe.ID(a.trustDomain, parts[2], parts[3])}, Method: "kubernetes-token"}, nil
}

// authenticate tries each authenticator in turn; the first that accepts
// wins. The error says what each found, for the caller's refusal: it never
// holds the token.
func authenticate(ctx context.Context, authenticators []Authenticator) (*Caller, error) {
	var reasons []string
	for _, a := range authenticators {
		c, err := a.Authenticate(ctx)
		if err == nil {
			return c, nil
		}
		reasons = append(reasons, a.Name()+": "+err.Error())
	}
	return nil, errors.New(strings.Join(reasons, "; "))
}
