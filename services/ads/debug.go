package ads

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/nodeid"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Debug endpoints in the shapes istioctl users know. They read the
// registry view each connection publishes of itself (never the loop's own
// state) and the current model.

// registerDebug adds the debug handlers to mux. The same handlers answer
// istio.io/debug requests over xDS (debugads.go).
func (s *Server) registerDebug(handle func(string, http.Handler)) {
	handle("/debug/syncz", http.HandlerFunc(s.syncz))
	handle("/debug/adsz", http.HandlerFunc(s.adsz))
	handle("/debug/configz", http.HandlerFunc(s.configz))
	handle("/debug/config_dump", http.HandlerFunc(s.configDump))
}

// connInfos returns the latest published info of every connection, sorted
// by node id.
func (s *Server) connInfos() []*pb.ConnectionInfo {
	vs := s.connViews()
	out := make([]*pb.ConnectionInfo, len(vs))
	for i, v := range vs {
		out[i] = v.info
	}
	return out
}

// connView is a connection's latest published info and its proxy's
// ISTIO_VERSION, which the info does not carry.
type connView struct {
	info    *pb.ConnectionInfo
	version string
}

// connViews returns every connection's view, sorted by node id and then
// connection id.
func (s *Server) connViews() []connView {
	s.mu.RLock()
	out := make([]connView, 0, len(s.conns))
	for _, c := range s.conns {
		// c.proxy is set before the connection is added and never changes.
		if ci := c.published.Load(); ci != nil {
			out = append(out, connView{info: ci, version: c.proxy.Version})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b connView) int {
		return cmp.Or(strings.Compare(a.info.GetNodeId(), b.info.GetNodeId()), strings.Compare(a.info.GetConnId(), b.info.GetConnId()))
	})
	return out
}

// matchesProxy reports whether name names the connection: its node id,
// its connection id, or <pod>.<namespace> from its node id (what istioctl
// sends).
func matchesProxy(ci *pb.ConnectionInfo, name string) bool {
	if name == "" {
		return false
	}
	if name == ci.GetNodeId() || name == ci.GetConnId() {
		return true
	}
	parts := strings.Split(ci.GetNodeId(), "~")
	return len(parts) == 4 && parts[2] == name
}

func matchesAny(ci *pb.ConnectionInfo, names []string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return matchesProxy(ci, n) })
}

// findConn is the info of the first connection (by node id) that name
// names, or nil.
func (s *Server) findConn(name string) *pb.ConnectionInfo {
	for _, v := range s.connViews() {
		if matchesProxy(v.info, name) {
			return v.info
		}
	}
	return nil
}

// syncStatus is one row of /debug/syncz, as Istio's SyncStatus.
type syncStatus struct {
	ClusterID     string            `json:"cluster_id"`
	ProxyID       string            `json:"proxy"`
	ConnectionID  string            `json:"connection_id"`
	ProxyType     string            `json:"proxy_type"`
	Frontend      string            `json:"frontend"`
	SyncedSeq     uint64            `json:"synced_seq"`
	ClusterSent   string            `json:"cluster_sent,omitempty"`
	ClusterAcked  string            `json:"cluster_acked,omitempty"`
	ListenerSent  string            `json:"listener_sent,omitempty"`
	ListenerAcked string            `json:"listener_acked,omitempty"`
	RouteSent     string            `json:"route_sent,omitempty"`
	RouteAcked    string            `json:"route_acked,omitempty"`
	EndpointSent  string            `json:"endpoint_sent,omitempty"`
	EndpointAcked string            `json:"endpoint_acked,omitempty"`
	Errors        map[string]string `json:"nacks,omitempty"`
	// Per type: nonce of the last response, when it was sent and when the
	// proxy last ACKed.
	Types map[string]typeStatus `json:"types,omitempty"`
}

type typeStatus struct {
	Nonce   string    `json:"nonce,omitempty"`
	SentAt  time.Time `json:"sent_at,omitzero"`
	AckedAt time.Time `json:"acked_at,omitzero"`
}

func (s *Server) syncz(w http.ResponseWriter, _ *http.Request) {
	rows := []syncStatus{}
	for _, ci := range s.connInfos() {
		r := syncStatus{ClusterID: ci.GetClusterId(), ProxyID: ci.GetNodeId(), ConnectionID: ci.GetConnId(),
			ProxyType: ci.GetProxyType(), Frontend: ci.GetFrontend(), SyncedSeq: ci.GetSyncedSeq()}
		for _, wt := range ci.GetWatches() {
			sent, acked := wt.GetSentVersion(), wt.GetAckedVersion()
			switch wt.GetTypeUrl() {
			case resource.ClusterType:
				r.ClusterSent, r.ClusterAcked = sent, acked
			case resource.ListenerType:
				r.ListenerSent, r.ListenerAcked = sent, acked
			case resource.RouteType:
				r.RouteSent, r.RouteAcked = sent, acked
			case resource.EndpointType:
				r.EndpointSent, r.EndpointAcked = sent, acked
			}
			if r.Types == nil {
				r.Types = map[string]typeStatus{}
			}
			ts := typeStatus{Nonce: wt.GetNonce()}
			if wt.GetSentAt() != nil {
				ts.SentAt = wt.GetSentAt().AsTime()
			}
			if wt.GetAckedAt() != nil {
				ts.AckedAt = wt.GetAckedAt().AsTime()
			}
			r.Types[shortType(wt.GetTypeUrl())] = ts
			if e := wt.GetNackError(); e != "" {
				if r.Errors == nil {
					r.Errors = map[string]string{}
				}
				r.Errors[shortType(wt.GetTypeUrl())] = e
			}
		}
		rows = append(rows, r)
	}
	writeJSON(w, rows)
}

func (s *Server) adsz(w http.ResponseWriter, _ *http.Request) {
	out := struct {
		Frontend    string            `json:"frontend"`
		AppliedSeq  uint64            `json:"applied_seq"`
		Connections []json.RawMessage `json:"connections"`
	}{Frontend: s.id, AppliedSeq: s.store.AppliedSeq(), Connections: []json.RawMessage{}}
	for _, ci := range s.connInfos() {
		b, err := protojson.Marshal(ci)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Connections = append(out.Connections, b)
	}
	writeJSON(w, out)
}

// configz lists the mesh services the frontend's model holds.
func (s *Server) configz(w http.ResponseWriter, _ *http.Request) {
	m := s.store.Snapshot()
	type port struct {
		Name      string   `json:"name"`
		Port      int32    `json:"port"`
		Endpoints []string `json:"endpoints"`
	}
	type svc struct {
		Hostname         string   `json:"hostname"`
		Registry         string   `json:"registry,omitempty"`
		Resolution       string   `json:"resolution"`
		ClusterIP        string   `json:"cluster_ip,omitempty"`
		Clusters         []string `json:"clusters"`
		ExportTo         []string `json:"export_to,omitempty"`
		DestinationRules []string `json:"destination_rules,omitempty"`
		Subsets          []string `json:"subsets,omitempty"`
		Ports            []port   `json:"ports"`
	}
	type problem struct {
		Object   string `json:"object"`
		Severity string `json:"severity"` // error: leaving it out fails open
		Reason   string `json:"reason"`
	}
	out := struct {
		Seq      uint64    `json:"seq"`
		Objects  int       `json:"objects"`
		Services []svc     `json:"services"`
		Ignored  []problem `json:"ignored"`
	}{Seq: m.Seq, Objects: s.store.Len(), Ignored: []problem{}}
	for _, p := range m.Problems() {
		out.Ignored = append(out.Ignored, problem{Object: p.Object, Severity: p.Severity.String(), Reason: p.Reason})
	}
	for _, sv := range m.Services {
		x := svc{Hostname: sv.Hostname, ClusterIP: sv.ClusterIP, Clusters: sv.Clusters, Resolution: sv.Resolution.String(), ExportTo: sv.ExportTo, Subsets: sv.Subsets()}
		if sv.Registry == model.ServiceEntryRegistry {
			x.Registry = "ServiceEntry"
		}
		for _, r := range sv.DestinationRules() {
			x.DestinationRules = append(x.DestinationRules, strings.Join(r.From, "+"))
		}
		for _, p := range sv.Ports {
			pp := port{Name: p.Name, Port: p.Port}
			for _, e := range p.Endpoints {
				pp.Endpoints = append(pp.Endpoints, net.JoinHostPort(e.Address, strconv.Itoa(int(e.Port)))+"@"+e.ClusterID)
			}
			x.Ports = append(x.Ports, pp)
		}
		out.Services = append(out.Services, x)
	}
	writeJSON(w, out)
}

// configDump shows what a connected proxy's watches would be sent now:
// /debug/config_dump?proxyID=<node id, <pod>.<namespace> or connection id>.
// Run for an xDS debug caller limited to a namespace, it finds only that
// namespace's proxies.
func (s *Server) configDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxyID")
	ci := s.findConn(id)
	if scope, _ := r.Context().Value(callerNamespaceKey{}).(string); ci != nil && scope != "" && ci.GetNamespace() != scope {
		ci = nil
	}
	if ci == nil {
		http.Error(w, "no connection for proxyID "+id+" on this frontend (see /debug/syncz)", http.StatusNotFound)
		return
	}
	seq, byType, err := s.proxyDump(ci)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := map[string]any{"seq": seq, "proxy": ci.GetNodeId()}
	for t, resp := range byType {
		var rs []json.RawMessage
		for _, a := range resp.resources {
			b, err := protojson.Marshal(a)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			rs = append(rs, b)
		}
		out[shortType(t)] = map[string]any{"version": resp.version, "resources": rs}
	}
	writeJSON(w, out)
}

// proxyDump generates, from the current model, what each of the
// connection's watches would be sent now; it returns the model's sequence.
func (s *Server) proxyDump(ci *pb.ConnectionInfo) (uint64, map[string]*response, error) {
	p := &proxy{ID: ci.GetNodeId(), Namespace: ci.GetNamespace(), ClusterID: ci.GetClusterId(), Type: ci.GetProxyType(), Generator: ci.GetGenerator()}
	if np, err := nodeid.Parse(&core.Node{Id: ci.GetNodeId()}); err == nil {
		p.IP = np.IP // the pod IP gives the inbound side; ConnectionInfo does not carry it
	}
	m := s.store.Snapshot()
	out := make(map[string]*response, len(ci.GetWatches()))
	for _, wt := range ci.GetWatches() {
		resp, err := s.build(m, p, &watch{typeURL: wt.GetTypeUrl(), wildcard: wt.GetWildcard(), names: wt.GetNames()})
		if err != nil {
			return 0, nil, fmt.Errorf("generate %s for %s: %w", shortType(wt.GetTypeUrl()), ci.GetNodeId(), err)
		}
		out[wt.GetTypeUrl()] = resp
	}
	return m.Seq, out, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
