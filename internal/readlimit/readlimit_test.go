package readlimit_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/orderly-dev/orderly/internal/readlimit"
)

// endless gives 'x' without end, counting what it gave.
type endless struct{ given int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.given += int64(len(p))
	return len(p), nil
}

func TestReadAll(t *testing.T) {
	t.Parallel()
	b, err := readlimit.ReadAll(strings.NewReader("12345"), 5)
	if err != nil || string(b) != "12345" {
		t.Fatalf("5 bytes with a bound of 5: %q, %v", b, err)
	}
	src := &endless{}
	b, err = readlimit.ReadAll(src, 5)
	var tl *readlimit.TooLargeError
	if !errors.As(err, &tl) || tl.Max != 5 || !errors.Is(err, readlimit.ErrTooLarge) || err.Error() != "more than 5 bytes" || b != nil {
		t.Fatalf("an endless source: %q, %v", b, err)
	}
	if src.given != 6 {
		t.Fatalf("read %d bytes of an endless source for a bound of 5", src.given)
	}
	if _, err := readlimit.ReadAll(io.MultiReader(strings.NewReader("ab"), errReader{}), 5); !errors.Is(err, errBroken) || errors.Is(err, readlimit.ErrTooLarge) {
		t.Fatalf("a broken source: %v", err)
	}
}

var errBroken = errors.New("broken")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }
