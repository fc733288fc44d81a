package xdsgen

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (testService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// TestGRPCServerEnforcesAuthz runs grpc-go's xDS server (xds.NewGRPCServer,
// plaintext) behind the server listener pilotwire generates for its pod,
// with an AuthorizationPolicy denying one method's path and a
// RequestAuthentication: the denied method answers PERMISSION_DENIED,
// another OK, and a request bearing a token (which gRPC cannot validate)
// PERMISSION_DENIED. (ALLOW by principal needs mTLS identities, which
// the CA and xDS credentials of issue 38 bring: pending here, pinned on
// the Envoy goldens.)
func TestGRPCServerEnforcesAuthz(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	recs := []*pb.ChangeRecord{
		objRecord(t, "", model.KindService, "shop", "greeter", map[string]any{
			"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"name": "grpc", "port": 8080, "targetPort": port}}},
		}),
		objRecord(t, "discovery.k8s.io", model.KindEndpointSlice, "shop", "greeter-1", map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": "greeter"}},
			"addressType": "IPv4", "ports": []any{map[string]any{"name": "grpc", "port": port}},
			"endpoints": []any{map[string]any{"addresses": []any{"127.0.0.1"}}},
		}),
		objRecord(t, "security.istio.io", model.KindAuthorizationPolicy, "shop", "deny-unary", map[string]any{
			"spec": map[string]any{"action": "DENY", "rules": []any{map[string]any{
				"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/grpc.testing.TestService/UnaryCall"}}}}}}},
		}),
		objRecord(t, "security.istio.io", model.KindRequestAuthentication, "shop", "jwt", map[string]any{
			"spec": map[string]any{"jwtRules": []any{map[string]any{"issuer": "https://issuer.example", "jwksUri": "https://example.com/jwks"}}},
		}),
	}
	m := storeWith(t, recs).Snapshot()
	set, err := GenerateFor(m, Proxy{Generator: GRPC, IP: "127.0.0.1", Namespace: "shop"}, "type.googleapis.com/envoy.config.listener.v3.Listener")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range set.Resources {
		if err := validateDeep(r.Msg); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	}
	const node = "grpc-server-1"
	ads := startADS(t, node, set)
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"GENERATOR": "grpc", "NAMESPACE": "shop"}},
		"server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%%s"
	}`, ads, node)
	serving := make(chan error, 8)
	srv, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContentsForTesting([]byte(bootstrap)),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				serving <- nil
			} else if args.Err != nil {
				serving <- args.Err
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(srv, testService{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	for served := false; !served; {
		select {
		case err := <-serving:
			if err != nil {
				t.Fatalf("the xDS server refused its listener: %v", err)
			}
			served = true
		case <-ctx.Done():
			t.Fatal("the xDS server never became serving")
		}
	}

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Errorf("EmptyCall (not denied): %v", err)
	}
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("UnaryCall (denied by path): %v, want PERMISSION_DENIED", err)
	}
	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer forged.token.here")
	if _, err := client.EmptyCall(withToken, &testgrpc.Empty{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("EmptyCall bearing a token gRPC cannot validate: %v, want PERMISSION_DENIED", err)
	}
}

// TestAuthzChangeRegenerates: updating or deleting a policy gives the
// workload's listeners a new version (the memoised sets do not survive a
// policy change).
func TestAuthzChangeRegenerates(t *testing.T) {
	s := model.NewStore()
	recs := []*pb.ChangeRecord{
		objRecord(t, "", model.KindService, "shop", "web", map[string]any{
			"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"name": "http", "port": 80}}},
		}),
		objRecord(t, "discovery.k8s.io", model.KindEndpointSlice, "shop", "web-1", map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": "web"}},
			"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": 8080}},
			"endpoints": []any{map[string]any{"addresses": []any{"10.1.0.5"}}},
		}),
	}
	deny := func(path string) *pb.ChangeRecord {
		return objRecord(t, "security.istio.io", model.KindAuthorizationPolicy, "shop", "deny", map[string]any{
			"spec": map[string]any{"action": "DENY", "rules": []any{map[string]any{
				"to": []any{map[string]any{"operation": map[string]any{"paths": []any{path}}}}}}},
		})
	}
	seq := uint64(0)
	apply := func(r *pb.ChangeRecord) {
		seq++
		if err := s.Apply(r, seq); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range recs {
		apply(r)
	}
	versions := map[string]bool{}
	check := func(what string) {
		for _, g := range []Generator{Envoy, GRPC} {
			set, err := GenerateFor(s.Snapshot(), Proxy{Generator: g, IP: "10.1.0.5", Namespace: "shop"}, "type.googleapis.com/envoy.config.listener.v3.Listener")
			if err != nil {
				t.Fatal(err)
			}
			if versions[set.Version] {
				t.Errorf("%v after %s: version %s seen before", g, what, set.Version)
			}
			versions[set.Version] = true
		}
	}
	check("no policy")
	apply(deny("/a"))
	check("add")
	apply(deny("/b"))
	check("update")
	del := deny("/b")
	del.Op, del.Object = pb.Op_OP_DELETE, nil
	apply(del)
	// Back to no policy: the first versions again.
	for _, g := range []Generator{Envoy, GRPC} {
		set, err := GenerateFor(s.Snapshot(), Proxy{Generator: g, IP: "10.1.0.5", Namespace: "shop"}, "type.googleapis.com/envoy.config.listener.v3.Listener")
		if err != nil {
			t.Fatal(err)
		}
		if !versions[set.Version] {
			t.Errorf("%v after delete: version %s, want the one without policies", g, set.Version)
		}
	}
}
