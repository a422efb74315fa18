package jsstore

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher stores a message in a stream and returns the broker's ack. A
// jetstream.JetStream is one; so is a Batcher. Conditions (message ID, expected
// sequences) travel as headers on msg, set with SetMsgID and
// SetExpectLastSubjectSeq, so that every Publisher honours them.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// SetMsgID sets the Nats-Msg-Id header: the broker drops a message whose ID it
// stored within the duplicate window, and acks it as a duplicate.
func SetMsgID(msg *nats.Msg, id string) {
	header(msg).Set(jetstream.MsgIDHeader, id)
}

// SetExpectLastSubjectSeq makes the broker refuse msg (wrong last sequence)
// unless the last message on subject (msg's own subject when empty; wildcards
// allowed) has sequence seq; 0 means "no message yet".
func SetExpectLastSubjectSeq(msg *nats.Msg, seq uint64, subject string) {
	h := header(msg)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
	if subject != "" {
		h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, subject)
	}
}

func header(msg *nats.Msg) nats.Header {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	return msg.Header
}
