package jsstore_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
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
	js := orderlytest.JetStream(t, natsserver.Fsync{Interval: time.Second})
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
			name := "FACTS" + strconv.Itoa(i)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"f.>"}, AllowAtomicPublish: true}); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = js.DeleteStream(ctx, name) }()
			code, reply := atomicBatch(t, js.Conn(), tc.subjects, tc.filter, tc.msgID)
			if code != tc.code {
				t.Fatalf("commit answered %s, want error code %d", reply, tc.code)
			}
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != tc.stored {
				t.Fatalf("stored %d messages, want %d; commit answered %s", info.State.Msgs, tc.stored, reply)
			}
		})
	}
}

// atomicBatch publishes one message on each subject as one atomic batch, each
// expecting no earlier message on its subject (or on filter), with msgID when
// set, and returns the commit's error code (0 when it committed) and answer.
func atomicBatch(t *testing.T, nc *nats.Conn, subjects [2]string, filter, msgID string) (int, string) {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	batchID := nats.NewInbox()[len("_INBOX."):]
	for i, subj := range subjects {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		m.Header.Set("Nats-Batch-Id", batchID)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		if filter != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
		}
		if msgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		if i == len(subjects)-1 {
			m.Header.Set("Nats-Batch-Commit", "1")
			m.Reply = inbox
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no answer to the commit: %v", err)
	}
	var ack struct {
		Error *struct {
			ErrCode int `json:"err_code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &ack); err != nil {
		t.Fatalf("commit answer %q: %v", r.Data, err)
	}
	if ack.Error == nil {
		return 0, string(r.Data)
	}
	return ack.Error.ErrCode, string(r.Data)
}
