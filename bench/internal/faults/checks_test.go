package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func pushMsg(t *testing.T, seq, through uint64, covered ...[2]uint64) streamMsg {
	t.Helper()
	req := &pb.PushRequest{ThroughSeq: through}
	for _, c := range covered {
		req.Covered = append(req.Covered, &pb.SeqRange{First: c[0], Last: c[1]})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return streamMsg{seq: seq, data: b}
}

func TestCheckPushes(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs func(t *testing.T) []streamMsg
		want pushCheck
	}{
		{"each change once, in order", func(t *testing.T) []streamMsg {
			return []streamMsg{pushMsg(t, 1, 3, [2]uint64{1, 3}), pushMsg(t, 2, 5, [2]uint64{4, 5})}
		}, pushCheck{Requests: 2}},
		{"a change twice and one never", func(t *testing.T) []streamMsg {
			return []streamMsg{pushMsg(t, 1, 3, [2]uint64{1, 3}), pushMsg(t, 2, 4, [2]uint64{3, 4})}
		}, pushCheck{Requests: 2, Duplicated: 1, Uncovered: 1}},
		{"a request after a newer one", func(t *testing.T) []streamMsg {
			return []streamMsg{pushMsg(t, 1, 5, [2]uint64{4, 5}), pushMsg(t, 2, 3, [2]uint64{1, 3})}
		}, pushCheck{Requests: 2, Reordered: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkPushes(tc.msgs(t), 0, 5)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("checkPushes (-want +got):\n%s", d)
			}
		})
	}
}

func sliceMsg(t *testing.T, seq uint64, name, ips string) streamMsg {
	t.Helper()
	obj := `{"endpoints":[`
	for i, ip := range strings.Split(ips, ",") {
		if i > 0 {
			obj += ","
		}
		obj += `{"addresses":["` + ip + `"]}`
	}
	obj += "]}"
	b, err := proto.Marshal(&pb.ChangeRecord{Ref: &pb.ObjectRef{Kind: "EndpointSlice", Name: name}, Object: []byte(obj)})
	if err != nil {
		t.Fatal(err)
	}
	return streamMsg{seq: seq, data: b}
}

func TestCheckRecords(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &churn{versions: map[string][]*written{}, services: map[string]int{}}
	c.order = []string{"a-0"}
	c.versions["a-0"] = []*written{
		{content: "10.0.0.1", phase: -1, at: t0, next: t0.Add(time.Second)},
		{content: "10.0.0.2", phase: 0, at: t0.Add(time.Second), next: t0.Add(2 * time.Second)},
		{content: "10.0.0.3", phase: 0, at: t0.Add(2 * time.Second), next: t0.Add(3 * time.Second)},
		{content: "10.0.0.4", phase: 1, at: t0.Add(3 * time.Second)},
	}
	msgs := []streamMsg{
		sliceMsg(t, 1, "a-0", "10.0.0.1"),
		sliceMsg(t, 2, "a-0", "10.0.0.3"), // 10.0.0.2 skipped while ingest was down
		sliceMsg(t, 3, "a-0", "10.0.0.3"), // a duplicate
		sliceMsg(t, 4, "a-0", "10.0.0.4"),
	}
	down := []downWindow{{from: t0.Add(time.Second / 2), to: t0.Add(2500 * time.Millisecond)}}
	got, err := checkRecords(msgs, c, down, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []recordCheck{{Records: 1}, {Coalesced: 1, Duplicated: 1, Records: 2}, {Records: 1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("checkRecords (-want +got):\n%s", d)
	}
	// The last version missing is a lost state.
	got, err = checkRecords(msgs[:3], c, down, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got[2].Lost != 1 {
		t.Errorf("lost in phase 1 = %d, want 1 (the final content never recorded)", got[2].Lost)
	}
}
