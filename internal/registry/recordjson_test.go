package registry

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestRecordJSON: the hand-written decoder reads what encoding/json reads,
// from what encoding/json writes of records of every kind of string, and
// from documents it did not write (other fields, spacing, escapes).
func TestRecordJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "web@1.service", "launched", "m00042", "0123456789abcdef0123456789abcdef", "[Service]\nExecStart=/bin/true\n",
		`"quoted"`, `back\slash`, "<html>&", "\u2028\u2029", "é", "\x01\x7f", "\xff\xfe", "tab\tcr\r"}
	pick := func() string {
		s := ""
		for range rng.IntN(3) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for range 5000 {
		r := Record{Name: pick(), File: pick(), Content: pick(), DesiredState: pick(), Machine: pick()}
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if hand := appendRecord(nil, r); string(hand) != string(got) {
			t.Fatalf("appendRecord(%+v) = %s, encoding/json: %s", r, hand, got)
		}
		var back, jback Record
		if err := unmarshalRecord(got, &back); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &jback); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, jback) {
			t.Fatalf("unmarshalRecord(%s) = %+v, encoding/json: %+v", got, back, jback)
		}
	}
	for _, doc := range []string{`{}`, `{"name":"a"}`, `{ "name": "a" }`, `{"Name":"a"}`, `{"name":"a","extra":1}`, `{"name":"a\u0041"}`,
		`{"desiredState":"x","desiredState":"y"}`, `{"name":1}`, `{"name":"a",}`, `{"name":"a"}x`, `[]`, `{"name":"é"}`} {
		var got, want Record
		gerr, werr := unmarshalRecord([]byte(doc), &got), json.Unmarshal([]byte(doc), &want)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: unmarshalRecord = %+v, %v; encoding/json: %+v, %v", doc, got, gerr, want, werr)
		}
	}
}

func BenchmarkRecordJSON(b *testing.B) {
	r := Record{Content: "0123456789abcdef0123456789abcdef", DesiredState: "launched", Machine: "m00042"}
	val, _ := json.Marshal(r)
	r.Name = "bench@0000042.service"
	b.Run("unmarshal/json", func(b *testing.B) {
		for b.Loop() {
			var x Record
			json.Unmarshal(val, &x)
		}
	})
	b.Run("unmarshal/hand", func(b *testing.B) {
		for b.Loop() {
			var x Record
			unmarshalRecord(val, &x)
		}
	})
	// PutUnit's encoding, as it was (encoding/json, then a string) and is.
	b.Run("marshal/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			x := r
			x.Name = ""
			v, _ := json.Marshal(x)
			_ = Op{Key: Keys{}.Unit(r.Name), Value: string(v)}
		}
	})
	b.Run("marshal/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			PutUnit(Keys{}, r)
		}
	})
}
