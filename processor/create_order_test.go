package processor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/wm"
	"github.com/orderly-dev/orderly/projections"
)

// fakeClaims is an in-memory Claims: first writer wins.
type fakeClaims struct {
	mu  sync.Mutex
	m   map[string]projections.Result
	err error
}

func (f *fakeClaims) Claim(_ context.Context, key string, claim projections.Result) (projections.Result, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return projections.Result{}, false, f.err
	}
	if r, ok := f.m[key]; ok {
		return r, false, nil
	}
	if f.m == nil {
		f.m = map[string]projections.Result{}
	}
	f.m[key] = claim
	return claim, true, nil
}

// fakeEvents is an in-memory EventStore keeping the first event of each order.
type fakeEvents struct {
	mu      sync.Mutex
	stored  map[string][]byte
	appends int
	err     error
}

func (f *fakeEvents) Append(_ context.Context, _ events.Kind, orderID string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appends++
	if f.err != nil {
		return f.err
	}
	if f.stored == nil {
		f.stored = map[string][]byte{}
	}
	if _, ok := f.stored[orderID]; !ok {
		f.stored[orderID] = data
	}
	return nil
}

func (f *fakeEvents) event(t *testing.T, orderID string) events.RawEvent {
	t.Helper()
	var ev events.RawEvent
	if err := json.Unmarshal(f.stored[orderID], &ev); err != nil {
		t.Fatalf("event of %s: %v", orderID, err)
	}
	return ev
}

func command(nonce, key, fp string, total *int64) events.CreateOrder {
	return events.CreateOrder{
		Type: events.CreateOrderType, Nonce: nonce, Tenant: "t", KeyHash: key, Fingerprint: fp,
		AcceptedAt: time.Unix(1700000000, 0),
		Request: events.OrderRequest{CustomerID: "c", Currency: "EUR",
			Items: []events.Item{{SKU: "a", Quantity: 2, UnitPrice: 50}}, Total: total},
	}
}

// delivery is the delivery of cmd stored at stream sequence seq.
func delivery(t *testing.T, cmd any, seq uint64, delivered string) *message.Message {
	t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewMessage("id", b)
	m.Metadata.Set(wm.MetaDelivered, delivered)
	m.Metadata.Set(wm.MetaStreamSeq, strconv.FormatUint(seq, 10))
	return m
}

const (
	nonce1 = "N0NCE0000000A"
	nonce2 = "N0NCE0000000B"
)

var (
	id1 = events.OrderID(1, nonce1)
	id2 = events.OrderID(2, nonce2)
)

func newHandler(t *testing.T, c Claims, e EventStore) *createOrderHandler {
	t.Helper()
	h, err := NewCreateOrderHandler(c, e, 5, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestCreateOrderDecisions(t *testing.T) {
	t.Parallel()
	hundred, wrong := int64(100), int64(99)
	cases := []struct {
		name   string
		held   *projections.Result // the claim already there, if any
		cmd    events.CreateOrder
		typ    string
		reason string
	}{
		{"created", nil, command(nonce1, "k", "fp", &hundred), events.OrderCreatedType, ""},
		{"created without total", nil, command(nonce1, "k", "fp", nil), events.OrderCreatedType, ""},
		{"total mismatch", nil, command(nonce1, "k", "fp", &wrong), events.OrderRejectedType, events.ReasonTotalMismatch},
		{"redelivery resumes its own claim", &projections.Result{State: projections.StatePending, OrderID: id1, Fingerprint: "fp"},
			command(nonce1, "k", "fp", &hundred), events.OrderCreatedType, ""},
		{"same request, key held by another order", &projections.Result{State: projections.StateCompleted, OrderID: id2, Fingerprint: "fp"},
			command(nonce1, "k", "fp", &hundred), events.OrderRejectedType, events.ReasonDuplicate},
		{"other request, key held by another order", &projections.Result{State: projections.StatePending, OrderID: id2, Fingerprint: "other"},
			command(nonce1, "k", "fp", &hundred), events.OrderRejectedType, events.ReasonKeyReused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			claims := &fakeClaims{}
			if tc.held != nil {
				claims.m = map[string]projections.Result{"k": *tc.held}
			}
			store := &fakeEvents{}
			if err := newHandler(t, claims, store).Handle(delivery(t, tc.cmd, 1, "1")); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			ev := store.event(t, id1)
			if ev.Type != tc.typ || ev.ID != id1+"."+map[string]string{events.OrderCreatedType: "created", events.OrderRejectedType: "rejected"}[tc.typ] {
				t.Fatalf("event %s %s, want type %s", ev.ID, ev.Type, tc.typ)
			}
			if tc.reason != "" {
				var d events.OrderRejected
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatal(err)
				}
				if d.Reason != tc.reason {
					t.Fatalf("reason %q, want %q", d.Reason, tc.reason)
				}
				if tc.held != nil && tc.held.OrderID != id1 && d.DuplicateOf != tc.held.OrderID {
					t.Fatalf("duplicate_of %q, want %q", d.DuplicateOf, tc.held.OrderID)
				}
				if d.HoldsKey() != (tc.held == nil || tc.held.OrderID == id1) {
					t.Fatalf("HoldsKey = %v", d.HoldsKey())
				}
			}
			if c := claims.m["k"]; c.OrderID == "" {
				t.Fatal("no claim stored")
			}
		})
	}
}

func TestCreateOrderFailures(t *testing.T) {
	t.Parallel()
	hundred := int64(100)
	ok := command(nonce1, "k", "fp", &hundred)
	cases := []struct {
		name      string
		payload   any
		delivered string
		claimErr  error
		storeErr  error
		permanent bool
	}{
		{"undecodable", "not a command", "1", nil, nil, true},
		{"unknown type", events.CreateOrder{Type: "x", Nonce: nonce1, KeyHash: "k", Fingerprint: "f"}, "1", nil, nil, true},
		{"bad nonce", command("nope", "k", "fp", nil), "1", nil, nil, true},
		{"claim fails: retry", ok, "1", errors.New("timeout"), nil, false},
		{"store fails: retry", ok, "2", nil, errors.New("timeout"), false},
		{"store fails on the last delivery: dead letter", ok, "5", nil, errors.New("timeout"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeEvents{err: tc.storeErr}
			err := newHandler(t, &fakeClaims{err: tc.claimErr}, store).Handle(delivery(t, tc.payload, 7, tc.delivered))
			if err == nil {
				t.Fatal("Handle succeeded")
			}
			if IsPermanent(err) != tc.permanent {
				t.Fatalf("IsPermanent(%v) = %v, want %v", err, IsPermanent(err), tc.permanent)
			}
		})
	}
}

// TestConcurrentCommandsForOneKey: many commands for one key, handled at once,
// make one OrderCreated; every other order is rejected as a duplicate of it.
func TestConcurrentCommandsForOneKey(t *testing.T) {
	t.Parallel()
	claims, store := &fakeClaims{}, &fakeEvents{}
	h := newHandler(t, claims, store)
	var wg sync.WaitGroup
	ids := make([]string, 50)
	for i := range ids {
		seq := uint64(100 + i)
		ids[i] = events.OrderID(seq, nonce1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Handle(delivery(t, command(nonce1, "k", "fp", nil), seq, "1")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	created := 0
	for _, id := range ids {
		if store.event(t, id).Type == events.OrderCreatedType {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d orders created for one key, want 1", created)
	}
}

func TestDecideIsDeterministic(t *testing.T) {
	t.Parallel()
	cmd := command(nonce1, "k", "fp", nil)
	at := time.Unix(1700000000, 5)
	k1, a := Decide(cmd, id1, at)
	k2, b := Decide(cmd, id1, at)
	if k1 != k2 || string(a) != string(b) {
		t.Fatal("Decide is not a function of its inputs")
	}
}
