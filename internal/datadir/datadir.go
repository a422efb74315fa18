// Package datadir keeps a data directory to one process: two nats-servers on
// one JetStream store corrupt it, and two orderly processes on one store
// decide one key twice. Lock takes an exclusive advisory lock
// (flock(2), gofrs/flock) on <dir>/orderly.lock and writes who holds it
// there, so that a second process can name the holder. The kernel drops the
// lock when its holder dies, kill -9 included: a stale lock file never keeps
// a restart out.
//
// It imports nothing of orderly.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// LockFile is the name of the lock file in a data directory.
const LockFile = "orderly.lock"

// ErrInUse says that another process holds the data directory.
var ErrInUse = errors.New("the data directory is in use by another process; stop it, or give this one another --data-dir")

// Holder is what the lock file says about the process that holds it.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Started time.Time `json:"started"`
}

func (h Holder) String() string {
	return fmt.Sprintf("pid %d on %s since %s", h.PID, h.Host, h.Started.Format(time.RFC3339))
}

// Lock is a held data directory.
type Lock struct {
	f *flock.Flock
}

// Acquire locks dir (creating it) for this process, or fails at once with
// ErrInUse naming the holder.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s (--data-dir): %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o644))
	ok, err := f.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		holder := "a process that has not said who it is yet"
		var h Holder
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &h) == nil && h.PID != 0 {
			holder = "orderly " + h.String()
		}
		return nil, fmt.Errorf("%s is locked by %s (%s): %w", dir, holder, path, ErrInUse)
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(Holder{PID: os.Getpid(), Host: host, Started: time.Now().UTC().Truncate(time.Second)})
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release gives the directory up. The file stays: removing it would let a
// third process lock a new file while a second still waits on the old one.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}
