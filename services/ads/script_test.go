package ads

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestScript runs the connection protocol core, with no gRPC and no NATS,
// through the scripts in testdata/*.txt: each drives a frontend's model,
// its connections' requests and the pusher's orders, and records what the
// connections send. Rewrite the expected output with
//
//	go test ./services/ads -run TestScript -update
//
// Commands (names: comma-separated; @svc:port stands for the cluster
// outbound|port||svc.default.svc.cluster.local and @svc.ns:port for another
// namespace; versions print as v1, v2, ... in order of first appearance and
// may be written so):
//
//	model service NS/NAME ports=NAME:PORT,... [ip=IP]
//	model slice NS/SVC ports=NAME:PORT,... addrs=IP,... [name=SLICE]
//	model delete service|slice NS/NAME
//	connect CONN [delta] [grpc] [type=T]     T: cds eds lds rds (a per-type stream)
//	request CONN type=T [names=..] [version=V|last|acked] [nonce=N|last] [error=MSG] [nonode]
//	ack CONN type=T [names=..]               version and nonce of the last response of T
//	nack CONN type=T [names=..] [msg=MSG]    the version last acked, the last nonce
//	delta-request CONN type=T [sub=..] [unsub=..] [nonce=N|last] [error=MSG] [initial=NAME=V,...]
//	delta-ack CONN type=T / delta-nack CONN type=T [msg=MSG]
//	push [CONN...] [through=SEQ]             a push order to each (default: every open one)
//	deliver CONN [through=SEQ]               an order queued and not yet handled
//	state CONN                               the connection's watches, as its loop holds them
//	registry                                 registry entries written since the last time
//	metrics                                  the protocol's counters that are not zero
//	disconnect CONN
//
// After every command the output lists what each connection sent
// ("CONN <- TYPE VERSION nonce=N [names]"; delta: "+[name=version]" sent and
// "-[name]" removed) and the error a connection ended with.
func TestScript(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			e := newScriptEnv(t)
			runScript(t, f, e.run)
			e.close()
		})
	}
}

type scriptEnv struct {
	t       *testing.T
	s       *Server
	store   *model.Store
	dones   *doneRecorder
	reg     *prometheus.Registry
	seq     uint64
	pushID  uint64
	conns   map[string]*scriptConn
	order   []string          // connection names, in order of connect
	alias   map[string]string // version -> v<n>
	unalias map[string]string
	pending []string // errors to print with the next flush
}

// scriptConn is one connection and what its client knows, as Envoy keeps
// it: the last response of each type, the version it accepted last, and the
// names it asked for last.
type scriptConn struct {
	name   string
	c      *conn
	sotw   *fakeSotW
	delta  *fakeDelta
	node   *core.Node
	closed bool
	last   map[string]lastResponse
	acked  map[string]string
	names  map[string][]string
}

type lastResponse struct{ version, nonce string }

func newScriptEnv(t *testing.T) *scriptEnv {
	s, store, dones, reg := offlineServer(t)
	return &scriptEnv{t: t, s: s, store: store, dones: dones, reg: reg,
		conns: map[string]*scriptConn{}, alias: map[string]string{}, unalias: map[string]string{}}
}

func (e *scriptEnv) close() {
	for _, n := range e.order {
		if sc := e.conns[n]; !sc.closed {
			sc.c.finish()
		}
	}
}

func (e *scriptEnv) run(c *scriptCase) (out []string) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(scriptError); ok {
				out = append(out, "script error: "+string(err))
				return
			}
			panic(r)
		}
	}()
	var tail []string
	switch c.cmd {
	case "model":
		tail = e.model(c)
	case "connect":
		e.connect(c)
	case "request":
		e.request(c)
	case "ack", "nack":
		e.answer(c, c.cmd == "nack")
	case "delta-request":
		e.deltaRequest(c)
	case "delta-ack", "delta-nack":
		e.deltaAnswer(c, c.cmd == "delta-nack")
	case "push":
		return e.push(c)
	case "deliver":
		e.deliver(c)
	case "state":
		tail = e.state(e.conn(c))
	case "registry":
		tail = e.registry()
	case "metrics":
		tail = e.metrics()
	case "disconnect":
		sc := e.conn(c)
		sc.c.finish()
		sc.closed = true
		tail = e.takeDones()
	default:
		e.fail("unknown command %q", c.cmd)
	}
	return append(e.flush(), tail...)
}

// scriptError is a mistake in the script (not in the code under test).
type scriptError string

func (e *scriptEnv) fail(format string, args ...any) {
	panic(scriptError(fmt.Sprintf(format, args...)))
}

func arg(c *scriptCase, key string) (string, bool) {
	for _, a := range c.args {
		if a.key == key && !a.bare {
			return a.val, true
		}
	}
	return "", false
}

func hasWord(c *scriptCase, w string) bool {
	for _, a := range c.args {
		if a.bare && a.key == w {
			return true
		}
	}
	return false
}

// words are the bare arguments.
func words(c *scriptCase) []string {
	var out []string
	for _, a := range c.args {
		if a.bare {
			out = append(out, a.key)
		}
	}
	return out
}

func (e *scriptEnv) conn(c *scriptCase) *scriptConn {
	w := words(c)
	if len(w) == 0 {
		e.fail("%s needs a connection name", c.cmd)
	}
	sc, ok := e.conns[w[0]]
	if !ok {
		e.fail("no connection %q", w[0])
	}
	return sc
}

var shortTypes = map[string]string{
	"cds": resource.ClusterType, "eds": resource.EndpointType, "lds": resource.ListenerType, "rds": resource.RouteType,
	"secret": resource.SecretType,
}

func (e *scriptEnv) typeArg(c *scriptCase) string {
	v, ok := arg(c, "type")
	if !ok {
		e.fail("%s needs type=", c.cmd)
	}
	if u, ok := shortTypes[v]; ok {
		return u
	}
	return v
}

func shortOf(typeURL string) string {
	for k, v := range shortTypes {
		if v == typeURL {
			return k
		}
	}
	return typeURL
}

// expand reads a comma-separated name list, with @svc:port shorthands.
func expand(list string) []string {
	if list == "" {
		return nil
	}
	var out []string
	for n := range strings.SplitSeq(list, ",") {
		out = append(out, expandName(n))
	}
	return out
}

func expandName(n string) string {
	rest, ok := strings.CutPrefix(n, "@")
	if !ok {
		return n
	}
	host, port, ok := strings.Cut(rest, ":")
	if !ok {
		return n
	}
	if !strings.Contains(host, ".") {
		host += ".default"
	}
	return "outbound|" + port + "||" + host + ".svc.cluster.local"
}

func shortName(n string) string {
	port, subset, host, ok := model.ParseOutboundClusterName(n)
	if !ok || subset != "" {
		return n
	}
	h := strings.TrimSuffix(host, ".svc.cluster.local")
	h = strings.TrimSuffix(h, ".default")
	return "@" + h + ":" + strconv.Itoa(int(port))
}

func shortNames(ns []string) string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = shortName(n)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// v names a version by its alias.
func (e *scriptEnv) v(version string) string {
	if version == "" {
		return `""`
	}
	if a, ok := e.alias[version]; ok {
		return a
	}
	a := "v" + strconv.Itoa(len(e.alias)+1)
	e.alias[version], e.unalias[a] = a, version
	return a
}

// version reads a version argument: an alias, or a literal.
func (e *scriptEnv) version(a string) string {
	if v, ok := e.unalias[a]; ok {
		return v
	}
	return a
}

// model changes the frontend's model with one change record.
func (e *scriptEnv) model(c *scriptCase) []string {
	w := words(c)
	op := pb.Op_OP_UPDATE
	if len(w) > 0 && w[0] == "delete" {
		op, w = pb.Op_OP_DELETE, w[1:]
	}
	if len(w) != 2 {
		e.fail("model [delete] service|slice NS/NAME ...")
	}
	ns, name, ok := strings.Cut(w[1], "/")
	if !ok {
		e.fail("want NS/NAME, got %q", w[1])
	}
	ports, _ := arg(c, "ports")
	var obj map[string]any
	ref := &pb.ObjectRef{Namespace: ns, Name: name}
	switch w[0] {
	case "service":
		ref.Kind = "Service"
		var ps []any
		for p := range strings.SplitSeq(ports, ",") {
			if pn, num, ok := strings.Cut(p, ":"); ok {
				n, _ := strconv.Atoi(num)
				ps = append(ps, map[string]any{"name": pn, "port": n})
			}
		}
		ip, ok := arg(c, "ip")
		if !ok {
			ip = "10.96.0.9"
		}
		obj = map[string]any{"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"clusterIP": ip, "ports": ps}}
	case "slice":
		ref.Group, ref.Kind = "discovery.k8s.io", "EndpointSlice"
		slice, ok := arg(c, "name")
		if !ok {
			slice = name + "-1"
		}
		if op != pb.Op_OP_DELETE {
			ref.Name = slice
		}
		var ps, eps []any
		for p := range strings.SplitSeq(ports, ",") {
			if pn, num, ok := strings.Cut(p, ":"); ok {
				n, _ := strconv.Atoi(num)
				ps = append(ps, map[string]any{"name": pn, "port": n})
			}
		}
		addrs, _ := arg(c, "addrs")
		for a := range strings.SplitSeq(addrs, ",") {
			if a != "" {
				eps = append(eps, map[string]any{"addresses": []any{a}})
			}
		}
		obj = map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata":    map[string]any{"name": ref.Name, "namespace": ns, "labels": map[string]any{"kubernetes.io/service-name": name}},
			"addressType": "IPv4", "ports": ps, "endpoints": eps}
	default:
		e.fail("model of %q", w[0])
	}
	b, err := json.Marshal(obj)
	if err != nil {
		e.fail("%v", err)
	}
	e.seq++
	rec := &pb.ChangeRecord{Cluster: "c1", Op: op, Object: b, Uid: ref.Name, ResourceVersion: strconv.FormatUint(e.seq, 10), Ref: ref}
	if op == pb.Op_OP_DELETE {
		rec.Object = nil
	}
	if err := e.store.Apply(rec, e.seq); err != nil {
		return []string{"apply: " + err.Error()}
	}
	return []string{fmt.Sprintf("seq %d", e.seq)}
}

func (e *scriptEnv) connect(c *scriptCase) {
	w := words(c)
	if len(w) == 0 {
		e.fail("connect CONN")
	}
	if _, dup := e.conns[w[0]]; dup {
		e.fail("connection %q exists", w[0])
	}
	fixed := ""
	if _, ok := arg(c, "type"); ok {
		fixed = e.typeArg(c)
	}
	sc := &scriptConn{name: w[0], c: e.s.newConn(context.Background(), fixed),
		node: &core.Node{Id: "sidecar~10.0.0.1~" + w[0] + ".default~default.svc.cluster.local"},
		last: map[string]lastResponse{}, acked: map[string]string{}, names: map[string][]string{}}
	if hasWord(c, "grpc") {
		md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
		sc.node.Metadata = md
	}
	if hasWord(c, "delta") {
		sc.delta = &fakeDelta{}
		sc.c.delta = sc.delta
	} else {
		sc.sotw = &fakeSotW{}
		sc.c.sotw = sc.sotw
	}
	e.conns[sc.name] = sc
	e.order = append(e.order, sc.name)
}

// handled notes the error a request handler returned: the stream ends.
func (e *scriptEnv) handled(sc *scriptConn, err error) {
	if err == nil {
		return
	}
	sc.closed = true
	e.pending = append(e.pending, fmt.Sprintf("%s error: %v", sc.name, err))
	sc.c.finish()
}

func (e *scriptEnv) open(c *scriptCase) *scriptConn {
	sc := e.conn(c)
	if sc.closed {
		e.fail("connection %s is closed", sc.name)
	}
	return sc
}

func (e *scriptEnv) request(c *scriptCase) {
	sc := e.open(c)
	if sc.sotw == nil {
		e.fail("request on a delta connection")
	}
	t := e.typeArg(c)
	req := &discovery.DiscoveryRequest{TypeUrl: t, Node: sc.node}
	if hasWord(c, "nonode") {
		req.Node = nil
	}
	if t == "-" {
		req.TypeUrl = ""
	}
	if v, ok := arg(c, "names"); ok {
		req.ResourceNames = expand(v)
	}
	sc.names[t] = req.ResourceNames
	if v, ok := arg(c, "version"); ok {
		switch v {
		case "last":
			req.VersionInfo = sc.last[t].version
		case "acked":
			req.VersionInfo = sc.acked[t]
		default:
			req.VersionInfo = e.version(v)
		}
	}
	if v, ok := arg(c, "nonce"); ok {
		if v == "last" {
			v = sc.last[t].nonce
		}
		req.ResponseNonce = v
	}
	if v, ok := arg(c, "error"); ok {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: v}
	}
	e.handled(sc, sc.c.handleRequest(req))
}

// answer ACKs or NACKs the last response of a type, as Envoy does.
func (e *scriptEnv) answer(c *scriptCase, nack bool) {
	sc := e.open(c)
	t := e.typeArg(c)
	last, ok := sc.last[t]
	if !ok {
		e.fail("%s: no %s response to answer", sc.name, shortOf(t))
	}
	req := &discovery.DiscoveryRequest{TypeUrl: t, Node: sc.node, ResponseNonce: last.nonce, ResourceNames: sc.names[t]}
	if v, ok := arg(c, "names"); ok {
		req.ResourceNames = expand(v)
		sc.names[t] = req.ResourceNames
	}
	if nack {
		msg, ok := arg(c, "msg")
		if !ok {
			msg = "rejected"
		}
		req.VersionInfo = sc.acked[t]
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: msg}
	} else {
		req.VersionInfo = last.version
		sc.acked[t] = last.version
	}
	e.handled(sc, sc.c.handleRequest(req))
}

func (e *scriptEnv) deltaRequest(c *scriptCase) {
	sc := e.open(c)
	if sc.delta == nil {
		e.fail("delta-request on a state-of-the-world connection")
	}
	t := e.typeArg(c)
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, Node: sc.node}
	if v, ok := arg(c, "sub"); ok {
		req.ResourceNamesSubscribe = expand(v)
	}
	if v, ok := arg(c, "unsub"); ok {
		req.ResourceNamesUnsubscribe = expand(v)
	}
	if v, ok := arg(c, "nonce"); ok {
		if v == "last" {
			v = sc.last[t].nonce
		}
		req.ResponseNonce = v
	}
	if v, ok := arg(c, "error"); ok {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: v}
	}
	if v, ok := arg(c, "initial"); ok {
		req.InitialResourceVersions = map[string]string{}
		for p := range strings.SplitSeq(v, ",") {
			i := strings.LastIndex(p, "=")
			if i < 0 {
				e.fail("initial wants NAME=VERSION, got %q", p)
			}
			req.InitialResourceVersions[expandName(p[:i])] = e.version(p[i+1:])
		}
	}
	e.handled(sc, sc.c.handleDelta(req))
}

func (e *scriptEnv) deltaAnswer(c *scriptCase, nack bool) {
	sc := e.open(c)
	t := e.typeArg(c)
	last, ok := sc.last[t]
	if !ok {
		e.fail("%s: no %s response to answer", sc.name, shortOf(t))
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, Node: sc.node, ResponseNonce: last.nonce}
	if nack {
		msg, ok := arg(c, "msg")
		if !ok {
			msg = "rejected"
		}
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: msg}
	}
	e.handled(sc, sc.c.handleDelta(req))
}

// targets are the connections a push or deliver names, or every open one.
func (e *scriptEnv) targets(c *scriptCase) []*scriptConn {
	var out []*scriptConn
	for _, n := range words(c) {
		sc, ok := e.conns[n]
		if !ok {
			e.fail("no connection %q", n)
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		for _, n := range e.order {
			if sc := e.conns[n]; !sc.closed {
				out = append(out, sc)
			}
		}
	}
	return out
}

func (e *scriptEnv) order1(c *scriptCase, sc *scriptConn) orderRef {
	through := e.store.AppliedSeq()
	if v, ok := arg(c, "through"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			e.fail("through=%q", v)
		}
		through = n
	}
	e.pushID++
	return orderRef{order: &pb.PushOrder{ConnId: sc.c.id, PushId: e.pushID, Full: true, ThroughSeq: through, Start: timestamppb.New(time.Unix(0, 0))}}
}

// deliver queues an order for a connection without its loop handling it.
func (e *scriptEnv) deliver(c *scriptCase) {
	for _, sc := range e.targets(c) {
		if !sc.c.deliver(e.order1(c, sc)) {
			e.pending = append(e.pending, sc.name+" closed: order not taken")
		}
	}
}

// push orders a push of each target and lets its loop handle every order it
// holds (as after the loop's notify).
func (e *scriptEnv) push(c *scriptCase) []string {
	var out []string
	for _, sc := range e.targets(c) {
		if !sc.c.deliver(e.order1(c, sc)) {
			e.pending = append(e.pending, sc.name+" closed: order not taken")
			continue
		}
		if err := sc.c.handleOrders(sc.c.takeOrders()); err != nil {
			e.pending = append(e.pending, fmt.Sprintf("%s error: %v", sc.name, err))
			sc.c.finish()
			sc.closed = true
		}
		out = append(out, e.flush()...)
		out = append(out, e.takeDones()...)
	}
	return append(out, e.flush()...)
}

func (e *scriptEnv) takeDones() []string {
	var out []string
	for _, d := range e.dones.take() {
		l := fmt.Sprintf("%s done push=%d %s synced=%d", e.connName(d.GetConnId()), d.GetPushId(), strings.ToLower(d.GetResult().String()), d.GetSyncedSeq())
		if d.GetError() != "" {
			l += " error=" + strconv.Quote(d.GetError())
		}
		out = append(out, l)
	}
	return out
}

func (e *scriptEnv) connName(id string) string {
	for n, sc := range e.conns {
		if sc.c.id == id {
			return n
		}
	}
	return id
}

// flush prints what every connection sent since the last flush, and the
// errors noted meanwhile.
func (e *scriptEnv) flush() []string {
	var out []string
	for _, n := range e.order {
		sc := e.conns[n]
		if sc.sotw != nil {
			for _, r := range sc.sotw.take() {
				out = append(out, e.sotwLine(sc, r))
			}
		} else {
			for _, r := range sc.delta.take() {
				out = append(out, e.deltaLine(sc, r))
			}
		}
	}
	out = append(out, e.pending...)
	e.pending = nil
	return out
}

func (e *scriptEnv) sotwLine(sc *scriptConn, r *discovery.DiscoveryResponse) string {
	sc.last[r.GetTypeUrl()] = lastResponse{version: r.GetVersionInfo(), nonce: r.GetNonce()}
	var names []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			e.t.Fatalf("%s: undecodable %s resource: %v", sc.name, shortOf(r.GetTypeUrl()), err)
		}
		names = append(names, shortName(cache.GetResourceName(m))+endpointsText(m))
	}
	return fmt.Sprintf("%s <- %s %s nonce=%s [%s]", sc.name, shortOf(r.GetTypeUrl()), e.v(r.GetVersionInfo()), r.GetNonce(), strings.Join(names, " "))
}

func (e *scriptEnv) deltaLine(sc *scriptConn, r *discovery.DeltaDiscoveryResponse) string {
	sc.last[r.GetTypeUrl()] = lastResponse{version: r.GetSystemVersionInfo(), nonce: r.GetNonce()}
	var sent []string
	for _, x := range r.GetResources() {
		ep := ""
		if m, err := x.GetResource().UnmarshalNew(); err == nil {
			ep = endpointsText(m)
		}
		sent = append(sent, shortName(x.GetName())+"="+e.v(x.GetVersion())+ep)
	}
	var removed []string
	for _, n := range r.GetRemovedResources() {
		removed = append(removed, shortName(n))
	}
	return fmt.Sprintf("%s <- %s %s nonce=%s +[%s] -[%s]", sc.name, shortOf(r.GetTypeUrl()), e.v(r.GetSystemVersionInfo()), r.GetNonce(),
		strings.Join(sent, " "), strings.Join(removed, " "))
}

// endpointsText is "{ip:port,...}" for a load assignment, "" for another
// resource.
func endpointsText(m proto.Message) string {
	cla, ok := m.(*endpoint.ClusterLoadAssignment)
	if !ok {
		return ""
	}
	var eps []string
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			eps = append(eps, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return "{" + strings.Join(eps, ",") + "}"
}

// state prints the connection's watches as its loop holds them.
func (e *scriptEnv) state(sc *scriptConn) []string {
	var out []string
	if sc.c.proxy == nil {
		return []string{sc.name + " not opened"}
	}
	for _, t := range pushOrder {
		w, ok := sc.c.watches[t]
		if !ok {
			continue
		}
		l := fmt.Sprintf("%s %s", sc.name, shortOf(t))
		if w.wildcard {
			l += " wildcard"
		}
		l += " names=" + shortNames(w.names)
		l += fmt.Sprintf(" nonce=%s sent=%s acked=%s seq=%d", w.nonce, e.v(w.sentVersion), e.v(w.ackedVersion), w.genSeq)
		if w.awaiting {
			l += " awaiting"
		}
		if w.deferred {
			l += " deferred"
		}
		if w.nackError != "" {
			l += " nack=" + strconv.Quote(w.nackError)
		}
		if w.known != nil {
			var known []string
			for _, n := range slices.Sorted(maps.Keys(w.known)) {
				v := w.known[n]
				if v == absent {
					known = append(known, shortName(n)+"=absent")
				} else {
					known = append(known, shortName(n)+"="+e.v(v))
				}
			}
			l += " known=[" + strings.Join(known, " ") + "]"
		}
		out = append(out, l)
	}
	out = append(out, fmt.Sprintf("%s synced=%d", sc.name, sc.c.syncedSeq()))
	return out
}

// registry prints the registry entries written since the last time.
func (e *scriptEnv) registry() []string {
	dirty := takeRegistry(e.s)
	var out []string
	for _, id := range slices.Sorted(maps.Keys(dirty)) {
		ci := dirty[id]
		if ci == nil {
			out = append(out, e.connName(id)+" deleted")
			continue
		}
		l := fmt.Sprintf("%s synced=%d", e.connName(id), ci.GetSyncedSeq())
		for _, w := range ci.GetWatches() {
			l += " " + shortOf(w.GetTypeUrl()) + "="
			if w.GetWildcard() {
				l += "*"
			}
			l += shortNames(w.GetNames())
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		out = []string{"no writes"}
	}
	return out
}

// scriptMetrics are the counters the scripts show.
var scriptMetrics = []string{
	"pilot_total_xds_rejects", "pilot_xds_expired_nonce", "pilotwire_ads_pushes_deferred_total",
	"pilot_xds_pushes", "pilotwire_ads_bad_requests_total", "pilotwire_ads_generate_errors_total",
	"pilotwire_ads_push_orders_not_newer_total",
}

func (e *scriptEnv) metrics() []string {
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !slices.Contains(scriptMetrics, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			if v == 0 {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		out = []string{"all zero"}
	}
	return out
}
