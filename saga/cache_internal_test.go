package saga

import (
	"reflect"
	"testing"
	"time"
)

// A cached record is shared by every step that starts from it: the copy
// each step gets must share nothing the step changes in place.
func TestRecordCloneSharesNothing(t *testing.T) {
	orig := &record{
		JSONData:   []byte(`{"n":1}`),
		Timeouts:   map[string]timeoutEntry{"t1": {Type: "T", At: time.Unix(1, 0), Ref: "queue:q:1"}},
		Inbox:      []string{"a", "b"},
		Outbox:     []effect{{Kind: effectSend, Queue: "q", Msg: &envelope{ID: "e", Body: []byte("x"), Properties: map[string]string{"k": "v"}}}},
		Originator: &address{ReplyTo: "r"},
		Started:    time.Unix(2, 0),
	}
	want := orig.clone()
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("clone differs:\n%+v\n%+v", orig, want)
	}
	c := orig.clone()
	c.JSONData[0] = 'X'
	c.Timeouts["t2"] = timeoutEntry{}
	delete(c.Timeouts, "t1")
	c.Inbox[0] = "z"
	c.Outbox[0].Msg.Body[0] = 'y'
	c.Outbox[0].Msg.Properties["k"] = "w"
	c.Outbox[0].Queue = "other"
	c.Originator.ReplyTo = "s"
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("changing the clone changed the original:\n%+v\nwant\n%+v", orig, want)
	}
	c.Timeouts, c.Inbox, c.Outbox = nil, nil, nil
	if !reflect.DeepEqual(orig, want) {
		t.Fatal("changing the clone changed the original")
	}

	// The cache hands out copies too.
	rc := newRecordCache(2)
	rc.set("k", orig, 7)
	got, rev, ok := rc.get("k")
	if !ok || rev != 7 || !reflect.DeepEqual(got, want) {
		t.Fatalf("get: %v %d %+v", ok, rev, got)
	}
	got.Inbox[1] = "changed"
	again, _, _ := rc.get("k")
	if again.Inbox[1] != "b" {
		t.Fatal("a step's change reached the cached record")
	}
	rc.set("k2", orig, 8)
	rc.set("k3", orig, 9)
	if n := rc.len(); n != 2 {
		t.Fatalf("cache holds %d records, bound 2", n)
	}
}

// The hit rate starts optimistic, turns when most steps find the cache
// stale, and turns back when they find it fresh again.
func TestHitRateAdapts(t *testing.T) {
	var h hitRate
	if !h.likely() {
		t.Fatal("a new dispatcher does not try its cache")
	}
	for range 64 {
		h.note(false)
	}
	if h.likely() {
		t.Fatal("still likely after 64 misses in a row")
	}
	for i := range 256 {
		h.note(i%3 == 0) // one dispatcher of three
	}
	if h.likely() {
		t.Fatal("likely at a third of hits")
	}
	for range 256 {
		h.note(true)
	}
	if !h.likely() {
		t.Fatal("not likely again after 256 hits in a row")
	}
}
