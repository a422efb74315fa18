package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
)

// fakeClaims is an in-memory Claims: first writer wins.
type fakeClaims struct {
	mu  sync.Mutex
	m   map[string]idempotency.Record
	err error
}

func (f *fakeClaims) Claim(_ context.Context, key string, claim idempotency.Record) (idempotency.Record, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idempotency.Record{}, false, f.err
	}
	if r, ok := f.m[key]; ok {
		return r, false, nil
	}
	if f.m == nil {
		f.m = map[string]idempotency.Record{}
	}
	f.m[key] = claim
	return claim, true, nil
}

func (f *fakeClaims) Get(_ context.Context, key string) (idempotency.Record, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return idempotency.Record{}, false, f.err
	}
	r, ok := f.m[key]
	return r, ok, nil
}

func (f *fakeClaims) Save(_ context.Context, key string, rec idempotency.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.m == nil {
		f.m = map[string]idempotency.Record{}
	}
	f.m[key] = rec
	return nil
}

// fakeEvents is an in-memory EventStore keeping the first event of each order.
// It models keyed orders (ADR 0010) as the store does: the event of a keyed
// order is stored only if its key's last keyed event is at sequence after.
type fakeEvents struct {
	mu      sync.Mutex
	stored  map[string][]byte
	keys    map[string]KeyEvent // key token -> last keyed event
	seq     uint64
	appends int
	err     error
}

func (f *fakeEvents) Append(ctx context.Context, k events.Kind, orderID string, data []byte) (bool, error) {
	return f.appendAfter(ctx, k, orderID, data, 0)
}

func (f *fakeEvents) appendAfter(_ context.Context, k events.Kind, orderID string, data []byte, after uint64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appends++
	if f.err != nil {
		return false, f.err
	}
	if f.stored == nil {
		f.stored, f.keys = map[string][]byte{}, map[string]KeyEvent{}
	}
	_, token, keyed := events.ParseKeyedOrderID(orderID)
	if last := f.keys[token]; keyed && last.Seq != after {
		return false, nil
	}
	if _, ok := f.stored[orderID]; ok && !keyed {
		return false, nil
	}
	f.seq++
	f.stored[orderID] = data
	if keyed {
		f.keys[token] = KeyEvent{Data: data, Subject: events.EventSubject(k, orderID), Seq: f.seq, Stored: time.Now()}
	}
	return true, nil
}

func (f *fakeEvents) KeyEvent(_ context.Context, keyHash string) (KeyEvent, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return KeyEvent{}, false, f.err
	}
	token, _ := events.KeyToken(keyHash)
	ev, ok := f.keys[token]
	return ev, ok, nil
}

func (f *fakeEvents) Event(_ context.Context, orderID string) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, false, f.err
	}
	data, ok := f.stored[orderID]
	return data, ok, nil
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
func delivery(t *testing.T, cmd any, seq uint64, delivered int) Delivery {
	t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return Delivery{Data: b, Seq: seq, Delivered: delivered}
}

// key is the key hash of the tests' commands.
var key = idempotency.KeyHash("t", "k")

const (
	nonce1 = "N0NCE0000000A"
	nonce2 = "N0NCE0000000B"
)

var (
	id1 = events.OrderID(1, nonce1)
	id2 = events.OrderID(2, nonce2)
)

func newHandler(t *testing.T, c Claims, e EventStore) *Handler {
	t.Helper()
	h, err := New(Config{}, Deps{Claims: c, Events: e}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestCreateOrderDecisions(t *testing.T) {
	t.Parallel()
	hundred, wrong, above := int64(100), int64(99), int64(101)
	noItems := command(nonce1, key, "fp", nil)
	noItems.Request.Items = nil
	negative := command(nonce1, key, "fp", nil)
	negative.Request.Items = []events.Item{{SKU: "a", Quantity: 2, UnitPrice: 50}, {SKU: "b", Quantity: 1, UnitPrice: -100}}
	cases := []struct {
		name   string
		held   *idempotency.Record // the claim already there, if any
		cmd    events.CreateOrder
		typ    string
		reason string
	}{
		{"created", nil, command(nonce1, key, "fp", &hundred), events.OrderCreatedType, ""},
		{"created without total", nil, command(nonce1, key, "fp", nil), events.OrderCreatedType, ""},
		{"total mismatch", nil, command(nonce1, key, "fp", &wrong), events.OrderRejectedType, events.ReasonTotalMismatch},
		{"total above the sum", nil, command(nonce1, key, "fp", &above), events.OrderRejectedType, events.ReasonTotalMismatch},
		// The API refuses these; a command on the stream is checked again.
		{"no items", nil, noItems, events.OrderRejectedType, events.ReasonInvalidOrder},
		{"a negative price that makes the sum 0", nil, negative, events.OrderRejectedType, events.ReasonInvalidOrder},
		{"redelivery resumes its own claim", &idempotency.Record{State: idempotency.StatePending, OrderID: id1, Fingerprint: "fp"},
			command(nonce1, key, "fp", &hundred), events.OrderCreatedType, ""},
		{"same request, key held by another order", &idempotency.Record{State: idempotency.StateCompleted, OrderID: id2, Fingerprint: "fp"},
			command(nonce1, key, "fp", &hundred), events.OrderRejectedType, events.ReasonDuplicate},
		{"other request, key held by another order", &idempotency.Record{State: idempotency.StatePending, OrderID: id2, Fingerprint: "other"},
			command(nonce1, key, "fp", &hundred), events.OrderRejectedType, events.ReasonKeyReused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			claims := &fakeClaims{}
			if tc.held != nil {
				claims.m = map[string]idempotency.Record{key: *tc.held}
			}
			store := &fakeEvents{}
			if err := newHandler(t, claims, store).Handle(context.Background(), delivery(t, tc.cmd, 1, 1)); err != nil {
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
			c := claims.m[key]
			if c.OrderID == "" {
				t.Fatal("no claim stored")
			}
			if tc.held != nil && tc.held.OrderID == id1 && !bytes.Equal(c.Encode(), responseOf(t, store.stored[id1]).Encode()) {
				t.Fatalf("its own pending claim (an earlier version's) is not completed with the event's response: %q", c.Encode())
			}
			if tc.held == nil && (!c.Completed() || c.Decided().IsZero() || !bytes.Equal(c.Encode(), responseOf(t, store.stored[id1]).Encode())) {
				t.Fatalf("the claim is not the response the stored event makes: %q", c.Encode())
			}
		})
	}
}

// responseOf is the stored response an event makes (what projections.Project
// computes; projections' tests check that the two agree).
func responseOf(t *testing.T, data []byte) idempotency.Record {
	t.Helper()
	var ev events.RawEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	var r idempotency.Record
	switch ev.Type {
	case events.OrderCreatedType:
		var d events.OrderCreated
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		r = idempotency.Created(d)
	default:
		var d events.OrderRejected
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		r = idempotency.Rejected(d)
	}
	r.DecidedUnixNano = ev.Time.UnixNano()
	return r
}

// TestRedeliveryStoresTheStoredDecision: a crash after the claim (the stored
// response) and before the event leaves the key answered; the redelivery,
// later and on any processor, stores the event of exactly that decision,
// byte for byte, whatever its own clock says, both for a decision and for a
// rejection stored when the processor gave up.
func TestRedeliveryStoresTheStoredDecision(t *testing.T) {
	t.Parallel()
	hundred := int64(100)
	cmd := command(nonce1, key, "fp", &hundred)
	at := time.Date(2026, 11, 30, 17, 0, 0, 123456789, time.UTC)
	for name, want := range map[string]Decision{
		"decided":  Decide(cmd, id1, at),
		"given up": givingUp(cmd, id1, at),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, giveUp := range []bool{false, true} {
				claims := &fakeClaims{m: map[string]idempotency.Record{key: want.Record}}
				store := &fakeEvents{}
				h := newHandler(t, claims, store)
				h.now = func() time.Time { return at.Add(time.Hour) }
				var err error
				if giveUp {
					err = h.GiveUp(context.Background(), delivery(t, cmd, 1, 10), errors.New("boom"))
				} else {
					err = h.Handle(context.Background(), delivery(t, cmd, 1, 2))
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := store.stored[id1]; !bytes.Equal(got, want.Event) {
					t.Fatalf("give up %v: stored event\n%s\nwant\n%s", giveUp, got, want.Event)
				}
				if !bytes.Equal(claims.m[key].Encode(), want.Record.Encode()) {
					t.Fatal("the stored response changed")
				}
			}
		})
	}
}

// TestRedeliveryAfterTheResponseExpired: the command was decided (its event
// is stored) but not acked, and is redelivered after its key's response
// expired: the redelivery wins the key again with a decision of its own
// time, and the stored event, which stands, makes the key's response again,
// so that both say the same. The same when the key holds a pending claim of
// a version before ADR 0009, whose projector would have completed it.
func TestRedeliveryAfterTheResponseExpired(t *testing.T) {
	t.Parallel()
	hundred := int64(100)
	cmd := command(nonce1, key, "fp", &hundred)
	at := time.Date(2026, 11, 29, 9, 0, 0, 42, time.UTC)
	for name, first := range map[string]Decision{"decided": Decide(cmd, id1, at), "given up": givingUp(cmd, id1, at)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, held := range []map[string]idempotency.Record{nil, {key: idempotency.Pending(id1, "fp")}} {
				claims, store := &fakeClaims{m: held}, &fakeEvents{stored: map[string][]byte{id1: first.Event}}
				h := newHandler(t, claims, store)
				h.now = func() time.Time { return at.Add(30 * time.Hour) }
				if err := h.Handle(context.Background(), delivery(t, cmd, 1, 7)); err != nil {
					t.Fatal(err)
				}
				if got := claims.m[key]; !bytes.Equal(got.Encode(), first.Record.Encode()) {
					t.Fatalf("held %v: the key's response\n%s\nwant the stored event's\n%s", held, got.Encode(), first.Record.Encode())
				}
				if !bytes.Equal(store.stored[id1], first.Event) {
					t.Fatal("the stored event changed")
				}
			}
		})
	}
}

// TestBeforeClaimFailureLeavesTheKeyFree: a failure before the decision is
// stored leaves nothing; the next delivery decides.
func TestBeforeClaimFailureLeavesTheKeyFree(t *testing.T) {
	t.Parallel()
	claims, store := &fakeClaims{}, &fakeEvents{}
	h, err := New(Config{Hooks: Hooks{BeforeClaim: func(_ context.Context, _ events.CreateOrder, delivered int) error {
		if delivered == 1 {
			return errors.New("crash")
		}
		return nil
	}}}, Deps{Claims: claims, Events: store}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(nonce1, key, "fp", nil)
	if err := h.Handle(context.Background(), delivery(t, cmd, 1, 1)); err == nil || len(claims.m) != 0 || store.appends != 0 {
		t.Fatalf("first delivery: %v, %d claims, %d appends", err, len(claims.m), store.appends)
	}
	if err := h.Handle(context.Background(), delivery(t, cmd, 1, 2)); err != nil || store.event(t, id1).Type != events.OrderCreatedType {
		t.Fatalf("second delivery: %v", err)
	}
}

func TestCreateOrderFailures(t *testing.T) {
	t.Parallel()
	hundred := int64(100)
	ok := command(nonce1, key, "fp", &hundred)
	timeout := errors.New("timeout")
	cases := []struct {
		name      string
		payload   any
		seq       uint64
		claimErr  error
		storeErr  error
		permanent bool
	}{
		{"undecodable", "not a command", 7, nil, nil, true},
		{"unknown type", events.CreateOrder{Type: "x", Nonce: nonce1, KeyHash: key, Fingerprint: "f"}, 7, nil, nil, true},
		{"bad nonce", command("nope", key, "fp", nil), 7, nil, nil, true},
		{"key hash that is not one", command(nonce1, "k.*", "fp", nil), 7, nil, nil, true},
		{"no fingerprint", command(nonce1, key, "", nil), 7, nil, nil, true},
		{"no stream sequence", ok, 0, nil, nil, true},
		{"claim fails: the store's error, for the pipeline to judge", ok, 7, timeout, nil, false},
		{"store fails: the store's error", ok, 7, nil, timeout, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeEvents{err: tc.storeErr}
			err := newHandler(t, &fakeClaims{err: tc.claimErr}, store).Handle(context.Background(), delivery(t, tc.payload, tc.seq, 1))
			if err == nil {
				t.Fatal("Handle succeeded")
			}
			if IsPermanent(err) != tc.permanent {
				t.Fatalf("IsPermanent(%v) = %v, want %v", err, IsPermanent(err), tc.permanent)
			}
			if !tc.permanent && !errors.Is(err, timeout) {
				t.Fatalf("the store's error is not kept: %v", err)
			}
		})
	}
}

// TestGiveUpAnswersForTheKey: a command given up stores processing_failed
// when nobody holds the key (or its order holds a pending claim of an
// earlier version), nothing when another order holds it, and nothing for a
// command it cannot read. (A key that holds the order's own decision: see
// TestRedeliveryStoresTheStoredDecision.)
func TestGiveUpAnswersForTheKey(t *testing.T) {
	t.Parallel()
	cmd := command(nonce1, key, "fp", nil)
	cases := []struct {
		name   string
		held   *idempotency.Record
		stored bool
	}{
		{"its own pending claim (earlier versions)", &idempotency.Record{State: idempotency.StatePending, OrderID: id1, Fingerprint: "fp"}, true},
		{"nobody claimed the key yet", nil, true},
		{"another order holds the key", &idempotency.Record{State: idempotency.StatePending, OrderID: id2, Fingerprint: "fp"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			claims, store := &fakeClaims{}, &fakeEvents{}
			if tc.held != nil {
				claims.m = map[string]idempotency.Record{key: *tc.held}
			}
			if err := newHandler(t, claims, store).GiveUp(context.Background(), delivery(t, cmd, 1, 10), errors.New("boom")); err != nil {
				t.Fatal(err)
			}
			_, got := store.stored[id1]
			if got != tc.stored {
				t.Fatalf("stored a rejection: %v, want %v", got, tc.stored)
			}
			if got {
				var d events.OrderRejected
				if err := json.Unmarshal(store.event(t, id1).Data, &d); err != nil || d.Reason != events.ReasonProcessingFailed {
					t.Fatalf("rejection %+v %v", d, err)
				}
				if (tc.held == nil || tc.held.OrderID == id1) && (claims.m[key].Status != 422 || !bytes.Equal(claims.m[key].Encode(), responseOf(t, store.stored[id1]).Encode())) {
					t.Fatalf("the key's answer is not the rejection: %q", claims.m[key].Encode())
				}
			}
		})
	}
	// A command it cannot read: the dead letter is all there is.
	store := &fakeEvents{}
	if err := newHandler(t, &fakeClaims{}, store).GiveUp(context.Background(), Delivery{Data: []byte("junk"), Seq: 3, Delivered: 10}, errors.New("boom")); err != nil || store.appends != 0 {
		t.Fatalf("junk: %v, %d appends", err, store.appends)
	}
	// A store that fails keeps the command for another try.
	if err := newHandler(t, &fakeClaims{}, &fakeEvents{err: errors.New("timeout")}).GiveUp(context.Background(), delivery(t, cmd, 1, 10), errors.New("boom")); err == nil {
		t.Fatal("GiveUp succeeded though the rejection was not stored")
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
			if err := h.Handle(context.Background(), delivery(t, command(nonce1, key, "fp", nil), seq, 1)); err != nil {
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
	cmd := command(nonce1, key, "fp", nil)
	at := time.Unix(1700000000, 5)
	a, b := Decide(cmd, id1, at), Decide(cmd, id1, at)
	if a.Kind != b.Kind || !bytes.Equal(a.Event, b.Event) || !bytes.Equal(a.Record.Encode(), b.Record.Encode()) {
		t.Fatal("Decide is not a function of its inputs")
	}
}

// batchClaims and batchEvents are the fakes with their batch forms, counting
// the batch calls; a claim of failKey fails.
type batchClaims struct {
	*fakeClaims
	failKey string
	calls   int
}

func (b *batchClaims) ClaimAll(ctx context.Context, reqs []ClaimRequest) []ClaimOutcome {
	b.calls++
	out := make([]ClaimOutcome, len(reqs))
	for i, q := range reqs {
		if q.Key == b.failKey {
			out[i].Err = errors.New("injected: claim failed")
			continue
		}
		out[i].Holder, out[i].Won, out[i].Err = b.Claim(ctx, q.Key, q.Record)
	}
	return out
}

type batchEvents struct {
	*fakeEvents
	calls int
}

func (b *batchEvents) AppendAll(ctx context.Context, reqs []AppendRequest) []AppendOutcome {
	b.calls++
	out := make([]AppendOutcome, len(reqs))
	for i, q := range reqs {
		out[i].Stored, out[i].Err = b.appendAfter(ctx, q.Kind, q.OrderID, q.Data, q.After)
	}
	return out
}

// TestHandleBatchGivesEachDeliveryItsOutcome: in one batch, each command
// gets the outcome Handle would give it alone, in its own slot, with one
// batch call for the claims and one for the events: a new order, a
// malformed command (permanent), a second command of the first one's key
// (rejected as a duplicate naming it), a claim that fails, a hook that fails,
// and a total that does not add up (rejected).
func TestHandleBatchGivesEachDeliveryItsOutcome(t *testing.T) {
	t.Parallel()
	hundred, wrong := int64(100), int64(99)
	k1, kFail, kHook, k5 := idempotency.KeyHash("t", "k1"), idempotency.KeyHash("t", "fail"), idempotency.KeyHash("t", "hook"), idempotency.KeyHash("t", "k5")
	claims := &batchClaims{fakeClaims: &fakeClaims{}, failKey: kFail}
	store := &batchEvents{fakeEvents: &fakeEvents{}}
	h, err := New(Config{Hooks: Hooks{BeforeClaim: func(_ context.Context, cmd events.CreateOrder, _ int) error {
		if cmd.KeyHash == kHook {
			return errors.New("injected: hook failed")
		}
		return nil
	}}}, Deps{Claims: claims, Events: store}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	nonces := []string{"N0NCE000000B1", "N0NCE000000B2", "N0NCE000000B3", "N0NCE000000B4", "N0NCE000000B5", "N0NCE000000B6"}
	ds := []Delivery{
		delivery(t, command(nonces[0], k1, "fp", &hundred), 1, 1),
		{Data: []byte(`{"type":"CreateOrder"`), Seq: 2, Delivered: 1},
		delivery(t, command(nonces[2], k1, "fp", &hundred), 3, 1),
		delivery(t, command(nonces[3], kFail, "fp", &hundred), 4, 1),
		delivery(t, command(nonces[4], kHook, "fp", &hundred), 5, 1),
		delivery(t, command(nonces[5], k5, "fp", &wrong), 6, 1),
	}
	errs := h.HandleBatch(context.Background(), ds)
	if len(errs) != len(ds) {
		t.Fatalf("%d outcomes for %d deliveries", len(errs), len(ds))
	}
	var p interface{ Permanent() bool }
	if errs[0] != nil || !errors.As(errs[1], &p) || errs[2] != nil || errs[3] == nil || errs[4] == nil || errs[5] != nil {
		t.Fatalf("outcomes %v", errs)
	}
	if claims.calls != 1 || store.calls != 1 {
		t.Fatalf("%d claim batches and %d event batches, want one each", claims.calls, store.calls)
	}
	id := func(i int) string { return events.OrderID(ds[i].Seq, nonces[i]) }
	if ev := store.event(t, id(0)); ev.Type != events.OrderCreatedType {
		t.Errorf("first: %s", ev.Type)
	}
	for i, reason := range map[int]string{2: events.ReasonDuplicate, 5: events.ReasonTotalMismatch} {
		var d events.OrderRejected
		if err := json.Unmarshal(store.event(t, id(i)).Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Reason != reason || i == 2 && d.DuplicateOf != id(0) {
			t.Errorf("delivery %d: rejected %s naming %q", i, d.Reason, d.DuplicateOf)
		}
	}
	for _, i := range []int{3, 4} {
		if _, ok, _ := store.Event(context.Background(), id(i)); ok {
			t.Errorf("delivery %d failed but has an event", i)
		}
	}
}

// keyed is cmd with a keyed order ID (ADR 0010): no nonce.
func keyed(cmd events.CreateOrder) events.CreateOrder {
	cmd.IDForm, cmd.Nonce = events.IDFormKeyed, ""
	return cmd
}

func TestKeyedOrders(t *testing.T) {
	t.Parallel()
	claims, store := &fakeClaims{}, &fakeEvents{}
	h := newHandler(t, claims, &batchEvents{fakeEvents: store})
	token, _ := events.KeyToken(key)
	ctx := context.Background()
	first, second := events.KeyedOrderID(1, token), events.KeyedOrderID(2, token)
	var held int // deliveries after which the key held their order's decision
	h.cfg.Hooks.AfterClaim = func(context.Context, events.CreateOrder, int) error { held++; return nil }
	lost := func() float64 {
		var m dto.Metric
		if err := h.decided.WithLabelValues(kindNone).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}

	// The first command of the key makes its order under the keyed ID: its
	// event is the key's claim, and nothing else is stored.
	if err := h.Handle(ctx, delivery(t, keyed(command("", key, "fp", nil)), 1, 1)); err != nil {
		t.Fatal(err)
	}
	if ev := store.event(t, first); ev.Type != events.OrderCreatedType || len(claims.m) != 0 || held != 1 {
		t.Fatalf("first: event %s, %d records in the claims store, want none; held %d", ev.Type, len(claims.m), held)
	}
	// A redelivery stores nothing again, and finds the key its own: it did
	// not lose it to another order.
	if err := h.Handle(ctx, delivery(t, keyed(command("", key, "fp", nil)), 1, 2)); err != nil || len(store.stored) != 1 {
		t.Fatalf("redelivery: %v, %d events", err, len(store.stored))
	}
	if held != 2 || lost() != 0 {
		t.Fatalf("redelivery: held %d times, want 2; counted lost %v times, want 0", held, lost())
	}
	// A command of the nonce form of the key (an API not yet making keyed
	// IDs) is rejected naming the keyed holder, and claims nothing.
	if err := h.Handle(ctx, delivery(t, command(nonce1, key, "fp", nil), 7, 1)); err != nil {
		t.Fatal(err)
	}
	if ev := store.event(t, events.OrderID(7, nonce1)); ev.Type != events.OrderRejectedType || len(claims.m) != 0 ||
		!bytes.Contains(store.stored[events.OrderID(7, nonce1)], []byte(`"duplicate_of":"`+first+`"`)) {
		t.Fatalf("a nonce command of a keyed key: %s, %d records", store.stored[events.OrderID(7, nonce1)], len(claims.m))
	}
	// Another command of the key, same request or another: it loses, is
	// done (acked) and stores no event; the key's event stays the first's.
	for i, fp := range []string{"fp", "other"} {
		if err := h.Handle(ctx, delivery(t, keyed(command("", key, fp, nil)), uint64(2+i), 1)); err != nil {
			t.Fatalf("loser %d: %v", i, err)
		}
	}
	if _, ok := store.stored[second]; ok || len(store.stored) != 2 {
		t.Fatalf("a losing keyed command stored an event: %d events", len(store.stored))
	}
	if held != 2 || lost() != 2 {
		t.Fatalf("losers: held %d times, want 2; counted lost %v times, want 2", held, lost())
	}
	// Past the result TTL the key is free: a new order claims it after the holder.
	h.now = func() time.Time { return time.Now().Add(25 * time.Hour) }
	if err := h.Handle(ctx, delivery(t, keyed(command("", key, "fp", nil)), 5, 1)); err != nil {
		t.Fatal(err)
	}
	if ev, _, _ := store.KeyEvent(ctx, key); events.OrderIDOfSubject(ev.Subject) != events.KeyedOrderID(5, token) {
		t.Fatalf("after the TTL the key's event is %s's", ev.Subject)
	}
	h.now = time.Now

	// A key whose record in the claims store names an order of the nonce
	// form: a keyed command of it loses, and stores nothing.
	other := idempotency.KeyHash("t", "legacy")
	claims.m = map[string]idempotency.Record{other: {State: idempotency.StateCompleted, OrderID: id1, Fingerprint: "fp", Status: 201}}
	if err := h.Handle(ctx, delivery(t, keyed(command("", other, "fp", nil)), 6, 1)); err != nil {
		t.Fatal(err)
	}
	otherToken, _ := events.KeyToken(other)
	if _, ok := store.stored[events.KeyedOrderID(6, otherToken)]; ok {
		t.Fatal("a keyed order took a key held in the claims store")
	}
	// A command of the nonce form that loses still stores its rejection.
	if err := h.Handle(ctx, delivery(t, command(nonce2, other, "fp", nil), 9, 1)); err != nil {
		t.Fatal(err)
	}
	if ev := store.event(t, events.OrderID(9, nonce2)); ev.Type != events.OrderRejectedType {
		t.Fatalf("unkeyed loser: %s", ev.Type)
	}
	// Giving up on a keyed command: its rejection claims a free key, and
	// changes nothing on a key another order holds.
	free := idempotency.KeyHash("t", "free")
	freeToken, _ := events.KeyToken(free)
	if err := h.GiveUp(ctx, delivery(t, keyed(command("", free, "fp", nil)), 10, 5), errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if ev := store.event(t, events.KeyedOrderID(10, freeToken)); ev.Type != events.OrderRejectedType {
		t.Fatalf("given up: %s", ev.Type)
	}
	if err := h.GiveUp(ctx, delivery(t, keyed(command("", key, "fp", nil)), 11, 5), errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.stored[events.KeyedOrderID(11, token)]; ok {
		t.Fatal("giving up stored an event for a key another order holds")
	}
	// Commands that cannot make the ID they name are malformed.
	for _, bad := range []events.CreateOrder{
		func() events.CreateOrder { c := keyed(command("", key, "fp", nil)); c.Nonce = nonce1; return c }(),
		func() events.CreateOrder { c := command(nonce1, key, "fp", nil); c.IDForm = "v9"; return c }(),
	} {
		if err := h.Handle(ctx, delivery(t, bad, 20, 1)); !IsPermanent(err) {
			t.Fatalf("%+v: %v, want a permanent error", bad, err)
		}
	}
}

// TestEventsCarryTheCommand: a decision's event holds what its command says,
// its times in UTC whatever zone the command's were in, and the request's
// trace context for the consumers to continue it.
func TestEventsCarryTheCommand(t *testing.T) {
	t.Parallel()
	hundred, wrong := int64(100), int64(7)
	accepted := time.Date(2026, 12, 6, 2, 30, 0, 5, time.FixedZone("CET", 3600))
	for _, total := range []*int64{&hundred, &wrong} {
		cmd := command(nonce1, key, "fp", total)
		cmd.AcceptedAt = accepted
		cmd.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		cmd.TraceState = "vendor=x"
		store := &fakeEvents{}
		if err := newHandler(t, &fakeClaims{}, store).Handle(context.Background(), delivery(t, cmd, 1, 1)); err != nil {
			t.Fatal(err)
		}
		raw := store.stored[id1]
		if !bytes.Contains(raw, []byte(`"accepted_at":"2026-12-06T01:30:00.000000005Z"`)) {
			t.Fatalf("accepted_at not in UTC: %s", raw)
		}
		var ev events.Event[struct { // the fields of both kinds
			OrderID            string              `json:"order_id"`
			Tenant             string              `json:"tenant"`
			IdempotencyKeyHash string              `json:"idempotency_key_hash"`
			RequestFingerprint string              `json:"request_fingerprint"`
			CustomerID         string              `json:"customer_id"`
			Total              int64               `json:"total"`
			Items              []events.Item       `json:"items"`
			Request            events.OrderRequest `json:"request"`
		}]
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.TraceParent != cmd.TraceParent || ev.TraceState != cmd.TraceState || ev.Time.Location() != time.UTC {
			t.Fatalf("trace context %q %q, time %s: %s", ev.TraceParent, ev.TraceState, ev.Time, raw)
		}
		d := ev.Data
		if d.OrderID != id1 || d.Tenant != cmd.Tenant || d.IdempotencyKeyHash != cmd.KeyHash || d.RequestFingerprint != cmd.Fingerprint {
			t.Fatalf("event data: %s", raw)
		}
		if total == &hundred && (d.CustomerID != "c" || d.Total != 100 || len(d.Items) != 1 || d.Items[0] != cmd.Request.Items[0]) {
			t.Fatalf("created: %s", raw)
		}
		if total == &wrong && (d.Request.CustomerID != "c" || *d.Request.Total != 7 || len(d.Request.Items) != 1) {
			t.Fatalf("rejected: %s", raw)
		}
	}
}
