package saga

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	recordfmt "github.com/jetsaga/jetsaga/internal/record"
)

// sampleRecord builds a record with every field set, nested ones too (the
// test checks that it does), afresh at each call: the expected value of a
// copy is built independently of the copy.
func sampleRecord() *record {
	return &record{
		JSONData: []byte(`{"n":1}`),
		BinData:  []byte{1, 2, 3},
		Version:  2,
		Timeouts: map[string]timeoutEntry{
			"t1": {Type: "T", At: time.Unix(1, 0).UTC(), Ref: "queue:q:1", Rule: "next business day in UTC",
				Calendar: &calendar.Ref{Name: "c", Version: "1"}, From: recordfmt.InstantOf(time.Unix(0, 1)), ID: "t1-r", Every: time.Second, Occurrence: 2,
				Msg: &envelope{ID: "t1-r", Type: "T", Body: []byte("{}"), ContentType: "application/json",
					CorrelationID: "c", ReplyTo: "rq", SessionID: "s", PartitionKey: "pk", Properties: map[string]string{"k": "v"}}},
			"t2": {Type: "U", At: time.Unix(3, 0).UTC(), Ref: "queue:q:2", Rule: "next business day in UTC",
				Calendar: &calendar.Ref{Name: "c", Version: "2"}, From: recordfmt.InstantOf(time.Unix(0, 2)), ID: "t2-r", Every: time.Minute, Occurrence: 3,
				Msg: &envelope{ID: "t2-r", Type: "U", Body: []byte("{}"), ContentType: "application/json",
					CorrelationID: "c", ReplyTo: "rq", SessionID: "s", PartitionKey: "pk", Properties: map[string]string{"k": "v"}}},
		},
		Inbox:      []string{"a", "b"},
		InboxOlder: []byte("123456789"),
		InboxTimes: []recordfmt.InboxRun{{At: 3, N: 3}},
		Expects:    []string{"M"},
		Outbox: []effect{
			{
				Kind: effectSend, Queue: "q", At: time.Unix(4, 0).UTC(), Token: "tok", Ref: "queue:q:3", Engine: "eng", ID: "id",
				Msg: &envelope{
					ID: "e", Type: "M", Body: []byte("x"), ContentType: "application/json",
					CorrelationID: "c", ReplyTo: "rq", SessionID: "s", PartitionKey: "pk",
					Properties: map[string]string{"k": "v"},
				},
			},
			{Kind: effectCancel, Ref: "queue:q:4"}, // no message
		},
		Originator:   &address{ReplyTo: "r", CorrelationID: "rc"},
		Completed:    true,
		PartitionKey: "tenant-1",
		Index:        map[string][]string{"customer": {"c-1", "c-2"}},
		IndexNew:     map[string][]string{"customer": {"c-2"}},
		Started:      time.Unix(2, 0).UTC(),
		Updated:      time.Unix(5, 0).UTC(),
	}
}

// mutateRecord changes, in place, everything r refers to: the bytes of
// its data, its timeouts, inbox and outbox, every field of an outbox
// entry and of its message, and the originator.
func mutateRecord(r *record) {
	r.JSONData[0] = 'X'
	r.BinData[0] = 9
	r.Version = 3
	t2 := r.Timeouts["t2"]
	t2.Calendar.Version = "changed"
	t2.Msg.Body[0] = 'y'
	t2.Msg.Properties["k"] = "w"
	full := func(typ string, at int64) timeoutEntry {
		return timeoutEntry{Type: typ, At: time.Unix(at, 0), Ref: "changed", Rule: "changed", Calendar: &calendar.Ref{Name: "x", Version: "y"},
			From: recordfmt.InstantOf(time.Unix(at, 1)), ID: "changed", Every: time.Hour, Occurrence: 9, Msg: &envelope{ID: "m", Type: typ, Body: []byte("z"), ContentType: "c",
				CorrelationID: "c", ReplyTo: "r", SessionID: "s", PartitionKey: "pk", Properties: map[string]string{"a": "b"}}}
	}
	r.Timeouts["t1"] = full("changed", 10)
	delete(r.Timeouts, "t2")
	r.Timeouts["t3"] = full("new", 11)
	r.Inbox[0] = "z"
	r.InboxOlder[0] = 'z'
	r.InboxTimes[0].N = 9
	r.Expects[0] = "N"
	e := &r.Outbox[0]
	e.Kind, e.Queue, e.At, e.Token, e.Ref, e.Engine, e.ID = effectPublish, "other", time.Unix(40, 0), "t", "r", "e", "i"
	m := e.Msg
	m.ID, m.Type, m.ContentType, m.CorrelationID, m.ReplyTo, m.SessionID, m.PartitionKey = "1", "2", "3", "4", "5", "6", "7"
	m.Body[0] = 'y'
	m.Properties["k"] = "w"
	m.Properties["k2"] = "new"
	r.Outbox[1].Ref = "changed"
	r.Originator.ReplyTo, r.Originator.CorrelationID = "s", "sc"
	r.PartitionKey = "tenant-2"
	r.Index["customer"][0] = "c-9"
	r.IndexNew["customer"][0] = "c-9"
}

// unset lists the fields, at any depth, that v leaves zero, but for
// record.FromCache: it marks the one record the cache served to a step,
// not content, and a clone leaves it false (see
// TestCloneIsNotServedFromCache).
func unset(v reflect.Value, path string) []string {
	if path == "record.FromCache" {
		return nil
	}
	if v.IsZero() {
		return []string{path}
	}
	var out []string
	switch v.Kind() {
	case reflect.Pointer:
		out = unset(v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			break
		}
		for i := range v.NumField() {
			out = append(out, unset(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
	case reflect.Slice:
		if v.Len() > 0 && v.Type().Elem().Kind() != reflect.Uint8 {
			out = unset(v.Index(0), path+"[0]") // the first is the full one
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			out = append(out, unset(v.MapIndex(k), path+"["+k.String()+"]")...)
		}
	}
	return out
}

// aliases lists the places where a and b, of one type, share memory: the
// same backing array, map or pointee.
func aliases(a, b reflect.Value, path string) []string {
	var out []string
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		out = append(out, aliases(a.Elem(), b.Elem(), path)...)
	case reflect.Struct:
		if a.Type() == reflect.TypeFor[time.Time]() { // its *Location is shared by design
			return nil
		}
		for i := range a.NumField() {
			out = append(out, aliases(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
		}
	case reflect.Slice:
		if a.Cap() > 0 && b.Cap() > 0 && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for i := range min(a.Len(), b.Len()) {
			out = append(out, aliases(a.Index(i), b.Index(i), path+"["+strconv.Itoa(i)+"]")...)
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			out = append(out, path)
		}
		for _, k := range a.MapKeys() {
			if bv := b.MapIndex(k); bv.IsValid() {
				out = append(out, aliases(a.MapIndex(k), bv, path+"["+k.String()+"]")...)
			}
		}
	}
	return out
}

// A cached record is shared by every step that starts from it: the copy
// each step gets must share nothing the step changes in place.
func TestRecordCloneSharesNothing(t *testing.T) {
	if u := unset(reflect.ValueOf(sampleRecord()), "record"); len(u) > 0 {
		t.Fatalf("sampleRecord leaves %v zero: set them, and change them in mutateRecord", u)
	}
	orig := sampleRecord()
	c := orig.Clone()
	if !reflect.DeepEqual(c, sampleRecord()) {
		t.Fatalf("clone differs:\n%+v\nwant\n%+v", c, sampleRecord())
	}
	if a := aliases(reflect.ValueOf(orig), reflect.ValueOf(c), "record"); len(a) > 0 {
		t.Errorf("the clone shares memory with the original at %v", a)
	}
	mutate := sampleRecord()
	mutateRecord(mutate)
	if u := unset(reflect.ValueOf(mutate), "record"); len(u) > 0 || reflect.DeepEqual(mutate, sampleRecord()) {
		t.Fatalf("mutateRecord changes nothing, or zeroes %v", u)
	}

	// Changing the clone leaves the original as it was...
	mutateRecord(c)
	if !reflect.DeepEqual(orig, sampleRecord()) {
		t.Errorf("changing the clone changed the original:\n%+v\nwant\n%+v", orig, sampleRecord())
	}
	// ...and changing the original leaves the clone.
	orig = sampleRecord()
	c = orig.Clone()
	mutateRecord(orig)
	if !reflect.DeepEqual(c, sampleRecord()) {
		t.Errorf("changing the original changed the clone:\n%+v\nwant\n%+v", c, sampleRecord())
	}
	// A record without the optional parts clones to one without them.
	if c := (&record{Started: time.Unix(2, 0).UTC()}).Clone(); !reflect.DeepEqual(c, &record{Started: time.Unix(2, 0).UTC()}) {
		t.Errorf("clone of a bare record: %+v", c)
	}

	// The cache keeps a copy and hands out copies.
	rc := newRecordCache(2)
	orig = sampleRecord()
	rc.set("k", orig, 7)
	mutateRecord(orig)
	got, rev, ok := rc.get("k")
	if !ok || rev != 7 || !reflect.DeepEqual(got, sampleRecord()) {
		t.Fatalf("get after the original changed: %v %d %+v", ok, rev, got)
	}
	mutateRecord(got)
	if again, _, _ := rc.get("k"); !reflect.DeepEqual(again, sampleRecord()) {
		t.Fatalf("a step's change reached the cached record: %+v", again)
	}
	rc.set("k2", orig, 8)
	rc.set("k3", orig, 9)
	if n := rc.len(); n != 2 {
		t.Fatalf("cache holds %d records, bound 2", n)
	}
}

// A clone is a copy of the content: the mark of a record served by the
// cache stays with that record, so that its commit alone reports a hit.
func TestCloneIsNotServedFromCache(t *testing.T) {
	r := sampleRecord()
	r.FromCache = true
	if r.Clone().FromCache {
		t.Fatal("a clone of a record served by the cache is marked as served")
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
