package bus

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// DecodeDeliveries decodes one message of the DELIVERIES stream, stored on
// subject: a DeliveryBatch on a frontend's batch subject, or one
// DeliveryRecord on an earlier release's per-connection subject.
func DecodeDeliveries(n Names, subject string, data []byte) ([]*pb.DeliveryRecord, error) {
	rest, ok := strings.CutPrefix(subject, n.Prefix+".deliveries.")
	if !ok {
		return nil, fmt.Errorf("%s is not a delivery subject", subject)
	}
	switch tokens := strings.Count(rest, ".") + 1; {
	case tokens == 3 && strings.HasSuffix(rest, "."+deliveryBatchTail):
		batch := &pb.DeliveryBatch{}
		if err := proto.Unmarshal(data, batch); err != nil {
			return nil, fmt.Errorf("delivery batch on %s: %w", subject, err)
		}
		return batch.GetRecords(), nil
	case tokens == 2:
		rec := &pb.DeliveryRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			return nil, fmt.Errorf("delivery record on %s: %w", subject, err)
		}
		return []*pb.DeliveryRecord{rec}, nil
	default:
		return nil, fmt.Errorf("%s: not a delivery batch or record subject", subject)
	}
}
