package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
)

// streamReplicas exports, at each scrape, how many copies each stream the
// process uses should have and how many are current: the leader and the
// followers that are caught up and online. A NATS node whose JetStream
// stopped (its disk full) stays in the cluster, and its clients are served
// through the others, so nothing else in orderly shows that the streams run
// on fewer copies, and one more lost node stops them (nats-facts 21). The
// alert OrderlyStreamReplicasBehind reads it. A stream whose info does not
// come within the timeout is left out of that scrape.
type streamReplicas struct {
	js                jetstream.JetStream
	streams           []string
	timeout           time.Duration
	replicas, current *prometheus.Desc
}

// streamsOf are the streams a process with roles reads (and may read the
// info of: natsauth grants each role the info of these).
func streamsOf(r Roles) []string {
	var out []string
	add := func(names ...string) {
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if r.API {
		add(events.CommandStream, events.EventStream, jsstore.ResultsStream)
	}
	if r.Processor {
		add(events.CommandStream, events.EventStream, jsstore.ResultsStream, events.DeadLetterStream)
	}
	if r.Projector {
		add(events.EventStream, jsstore.ResultsStream)
	}
	return out
}

func newStreamReplicas(js jetstream.JetStream, streams []string) *streamReplicas {
	return &streamReplicas{js: js, streams: streams, timeout: 2 * time.Second,
		replicas: prometheus.NewDesc("orderly_stream_replicas", "Copies the stream is configured to keep.", []string{"stream"}, nil),
		current: prometheus.NewDesc("orderly_stream_replicas_current",
			"Copies of the stream that are current: its leader, and its followers caught up and online (nats-facts 21).", []string{"stream"}, nil)}
}

func (r *streamReplicas) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.replicas
	ch <- r.current
}

func (r *streamReplicas) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range r.streams {
		wg.Go(func() {
			s, err := r.js.Stream(ctx, name)
			if err != nil {
				return
			}
			info := s.CachedInfo()
			configured, current := info.Config.Replicas, currentReplicas(info)
			ch <- prometheus.MustNewConstMetric(r.replicas, prometheus.GaugeValue, float64(max(configured, 1)), name)
			ch <- prometheus.MustNewConstMetric(r.current, prometheus.GaugeValue, float64(current), name)
		})
	}
	wg.Wait()
}

// currentReplicas counts the current copies of a stream: 1 on a single
// server; on a cluster its leader, if it has one, and each follower that is
// current and not offline.
func currentReplicas(info *jetstream.StreamInfo) int {
	cl := info.Cluster
	if cl == nil || (cl.Leader == "" && len(cl.Replicas) == 0) {
		return 1 // a single server
	}
	n := 0
	if cl.Leader != "" {
		n++
	}
	for _, p := range cl.Replicas {
		if p.Current && !p.Offline {
			n++
		}
	}
	return n
}
