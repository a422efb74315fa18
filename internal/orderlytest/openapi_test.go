package orderlytest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestResponseCheckSeesEveryResponse: with a check on, Do and TryDo pass it
// each response with its body still readable, set Violation to what it
// found (naming the request), and Violations keeps each one; with the
// check off, nothing is checked.
func TestResponseCheckSeesEveryResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(map[string]int{"/good": 200, "/bad": 418}[r.URL.Path])
		_, _ = w.Write([]byte("body of " + r.URL.Path))
	}))
	defer srv.Close()
	var seen []string
	CheckResponses(func(req *http.Request, resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		seen = append(seen, req.Method+" "+req.URL.Path+": "+string(b))
		if resp.StatusCode == 418 {
			return errors.New("a teapot")
		}
		return nil
	})
	defer CheckResponses(nil)
	before := len(Violations())

	if r := Do(t, "GET", srv.URL+"/good", nil); r.Violation != nil || string(r.Body) != "body of /good" {
		t.Errorf("GET /good: violation %v, body %q", r.Violation, r.Body)
	}
	r, err := TryDo("POST", srv.URL+"/bad", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Violation == nil || !strings.Contains(r.Violation.Error(), "POST "+srv.URL+"/bad -> 418: a teapot") {
		t.Errorf("POST /bad: violation %v", r.Violation)
	}
	if string(r.Body) != "body of /bad" {
		t.Errorf("POST /bad: body %q after the check read it", r.Body)
	}
	if got := Violations()[before:]; len(got) != 1 || got[0] != r.Violation {
		t.Errorf("Violations() grew by %v, want the one of POST /bad", got)
	}
	want := []string{"GET /good: body of /good", "POST /bad: body of /bad"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("the check saw %q, want %q", seen, want)
	}

	CheckResponses(nil)
	if _, err := TryDo("GET", srv.URL+"/bad", nil); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || len(Violations()) != before+1 {
		t.Errorf("with the check off it saw %d responses, %d violations; want 2 and %d", len(seen), len(Violations()), before+1)
	}
}
