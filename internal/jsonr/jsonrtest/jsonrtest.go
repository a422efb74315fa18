// Package jsonrtest checks a one-pass reader of package jsonr against
// go-json, for the readers' tests and fuzz tests.
package jsonrtest

import (
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"
)

// Agrees fails t when read takes data (ok true) and go-json refuses it or
// decodes it to something else. It reports whether read took data.
func Agrees[T any](t testing.TB, data []byte, read func([]byte) (T, bool)) (took bool) {
	t.Helper()
	got, ok := read(data)
	if !ok {
		return false
	}
	var want T
	if err := gojson.Unmarshal(data, &want); err != nil {
		t.Fatalf("read %s, which go-json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s\nread    %#v\ngo-json %#v", data, got, want)
	}
	return true
}
