package ads

import (
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// response is what one watch is sent: resources shared by every connection
// (marshalled once per resource version), and the response's version.
type response struct {
	version   string
	resources []*anypb.Any
	names     []string
	bytes     int
}

// emptyVersion is the version of a response with no resources.
var emptyVersion = xdsgen.VersionOf(nil)

// build generates the response for one watch from the mesh.
func (s *Server) build(m *model.Mesh, p *proxy, w *watch) (*response, error) {
	if !w.wildcard && len(w.names) == 0 {
		return &response{version: emptyVersion}, nil
	}
	set, err := xdsgen.Generate(m, generatorOf(p), w.typeURL)
	if err != nil {
		return nil, err
	}
	var rs []*xdsgen.Resource
	var version string
	if w.wildcard {
		rs, version = set.Resources, set.Version
	} else {
		rs, version = set.Select(w.names)
	}
	r := &response{version: version, resources: make([]*anypb.Any, len(rs)), names: make([]string, len(rs))}
	for i, x := range rs {
		r.resources[i] = x.Any
		r.names[i] = x.Name
		r.bytes += len(x.Any.GetValue())
	}
	return r, nil
}

func generatorOf(p *proxy) xdsgen.Generator {
	if p.Generator == GeneratorGRPC {
		return xdsgen.GRPC
	}
	return xdsgen.Envoy
}

func (c *conn) generator() xdsgen.Generator { return generatorOf(c.proxy) }
