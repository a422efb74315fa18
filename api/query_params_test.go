package api

import (
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// FuzzUnknownParams: unknownParams reads a query string as url.ParseQuery
// does: it fails where ParseQuery fails, and otherwise names the same
// parameters, sorted and each once.
func FuzzUnknownParams(f *testing.F) {
	for _, s := range []string{"wait=1s", "wiat=1&b=2&a=3&a=4", "x", "&&a=&=b", "wait=1;x=2", "%zz=1", "a=%zz", "a+b=1&a%20b=2",
		"%E2%80%AE=1", strings.Repeat("p=&", 10001), strings.Repeat("&", 9999)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		known := []string{"wait"}
		unknown, ok := unknownParams(raw, known)
		q, err := url.ParseQuery(raw)
		if ok != (err == nil) {
			t.Fatalf("%q: ok %v, ParseQuery's error %v", raw, ok, err)
		}
		if err != nil {
			return
		}
		var want []string
		for name := range q {
			if !slices.Contains(known, name) {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		if !slices.Equal(unknown, want) {
			t.Fatalf("%q: %q, want %q", raw, unknown, want)
		}
	})
}

// TestManyQueryParametersAllocateLittle: a query string of thousands of
// unknown parameters (up to the 32 KiB a request's head may hold) costs at
// most 4 times its size to read: 72 KiB for 30 KiB, where url.ParseQuery's
// map of them and their values took 1,068 KiB (35 times). (Not parallel: it reads the
// process's allocations.)
func TestManyQueryParametersAllocateLittle(t *testing.T) {
	var many strings.Builder
	for i := 0; many.Len() < 30<<10; i++ {
		fmt.Fprintf(&many, "p%d=&", i)
	}
	raw := many.String()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 10
	for range runs {
		if unknown, ok := unknownParams(raw, []string{"wait"}); !ok || len(unknown) < 4000 {
			t.Fatalf("%d unknown parameters, ok %v", len(unknown), ok)
		}
	}
	runtime.ReadMemStats(&after)
	if perQuery := (after.TotalAlloc - before.TotalAlloc) / runs; perQuery > 4*uint64(len(raw)) {
		t.Errorf("%d KiB allocated for a query string of %d KiB, want at most 4 times its size", perQuery>>10, len(raw)>>10)
	}
}
