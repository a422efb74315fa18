package admin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzSetReplicas: a consumer entry of a backup comes back with its
// configuration's replica count set and every other value as it was, numbers
// of any size included (a float64 would round a sequence above 2^53); what
// is not such an entry is an error, never a panic.
func FuzzSetReplicas(f *testing.F) {
	f.Add([]byte(`{"config":{"durable_name":"processor","num_replicas":3,"ack_wait":30000000000},"state":{"delivered":{"consumer_seq":18446744073709551615,"stream_seq":9007199254740993}}}`), 1)
	f.Add([]byte(`{"config":{}}`), 3)
	f.Add([]byte(`{"state":{}}`), 1)
	f.Add([]byte(`[]`), 1)
	f.Fuzz(func(t *testing.T, data []byte, replicas int) {
		out, err := setReplicas(data, replicas)
		if err != nil {
			return
		}
		before, after := decodeNumbers(t, data), decodeNumbers(t, out)
		cfg, ok := after["config"].(map[string]any)
		if !ok || cfg["num_replicas"] != json.Number(fmtInt(replicas)) {
			t.Fatalf("%s: num_replicas not %d in %s", data, replicas, out)
		}
		delete(cfg, "num_replicas")
		delete(before["config"].(map[string]any), "num_replicas")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("%s became %s", data, out)
		}
	})
}

func decodeNumbers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func fmtInt(n int) string { b, _ := json.Marshal(n); return string(b) }
