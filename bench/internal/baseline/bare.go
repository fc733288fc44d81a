package baseline

import (
	"strconv"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// bare is an ADS server that answers each new subscription (a request
// without a nonce) with an empty response and otherwise only receives: the
// least any gRPC xDS server holds per stream.
type bare struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
}

var bareNonce atomic.Uint64

func (bare) StreamAggregatedResources(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if req.GetResponseNonce() != "" {
			continue
		}
		err = st.Send(&discovery.DiscoveryResponse{
			TypeUrl:     req.GetTypeUrl(),
			VersionInfo: "bare",
			Nonce:       strconv.FormatUint(bareNonce.Add(1), 36),
		})
		if err != nil {
			return nil
		}
	}
}

func (bare) DeltaAggregatedResources(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if req.GetResponseNonce() != "" {
			continue
		}
		err = st.Send(&discovery.DeltaDiscoveryResponse{
			TypeUrl:           req.GetTypeUrl(),
			SystemVersionInfo: "bare",
			Nonce:             strconv.FormatUint(bareNonce.Add(1), 36),
		})
		if err != nil {
			return nil
		}
	}
}
