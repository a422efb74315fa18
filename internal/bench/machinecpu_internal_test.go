package bench

import (
	"bytes"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

// TestMachineCPUShares: the shares of the CPU time that passed between two
// readings of /proc/stat; none when the counters did not move or went back.
func TestMachineCPUShares(t *testing.T) {
	t.Parallel()
	a := procfs.CPUStat{User: 100, Nice: 1, System: 50, Idle: 1000, Iowait: 5, IRQ: 1, SoftIRQ: 2, Steal: 7, Guest: 3}
	b := procfs.CPUStat{User: 125, Nice: 1, System: 60, Idle: 1015, Iowait: 10, IRQ: 2, SoftIRQ: 6, Steal: 47, Guest: 13}
	got := machineCPU(a, b) // busy 25+10+1+4 = 40, idle 15+5 = 20, steal 40; guest is in user
	if got == nil || !near(got.Busy, 0.4) || !near(got.Idle, 0.2) || !near(got.Steal, 0.4) {
		t.Fatalf("got %+v, want busy 0.4, idle 0.2, steal 0.4", got)
	}
	if s := got.String(); s != "40/20/40" {
		t.Fatalf("String() = %q", s)
	}
	if got := machineCPU(a, a); got != nil {
		t.Fatalf("no time passed: %+v", got)
	}
	if got := machineCPU(b, a); got != nil {
		t.Fatalf("counters went back: %+v", got)
	}
	if s := (*MachineCPU)(nil).String(); s != "-" {
		t.Fatalf("nil String() = %q", s)
	}
}

// TestStealIsWarned: a run during which the hypervisor took StealWarning or
// more of the machine is named in a warning and in the report, others not.
func TestStealIsWarned(t *testing.T) {
	t.Parallel()
	rep := Report{Results: []Result{
		{Name: "stolen", MachineCPU: &MachineCPU{Busy: 0.43, Idle: 0.1, Steal: 0.47}},
		{Name: "calm", MachineCPU: &MachineCPU{Busy: 0.9, Idle: 0.05, Steal: 0.05}},
		{Name: "unknown"},
	}}
	rep.Warnings = warnings(rep.Results)
	if len(rep.Warnings) != 1 || !strings.HasPrefix(rep.Warnings[0], "stolen: the hypervisor took 47% ") {
		t.Fatalf("warnings %q", rep.Warnings)
	}
	var out bytes.Buffer
	rep.Print(&out)
	for _, want := range []string{"machine busy/idle/steal %", "43/10/47", "90/5/5", "warning: stolen: the hypervisor took 47%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunReadsTheMachinesCPU: on Linux a run says how the machine's CPU
// time was spent while it loaded the target. The load is long enough to
// span many of /proc/stat's 10 ms ticks: 300 requests could end within one
// and read as no busy time at all.
func TestRunReadsTheMachinesCPU(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	srv := httptest.NewServer(BaselineHandler())
	defer srv.Close()
	res, err := Run(t.Context(), "t", Config{URL: srv.URL, Connections: 2, Requests: 5000, PayloadSize: 500, Mix: Mix{New: 100}})
	if err != nil {
		t.Fatal(err)
	}
	m := res.MachineCPU
	if m == nil || m.Busy <= 0 || m.Idle < 0 || m.Steal < 0 || !near(m.Busy+m.Idle+m.Steal, 1) {
		t.Fatalf("machine CPU %+v after %d requests", m, res.Requests)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestSpreadOfRoundsIsWarned: rounds of one target SpreadWarning or more
// apart are named with their range (today's ceiling made 17,994 to 27,777
// req/s in three rounds without steal); closer rounds, or one, are not.
func TestSpreadOfRoundsIsWarned(t *testing.T) {
	t.Parallel()
	rs := func(rates ...float64) []Result {
		var out []Result
		for _, r := range rates {
			out = append(out, Result{PerSecond: r})
		}
		return out
	}
	w := spread("the ceiling", rs(17994, 25512, 27777))
	if !strings.HasPrefix(w, "the ceiling made 17994 to 27777 req/s in its 3 rounds (54% apart)") {
		t.Fatalf("got %q", w)
	}
	for _, c := range [][]Result{rs(15141, 15167, 15848), rs(10000), nil, rs(0, 5000)} {
		if w := spread("x", c); w != "" {
			t.Errorf("%v: warned %q", c, w)
		}
	}
}
