package server

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// TestCurrentReplicas: the leader and the followers current and online
// count; a lagging or offline follower, or a missing leader, does not.
func TestCurrentReplicas(t *testing.T) {
	peer := func(current, offline bool) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: "n", Current: current, Offline: offline}
	}
	for _, c := range []struct {
		name    string
		cluster *jetstream.ClusterInfo
		want    int
	}{
		{name: "a single server", cluster: nil, want: 1},
		{name: "a single server, named", cluster: &jetstream.ClusterInfo{Leader: "s"}, want: 1},
		{name: "all current", cluster: &jetstream.ClusterInfo{Leader: "a", Replicas: []*jetstream.PeerInfo{peer(true, false), peer(true, false)}}, want: 3},
		{name: "one behind", cluster: &jetstream.ClusterInfo{Leader: "a", Replicas: []*jetstream.PeerInfo{peer(false, false), peer(true, false)}}, want: 2},
		{name: "one offline", cluster: &jetstream.ClusterInfo{Leader: "a", Replicas: []*jetstream.PeerInfo{peer(true, true), peer(true, false)}}, want: 2},
		{name: "no leader", cluster: &jetstream.ClusterInfo{Replicas: []*jetstream.PeerInfo{peer(true, false), peer(false, false)}}, want: 1},
	} {
		if got := currentReplicas(&jetstream.StreamInfo{Cluster: c.cluster}); got != c.want {
			t.Errorf("%s: %d current, want %d", c.name, got, c.want)
		}
	}
}

// TestStreamsOf: each role reports the streams it reads, once each.
func TestStreamsOf(t *testing.T) {
	api := streamsOf(Roles{API: true})
	if !slices.Equal(api, []string{events.CommandStream, events.EventStream, jsstore.ResultsStream}) {
		t.Errorf("api: %v", api)
	}
	all := streamsOf(Roles{API: true, Processor: true, Projector: true})
	if !slices.Equal(all, []string{events.CommandStream, events.EventStream, jsstore.ResultsStream, events.DeadLetterStream}) {
		t.Errorf("serve: %v", all)
	}
	if p := streamsOf(Roles{Projector: true}); !slices.Equal(p, []string{events.EventStream, jsstore.ResultsStream}) {
		t.Errorf("projector: %v", p)
	}
}
