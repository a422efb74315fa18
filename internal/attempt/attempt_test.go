package attempt

import (
	"testing"
	"time"
)

func TestTimeout(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 3 * time.Second, 4: 3 * time.Second, 100: 3 * time.Second} {
		if got := Timeout(n); got != want {
			t.Errorf("Timeout(%d) = %s, want %s", n, got, want)
		}
	}
}
