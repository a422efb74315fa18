package bench

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// StealWarning is the share of the machine's CPU time taken by the
// hypervisor (steal) from which a run's rates are flagged: a guest that got
// half its cores measures the host's other tenants as much as the code.
const StealWarning = 0.10

// MachineCPU is how the machine's CPU time (all CPUs) was spent during a
// run, as shares of it, from /proc/stat (Linux). Busy is the work of every
// process on the machine, the load generator's included; Steal is the time
// the CPUs wanted to run and the hypervisor gave to other guests.
type MachineCPU struct {
	Busy  float64 `json:"busy"`
	Idle  float64 `json:"idle"`
	Steal float64 `json:"steal"`
}

// cpuTimes reads the machine's CPU times; ok is false where there is no
// /proc/stat.
func cpuTimes() (procfs.CPUStat, bool) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procfs.CPUStat{}, false
	}
	st, err := fs.Stat()
	if err != nil {
		return procfs.CPUStat{}, false
	}
	return st.CPUTotal, true
}

// measureMachineCPU starts measuring the machine's CPU time; the function it
// returns says how it was spent since (nil where the OS does not say).
func measureMachineCPU() func() *MachineCPU {
	m0, ok0 := cpuTimes()
	return func() *MachineCPU {
		if m1, ok1 := cpuTimes(); ok0 && ok1 {
			return machineCPU(m0, m1)
		}
		return nil
	}
}

// machineCPU is how the CPU time between a and b was spent; nil when none
// passed. Guest time is counted in user time already.
func machineCPU(a, b procfs.CPUStat) *MachineCPU {
	busy := (b.User - a.User) + (b.Nice - a.Nice) + (b.System - a.System) + (b.IRQ - a.IRQ) + (b.SoftIRQ - a.SoftIRQ)
	idle := (b.Idle - a.Idle) + (b.Iowait - a.Iowait)
	steal := b.Steal - a.Steal
	total := busy + idle + steal
	if total <= 0 || busy < 0 || idle < 0 || steal < 0 {
		return nil
	}
	return &MachineCPU{Busy: busy / total, Idle: idle / total, Steal: steal / total}
}

// String is the shares in percent.
func (m *MachineCPU) String() string {
	if m == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f/%.0f/%.0f", 100*m.Busy, 100*m.Idle, 100*m.Steal)
}
