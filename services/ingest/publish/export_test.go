package publish

import (
	"fmt"
	"slices"
)

// Subjects lists what the publisher knows of each subject of its cluster,
// sorted: "key seq=N live uid=U rv=R content=C source=S" or "key seq=N
// deleted", which is all its fencing and planning read (a deleted
// subject's uid and resourceVersion are never used).
func (p *Publisher) Subjects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.state))
	for k, e := range p.state {
		s := fmt.Sprintf("%s seq=%d deleted", k, e.seq)
		if e.live {
			s = fmt.Sprintf("%s seq=%d live uid=%s rv=%s version=%s content=%s source=%s", k, e.seq, e.uid, e.rv, e.version, e.content, e.source)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
