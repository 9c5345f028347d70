package record

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A Timeout must fit in 128 bytes, the largest element a Go map keeps
// inline: above it every element of Record.Timeouts is allocated on its
// own, and each clone of a record (two a step with the record cache)
// allocates once per pending timeout — 75 more allocations a step for an
// instance with 50 pending, when the recurring fields first took it to
// 152 bytes. Put a new field behind a pointer, or shrink another.
func TestTimeoutSize(t *testing.T) {
	if n := unsafe.Sizeof(Timeout{}); n > 128 {
		t.Errorf("record.Timeout is %d bytes, more than 128", n)
	}
}

// Instant reads what time.Time wrote (records before it), writes the
// same format, and leaves a zero From out.
func TestInstantJSON(t *testing.T) {
	var tm Timeout
	if err := json.Unmarshal([]byte(`{"type":"T","at":"2030-01-07T08:00:00Z","from":"2030-01-07T09:00:00.5+01:00"}`), &tm); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2030, 1, 7, 8, 0, 0, 5e8, time.UTC)
	if !tm.From.Time().Equal(want) || tm.From.Time().Location() != time.UTC {
		t.Errorf("From = %v, want %v in UTC", tm.From.Time(), want)
	}
	b, err := json.Marshal(tm)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"from":"2030-01-07T08:00:00.5Z"`) {
		t.Errorf("encoded %s, want from as RFC 3339", b)
	}
	b, _ = json.Marshal(Timeout{Type: "T"})
	if strings.Contains(string(b), "from") {
		t.Errorf("a zero From is written: %s", b)
	}
	if InstantOf(time.Time{}) != 0 || !Instant(0).Time().IsZero() {
		t.Error("the zero time is not the zero Instant")
	}
}
