package bench_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/internal/bench"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := bench.ParseMix("new:70,replay:20,dup:10")
	if err != nil || m != (bench.Mix{New: 70, Replay: 20, Duplicate: 10}) {
		t.Fatalf("%+v %v", m, err)
	}
	for _, bad := range []string{"new:50", "new:100,old:0", "new:x", "new:-1,replay:101"} {
		if _, err := bench.ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

func TestBodyIsAValidOrderOfTheSize(t *testing.T) {
	t.Parallel()
	for _, size := range []int{200, 500, 5000} {
		b := bench.Body(size)
		if len(b) < size-60 || len(b) > size+60 {
			t.Errorf("Body(%d) is %d bytes", size, len(b))
		}
		req, errs := api.DecodeOrder(b)
		if errs != nil {
			t.Fatalf("Body(%d) does not decode: %v", size, errs)
		}
		if sum, _ := req.Sum(); req.Total == nil || *req.Total != sum {
			t.Fatalf("Body(%d): total %v, sum %d", size, req.Total, sum)
		}
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := bench.PercentilesOf(d)
	if p.P50 != 50 || p.P99 != 99 || p.Max != 100 {
		t.Fatalf("%+v", p)
	}
}

// TestRunAgainstOrderly loads a real orderly briefly with every kind of request,
// and the ceiling handler with new ones.
func TestRunAgainstOrderly(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	res, err := bench.Run(context.Background(), "t", bench.Config{
		URL: inst.URL, Connections: 4, Requests: 300, PayloadSize: 500, ReplayKeys: 20,
		Mix: bench.Mix{New: 50, Replay: 30, Duplicate: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 300 || res.Errors != 0 || res.Status["201"]+res.Status["409"] != 300 || res.Kinds["replay"] == 0 || res.Kinds["dup"] == 0 {
		t.Fatalf("%+v", res)
	}
	if res.ServerCPUPerRequest <= 0 {
		t.Fatal("no server CPU per request from /metrics")
	}
	if err := bench.WaitIdle(context.Background(), inst.NATSURL(), inst.Operator(), 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}

	ceiling := httptest.NewServer(bench.BaselineHandler())
	defer ceiling.Close()
	cres, err := bench.Run(context.Background(), "ceiling", bench.Config{
		URL: ceiling.URL, Connections: 4, Requests: 200, PayloadSize: 500, Mix: bench.Mix{New: 100},
	})
	if err != nil || cres.Status["201"] != 200 {
		t.Fatalf("ceiling: %+v %v", cres, err)
	}
	r, err := http.Post(ceiling.URL+"/v1/orders", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Fatalf("the ceiling accepted a request without a key: %d", r.StatusCode)
	}
}
