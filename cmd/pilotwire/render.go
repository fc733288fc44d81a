package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/nodeid"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// proxyFlags name a proxy and the mesh settings its config depends on.
type proxyFlags struct {
	// Proxy is the node id (--proxy).
	Proxy string
	// Metadata is node metadata, k=v (--metadata, repeatable): NAMESPACE,
	// CLUSTER_ID, GENERATOR=grpc as the proxy sends them.
	Metadata []string
	// MeshConfig is the frontends' --mesh-config file ("" for Istio's
	// defaults, as theirs).
	MeshConfig string
	// Names overrides what the proxy subscribes to, TYPE=a,b (--names,
	// repeatable). By default CDS and LDS are wildcards and EDS and RDS name
	// what the clusters and listeners point at, as Envoy subscribes.
	Names []string
}

func (f *proxyFlags) add(cmd *cobra.Command, proxyFlag bool) {
	fs := cmd.Flags()
	if proxyFlag {
		fs.StringVar(&f.Proxy, "proxy", "", "node id of the proxy, as it connects (sidecar~<ip>~<pod>.<ns>~<ns>.svc.cluster.local)")
	}
	fs.StringArrayVar(&f.Metadata, "metadata", nil, "node metadata k=v, as the proxy sends it (NAMESPACE, CLUSTER_ID, GENERATOR=grpc); repeatable")
	fs.StringVar(&f.MeshConfig, "mesh-config", "", "the frontends' --mesh-config file (default: Istio's defaults, as theirs)")
	fs.StringArrayVar(&f.Names, "names", nil, "what the proxy subscribes to, TYPE=name,name (default: CDS and LDS wildcard, EDS and RDS what clusters and listeners name); repeatable")
}

// resolved is a proxy ready to generate for.
type resolved struct {
	proxy *nodeid.Proxy
	mesh  *meshconfig.MeshConfig
	names map[string][]string // type URL -> names; absent: the default
}

func (f *proxyFlags) resolve() (*resolved, error) {
	if f.Proxy == "" {
		return nil, fmt.Errorf("--proxy is required")
	}
	md := map[string]any{}
	for _, kv := range f.Metadata {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata %q: want key=value", kv)
		}
		md[k] = v
	}
	node := &core.Node{Id: f.Proxy}
	if len(md) > 0 {
		st, err := structpb.NewStruct(md)
		if err != nil {
			return nil, err
		}
		node.Metadata = st
	}
	p, err := nodeid.Parse(node)
	if err != nil {
		return nil, err
	}
	mc, err := meshconfig.Load(f.MeshConfig)
	if err != nil {
		return nil, err
	}
	r := &resolved{proxy: p, mesh: mc, names: map[string][]string{}}
	for _, n := range f.Names {
		t, list, ok := strings.Cut(n, "=")
		url, err := typeURLOf(t)
		if !ok || err != nil {
			return nil, fmt.Errorf("--names %q: want TYPE=name,name with TYPE cds, eds, lds or rds", n)
		}
		r.names[url] = nil
		for _, x := range strings.Split(list, ",") {
			if x = strings.TrimSpace(x); x != "" {
				r.names[url] = append(r.names[url], x)
			}
		}
	}
	return r, nil
}

// xdsTypes are the types a frontend generates, in its push order.
var xdsTypes = []struct{ short, url string }{
	{"cds", resource.ClusterType}, {"eds", resource.EndpointType}, {"lds", resource.ListenerType}, {"rds", resource.RouteType},
}

func typeURLOf(short string) (string, error) {
	for _, t := range xdsTypes {
		if strings.EqualFold(t.short, short) || t.url == short {
			return t.url, nil
		}
	}
	return "", fmt.Errorf("unknown type %q (want cds, eds, lds or rds)", short)
}

func shortOf(url string) string {
	for _, t := range xdsTypes {
		if t.url == url {
			return t.short
		}
	}
	return url
}

// renderedResource is one resource as a frontend sends it.
type renderedResource struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Resource is the resource as JSON (json and yaml output only).
	Resource json.RawMessage `json:"resource,omitempty"`
	// any is the resource exactly as sent.
	any *anypb.Any
}

// renderedType is the response of one type a proxy is sent.
type renderedType struct {
	Type string `json:"type"`
	// Version is the response's version_info.
	Version string `json:"version"`
	// Names is the subscription the response answers; none is a wildcard.
	Names     []string           `json:"subscribed,omitempty"`
	Resources []renderedResource `json:"resources"`
}

// rendering is a proxy's whole config at one point of the history.
type rendering struct {
	Proxy  string         `json:"proxy"`
	Seq    uint64         `json:"seq"`
	Stored time.Time      `json:"stored"`
	Types  []renderedType `json:"types"`
}

// render generates what a frontend sends proxy r for the types wanted (all
// when none), with the same generator, the same selection and so the same
// versions: CDS and LDS answer their subscription (a wildcard unless
// named), EDS and RDS the names the clusters and listeners point at.
func render(m *model.Mesh, r *resolved, types []string) ([]renderedType, error) {
	xp := r.proxy.XDS(r.mesh)
	sets := map[string]*xdsgen.Set{}
	gen := func(url string) (*xdsgen.Set, error) {
		if s, ok := sets[url]; ok {
			return s, nil
		}
		s, err := xdsgen.GenerateFor(m, xp, url)
		if err != nil {
			return nil, err
		}
		sets[url] = s
		return s, nil
	}
	var out []renderedType
	for _, t := range xdsTypes {
		if len(types) > 0 && !slices.Contains(types, t.url) {
			continue
		}
		set, err := gen(t.url)
		if err != nil {
			return nil, err
		}
		names, named := r.names[t.url]
		if !named {
			switch t.url {
			case resource.EndpointType, resource.RouteType:
				from := resource.ClusterType
				if t.url == resource.RouteType {
					from = resource.ListenerType
				}
				parent, err := gen(from)
				if err != nil {
					return nil, err
				}
				if ps, ok := r.names[from]; ok {
					rs, _ := parent.Select(ps)
					names = referencedNames(t.url, rs)
				} else {
					names = referencedNames(t.url, parent.Resources)
				}
				named = true
			}
		}
		var rs []*xdsgen.Resource
		var version string
		switch {
		case named && len(names) == 0:
			version = xdsgen.VersionOf(nil)
		case named:
			rs, version = set.Select(names)
		default:
			rs, version = set.Resources, set.Version
		}
		rt := renderedType{Type: t.short, Version: version, Names: names, Resources: []renderedResource{}}
		for _, x := range rs {
			rt.Resources = append(rt.Resources, renderedResource{Name: x.Name, Version: x.Version, any: x.Any})
		}
		out = append(out, rt)
	}
	return out, nil
}

// referencedNames lists, sorted, what an Envoy subscribes to of typeURL
// after receiving parents: the load assignments of its EDS clusters, the
// route configurations its listeners' HTTP connection managers name.
func referencedNames(typeURL string, parents []*xdsgen.Resource) []string {
	var out []string
	for _, p := range parents {
		switch msg := p.Msg.(type) {
		case *clusterv3.Cluster:
			if typeURL == resource.EndpointType && msg.GetType() == clusterv3.Cluster_EDS {
				n := msg.GetEdsClusterConfig().GetServiceName()
				if n == "" {
					n = msg.GetName()
				}
				out = append(out, n)
			}
		case *listenerv3.Listener:
			if typeURL != resource.RouteType {
				continue
			}
			if api := msg.GetApiListener().GetApiListener(); api != nil {
				out = appendRDS(out, api)
			}
			chains := msg.GetFilterChains()
			if d := msg.GetDefaultFilterChain(); d != nil {
				chains = append(slices.Clip(chains), d)
			}
			for _, fc := range chains {
				for _, f := range fc.GetFilters() {
					if tc := f.GetTypedConfig(); tc != nil {
						out = appendRDS(out, tc)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func appendRDS(out []string, a *anypb.Any) []string {
	hcm := &hcmv3.HttpConnectionManager{}
	if !a.MessageIs(hcm) || a.UnmarshalTo(hcm) != nil {
		return out
	}
	if n := hcm.GetRds().GetRouteConfigName(); n != "" {
		out = append(out, n)
	}
	return out
}

// withJSON fills each resource's JSON (stable: protojson's output is
// re-indented by encoding/json).
func withJSON(types []renderedType) error {
	for i := range types {
		for j := range types[i].Resources {
			rr := &types[i].Resources[j]
			b, err := resourceJSON(rr.any)
			if err != nil {
				return fmt.Errorf("%s %s: %w", types[i].Type, rr.Name, err)
			}
			rr.Resource = b
		}
	}
	return nil
}

func resourceJSON(a *anypb.Any) (json.RawMessage, error) {
	msg, err := a.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	b, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.MarshalIndent(v, "", "  ")
}

type renderConfig struct {
	connConfig
	proxyFlags
	At    string
	Types []string
}

func newRenderCmd() *cobra.Command {
	var c renderConfig
	cmd := &cobra.Command{
		Use:   "render --proxy NODE_ID [--metadata k=v ...] [--at SEQ|TIME] [--type cds|eds|lds|rds]",
		Short: "Print the exact xDS a proxy with that node would have been sent at a point of the history",
		Long: `render replays the change stream into the model up to --at (a sequence; a
time, RFC 3339 or a duration ago, meaning the last record stored at or
before it; default: now) and generates the proxy's config with the
frontends' own code: the same resources, byte for byte, and the same
versions a frontend sends. The table lists each type's version and its
resources' versions; -o json or -o yaml prints the resources too.`,
		Example: `  pilotwire render --proxy sidecar~10.244.0.7~client-0.default~default.svc.cluster.local
  pilotwire render --proxy sidecar~10.244.0.7~client-0.default~default.svc.cluster.local --at 42 --type cds -o yaml
  pilotwire render --proxy grpc-client --metadata GENERATOR=grpc --metadata NAMESPACE=default --at 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRender(cmd.Context(), os.Stdout, c) },
	}
	addConnFlags(cmd, &c.connConfig)
	c.proxyFlags.add(cmd, true)
	cmd.Flags().StringVar(&c.At, "at", "", "point of the history: SEQ, an RFC 3339 time or a duration ago (default: now)")
	cmd.Flags().StringSliceVar(&c.Types, "type", nil, "types to print: cds, eds, lds, rds (default: all)")
	return cmd
}

// renderAt replays the model to at and renders the proxy.
func renderAt(ctx context.Context, s *session, r *resolved, at point, types []string) (*rendering, error) {
	rep, err := replayModel(ctx, s, at, r.mesh)
	if err != nil {
		return nil, err
	}
	ts, err := render(rep.Mesh, r, types)
	if err != nil {
		return nil, err
	}
	return &rendering{Proxy: r.proxy.ID, Seq: rep.Seq, Stored: rep.Time, Types: ts}, nil
}

func parseTypes(ts []string) ([]string, error) {
	var out []string
	for _, t := range ts {
		u, err := typeURLOf(t)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func runRender(ctx context.Context, w io.Writer, c renderConfig) error {
	r, err := c.resolve()
	if err != nil {
		return err
	}
	types, err := parseTypes(c.Types)
	if err != nil {
		return err
	}
	at, err := parsePoint(c.At, time.Now())
	if err != nil {
		return fmt.Errorf("--at: %w", err)
	}
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	out, err := renderAt(ctx, s, r, at, types)
	if err != nil {
		return err
	}
	if c.Output != "table" {
		if err := withJSON(out.Types); err != nil {
			return err
		}
	}
	return emit(w, c.Output, out, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "proxy %s at seq %d (stored %s)\n", out.Proxy, out.Seq, out.Stored.Format(time.RFC3339Nano))
		fmt.Fprintln(tw, "TYPE\tVERSION\tRESOURCE\tRESOURCE_VERSION")
		for _, t := range out.Types {
			fmt.Fprintf(tw, "%s\t%s\t%d resources\t\n", t.Type, t.Version, len(t.Resources))
			for _, x := range t.Resources {
				fmt.Fprintf(tw, "\t\t%s\t%s\n", x.Name, x.Version)
			}
		}
	})
}
