package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/model"
)

type proxyConfigConfig struct {
	connConfig
	proxyFlags
	At string
}

func newProxyConfigCmd() *cobra.Command {
	var c proxyConfigConfig
	cmd := &cobra.Command{
		Use:   "proxy-config cluster|listener|route|endpoint PROXY",
		Short: "A proxy's clusters, listeners, routes or endpoints as tables, now or at a point of the history",
		Long: `proxy-config renders the proxy's config (as render does, for the node id
PROXY) and prints one type as a table, as istioctl proxy-config does;
-o json or -o yaml prints the resources.`,
		Example: `  pilotwire proxy-config cluster sidecar~10.244.0.7~client-0.default~default.svc.cluster.local
  pilotwire proxy-config endpoint sidecar~10.244.0.7~client-0.default~default.svc.cluster.local --at 42`,
		Aliases: []string{"pc"},
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProxyConfig(cmd.Context(), os.Stdout, c, args[0], args[1])
		},
	}
	addConnFlags(cmd, &c.connConfig)
	c.proxyFlags.add(cmd, false)
	cmd.Flags().StringVar(&c.At, "at", "", "point of the history: SEQ, an RFC 3339 time or a duration ago (default: now)")
	return cmd
}

var proxyConfigTypes = map[string]string{
	"cluster": resource.ClusterType, "clusters": resource.ClusterType,
	"listener": resource.ListenerType, "listeners": resource.ListenerType,
	"route": resource.RouteType, "routes": resource.RouteType,
	"endpoint": resource.EndpointType, "endpoints": resource.EndpointType,
}

func runProxyConfig(ctx context.Context, w io.Writer, c proxyConfigConfig, what, proxy string) error {
	url, ok := proxyConfigTypes[what]
	if !ok {
		return fmt.Errorf("unknown config %q (want cluster, listener, route or endpoint)", what)
	}
	c.Proxy = proxy
	r, err := c.resolve()
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
	out, err := renderAt(ctx, s, r, at, []string{url})
	if err != nil {
		return err
	}
	if c.Output != "table" {
		if err := withJSON(out.Types); err != nil {
			return err
		}
		return emit(w, c.Output, out, nil)
	}
	rt := out.Types[0]
	return emit(w, "table", nil, func(tw *tabwriter.Writer) {
		switch url {
		case resource.ClusterType:
			clusterTable(tw, rt)
		case resource.ListenerType:
			listenerTable(tw, rt)
		case resource.RouteType:
			routeTable(tw, rt)
		case resource.EndpointType:
			endpointTable(tw, rt)
		}
	})
}

func clusterTable(tw *tabwriter.Writer, rt renderedType) {
	fmt.Fprintln(tw, "SERVICE FQDN\tPORT\tSUBSET\tDIRECTION\tTYPE")
	for _, x := range rt.Resources {
		c := &clusterv3.Cluster{}
		if x.any.UnmarshalTo(c) != nil {
			continue
		}
		fqdn, port, subset, dir := c.GetName(), "-", "-", "-"
		if p, sub, host, ok := model.ParseOutboundClusterName(c.GetName()); ok {
			fqdn, port, subset, dir = host, strconv.Itoa(int(p)), orDash(sub), "outbound"
		} else if parts := strings.Split(c.GetName(), "|"); len(parts) == 4 && parts[0] == "inbound" {
			fqdn, port, subset, dir = orDash(parts[3]), parts[1], orDash(parts[2]), "inbound"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", fqdn, port, subset, dir, c.GetType())
	}
}

func listenerTable(tw *tabwriter.Writer, rt renderedType) {
	fmt.Fprintln(tw, "NAME\tADDRESS\tPORT\tBIND\tFILTER CHAINS\tDESTINATIONS")
	for _, x := range rt.Resources {
		l := &listenerv3.Listener{}
		if x.any.UnmarshalTo(l) != nil {
			continue
		}
		sa := l.GetAddress().GetSocketAddress()
		addr, port := sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))
		if l.GetApiListener() != nil {
			addr, port = "(api listener)", "-"
		}
		bind := "yes"
		if b := l.GetBindToPort(); b != nil && !b.GetValue() {
			bind = "no"
		}
		var dests []string
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(chains[:len(chains):len(chains)], d)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				if tc := f.GetTypedConfig(); tc != nil {
					if rds := appendRDS(nil, tc); len(rds) > 0 {
						dests = append(dests, "Route: "+rds[0])
						continue
					}
				}
			}
			if fc.GetName() != "" {
				dests = append(dests, fc.GetName())
			}
		}
		if api := l.GetApiListener().GetApiListener(); api != nil {
			for _, n := range appendRDS(nil, api) {
				dests = append(dests, "Route: "+n)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", l.GetName(), addr, port, bind, len(chains), clipList(dests, 3))
	}
}

func routeTable(tw *tabwriter.Writer, rt renderedType) {
	fmt.Fprintln(tw, "NAME\tVIRTUAL SERVICE\tDOMAINS\tMATCH\tDESTINATION")
	for _, x := range rt.Resources {
		rc := &routev3.RouteConfiguration{}
		if x.any.UnmarshalTo(rc) != nil {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				match := r.GetMatch().GetPrefix()
				if match == "" {
					match = r.GetMatch().GetPath()
				}
				dest := r.GetRoute().GetCluster()
				if dr := r.GetDirectResponse(); dr != nil {
					dest = "direct response " + strconv.Itoa(int(dr.GetStatus()))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s*\t%s\n", rc.GetName(), vh.GetName(), clipList(vh.GetDomains(), 2), match, dest)
			}
		}
	}
}

func endpointTable(tw *tabwriter.Writer, rt renderedType) {
	fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tLOCALITY\tCLUSTER")
	for _, x := range rt.Resources {
		cla := &endpointv3.ClusterLoadAssignment{}
		if x.any.UnmarshalTo(cla) != nil {
			continue
		}
		if len(cla.GetEndpoints()) == 0 {
			fmt.Fprintf(tw, "(none)\t-\t-\t%s\n", cla.GetClusterName())
		}
		for _, l := range cla.GetEndpoints() {
			loc := strings.Trim(strings.Join([]string{l.GetLocality().GetRegion(), l.GetLocality().GetZone(), l.GetLocality().GetSubZone()}, "/"), "/")
			for _, e := range l.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\n", sa.GetAddress(), sa.GetPortValue(), e.GetHealthStatus(), orDash(loc), cla.GetClusterName())
			}
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clipList(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(" + %d more", len(xs)-n)
}
