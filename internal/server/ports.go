package server

import (
	"context"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/processor"
)

// claimsPort is the processor's Claims on ORDER_RESULTS, with its batch form.
type claimsPort struct{ *jsstore.Results }

func (p claimsPort) ClaimAll(ctx context.Context, reqs []processor.ClaimRequest) []processor.ClaimOutcome {
	in := make([]jsstore.ClaimReq, len(reqs))
	for i, q := range reqs {
		in[i] = jsstore.ClaimReq{Key: q.Key, Claim: q.Record}
	}
	out := make([]processor.ClaimOutcome, len(reqs))
	for i, r := range p.Results.ClaimAll(ctx, in) {
		out[i] = processor.ClaimOutcome{Holder: r.Holder, Won: r.Won, Err: r.Err}
	}
	return out
}

// eventsPort is the processor's EventStore on ORDER_EVENTS, with its batch form.
type eventsPort struct{ *jsstore.Events }

func (p eventsPort) AppendAll(ctx context.Context, reqs []processor.AppendRequest) []processor.AppendOutcome {
	in := make([]jsstore.AppendReq, len(reqs))
	for i, q := range reqs {
		in[i] = jsstore.AppendReq{Ctx: q.Ctx, Kind: q.Kind, OrderID: q.OrderID, Data: q.Data}
	}
	out := make([]processor.AppendOutcome, len(reqs))
	for i, r := range p.Events.AppendAll(ctx, in) {
		out[i] = processor.AppendOutcome{Stored: r.Stored, Err: r.Err}
	}
	return out
}

var (
	_ processor.BatchClaims = claimsPort{}
	_ processor.BatchEvents = eventsPort{}
)
