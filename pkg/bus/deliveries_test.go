package bus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func TestDecodeDeliveries(t *testing.T) {
	n, err := NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	a := &pb.DeliveryRecord{Kind: pb.DeliveryRecord_RESPONSE, Frontend: "fe.1", ConnId: "c1", Version: "v1"}
	b := &pb.DeliveryRecord{Kind: pb.DeliveryRecord_ACK, Frontend: "fe.1", ConnId: "c2", Version: "v1"}
	batch, err := proto.Marshal(&pb.DeliveryBatch{Records: []*pb.DeliveryRecord{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		subject string
		data    []byte
		want    []*pb.DeliveryRecord
		wantErr bool
	}{
		{name: "a batch", subject: n.DeliveryBatchSubject("fe.1"), data: batch, want: []*pb.DeliveryRecord{a, b}},
		{name: "an earlier release's record", subject: n.DeliverySubject("fe.1", "c1"), data: one, want: []*pb.DeliveryRecord{a}},
		{name: "an empty batch", subject: n.DeliveryBatchSubject("fe"), data: nil, want: nil},
		{name: "a batch subject's bytes that are not a batch", subject: n.DeliveryBatchSubject("fe"), data: []byte{0xff, 0xff}, wantErr: true},
		{name: "a record subject's bytes that are not a record", subject: n.DeliverySubject("fe", "c"), data: []byte{0x0a}, wantErr: true},
		{name: "another stream's subject", subject: "pw.pushes", data: one, wantErr: true},
		{name: "three tokens that are not a batch", subject: "pw.deliveries.fe.c1.x", data: one, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeDeliveries(n, tt.subject, tt.data)
			if (err != nil) != tt.wantErr {
				t.Fatalf("DecodeDeliveries(%s) error = %v, want error %v", tt.subject, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("DecodeDeliveries(%s) (-want +got):\n%s", tt.subject, diff)
			}
		})
	}
}

// TestDeliverySubjectsNeverMeet: no connection id makes an earlier
// release's subject a batch subject, and a frontend's filter takes both.
func TestDeliverySubjectsNeverMeet(t *testing.T) {
	n, err := NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	for _, conn := range []string{"batch", "batch.v1", "v1", ".", ""} {
		if s := n.DeliverySubject("fe", conn); s == n.DeliveryBatchSubject("fe") {
			t.Errorf("connection %q records on the batch subject %s", conn, s)
		}
	}
	of := n.DeliveriesOf("fe.1")
	for _, s := range []string{n.DeliveryBatchSubject("fe.1"), n.DeliverySubject("fe.1", "c1")} {
		if !server.SubjectMatchesFilter(s, of) {
			t.Errorf("%s does not match %s", of, s)
		}
	}
	if server.SubjectMatchesFilter(n.DeliveryBatchSubject("fe.2"), of) {
		t.Errorf("%s matches another frontend's batches", of)
	}
}
