package jsstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/natsserver"
)

// TestAtomicBatchConditions pins what nats-server checks inside one atomic
// batch (docs/nats-facts.md, fact 13), on which the batched writes of
// --batch-writes rely: conditions are checked against the stream as it was
// before the batch. Two claims of one literal subject in one batch fail it
// whole (so the key claims of ORDER_RESULTS stay first-writer-wins when
// batched), and so do two messages with one message ID; but a subject filter
// (Nats-Expected-Last-Subject-Sequence-Subject) does not see the batch's own
// messages, so two messages under one filter, both expecting 0, are both
// stored. The per-order event guard of ORDER_EVENTS is such a filter, which is
// why the processor's decisions never rest on it alone: the key's claim comes
// first, and a redelivery makes the stored decision again, whose event has the
// same message ID; and why the Batcher keeps messages with conditions on one
// filter in separate batches (TestBatchKeepsOneConditionPerFilter).
func TestAtomicBatchConditions(t *testing.T) {
	t.Parallel()
	js := StartBare(t, natsserver.Fsync{Interval: time.Second})
	b := NewBatcher(js, 1, 5*time.Second)
	t.Cleanup(b.Stop)
	ctx := context.Background()
	for i, tc := range []struct {
		name     string
		subjects [2]string
		filter   string
		msgID    string
		code     int // the commit's error code; 0: committed
		stored   uint64
	}{
		{"two claims of one subject: refused", [2]string{"f.c.k1.o1", "f.c.k1.o1"}, "", "", 10164, 0},
		{"one event twice (one message ID): refused", [2]string{"f.c.k2.o1", "f.c.k2.o1"}, "f.*.k2.o1", "id-k2", 10201, 0},
		{"two messages under one filter: both stored", [2]string{"f.c.k3.o1", "f.c.k3.o2"}, "f.*.k3.*", "", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A stream of its own per case, on subjects of its own, none
			// deleted: a stream created just after another's deletion was
			// once refused with 10049 (error creating store) under -race.
			prefix := "f" + strconv.Itoa(i)
			s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FACTS" + strconv.Itoa(i), Subjects: []string{prefix + ".>"}, AllowAtomicPublish: true})
			if err != nil {
				t.Fatal(err)
			}
			own := func(subject string) string {
				if subject == "" {
					return ""
				}
				return prefix + strings.TrimPrefix(subject, "f")
			}
			// One atomic batch as the Batcher sends it (commit, without its
			// splitting of conditions on one filter).
			var items []*batchItem
			for _, subj := range tc.subjects {
				m := &nats.Msg{Subject: own(subj), Data: []byte("x")}
				SetExpectLastSubjectSeq(m, 0, own(tc.filter))
				if tc.msgID != "" {
					SetMsgID(m, tc.msgID)
				}
				items = append(items, &batchItem{ctx: ctx, msg: m})
			}
			_, commitErr := b.commit(ctx, items)
			code := 0
			var apiErr *jetstream.APIError
			if errors.As(commitErr, &apiErr) {
				code = int(apiErr.ErrorCode)
			} else if commitErr != nil {
				t.Fatal(commitErr)
			}
			if code != tc.code {
				t.Fatalf("commit answered %v, want error code %d", commitErr, tc.code)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != tc.stored {
				t.Fatalf("stored %d messages, want %d; commit answered %v", info.State.Msgs, tc.stored, commitErr)
			}
		})
	}
}
