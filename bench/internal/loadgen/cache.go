package loadgen

import (
	"sync"
	"sync/atomic"

	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
)

// decodeCache remembers what a resource's bytes decode to, by type and
// content hash: proxies of one fleet receive the same resources, and
// decoding each copy again would make the load generator, not the server
// under test, the bottleneck on a small machine. Its size is the number
// of distinct resource versions the fleet has seen.
type decodeCache struct {
	shards   [64]cacheShard
	versions atomic.Int64
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[cacheKey]*xdsstate.Decoded
}

type cacheKey struct {
	typ     int
	content uint64
}

func (c *decodeCache) shard(k cacheKey) *cacheShard {
	return &c.shards[k.content%uint64(len(c.shards))]
}

func (c *decodeCache) get(typ int, content uint64) *xdsstate.Decoded {
	k := cacheKey{typ, content}
	s := c.shard(k)
	s.mu.RLock()
	d := s.m[k]
	s.mu.RUnlock()
	return d
}

// put stores d unless the key is there already, and returns the stored
// value.
func (c *decodeCache) put(typ int, content uint64, d *xdsstate.Decoded) *xdsstate.Decoded {
	k := cacheKey{typ, content}
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[k]; old != nil {
		return old
	}
	if s.m == nil {
		s.m = make(map[cacheKey]*xdsstate.Decoded)
	}
	s.m[k] = d
	c.versions.Add(1)
	return d
}

// decode returns the decoded resource, decoding it if it was not seen
// before or if always is set (and counting the decode in decodes).
func (c *decodeCache) decode(typ int, value []byte, always bool, decodes *atomic.Int64) (*xdsstate.Decoded, uint64, error) {
	content := xdsstate.ContentHash(value)
	if !always {
		if d := c.get(typ, content); d != nil {
			return d, content, nil
		}
	}
	decodes.Add(1)
	d, err := xdsstate.Decode(typ, value)
	if err != nil {
		return nil, content, err
	}
	return c.put(typ, content, &d), content, nil
}
