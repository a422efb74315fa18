package server

import (
	"errors"
	"testing"
	"time"
)

// meetCloser's Close returns only once the other closer's Close has begun:
// closed one after the other, the first never returns.
type meetCloser struct {
	began, other chan struct{}
	err          error
}

func (c *meetCloser) Close() error {
	close(c.began)
	select {
	case <-c.other:
		return c.err
	case <-time.After(5 * time.Second):
		return errors.New("the other closer was not closed while this one waited")
	}
}

// TestPipelinesCloseTogether: a process's pipelines are closed at once, so
// that its shutdown waits for the slowest of them, not for their sum.
func TestPipelinesCloseTogether(t *testing.T) {
	a := &meetCloser{began: make(chan struct{})}
	b := &meetCloser{began: make(chan struct{}), err: errors.New("b failed")}
	a.other, b.other = b.began, a.began

	errs := closeTogether([]*meetCloser{a, b})
	if len(errs) != 2 {
		t.Fatalf("%d errors for 2 closers", len(errs))
	}
	if errs[0] != nil {
		t.Errorf("first closer: %v", errs[0])
	}
	if errs[1] == nil || errs[1].Error() != "b failed" {
		t.Errorf("second closer: %v, want its own error", errs[1])
	}
}
