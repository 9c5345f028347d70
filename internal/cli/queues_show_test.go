package cli

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// queues show counts what waits per PartitionKey, active and scheduled,
// biggest first, from a browse it bounds and reports.
func TestQueuesShowTopKeys(t *testing.T) {
	w := startWorkload(t, nil, false)
	ctx := context.Background()
	q, err := w.broker.OpenQueue(ctx, transport.QueueConfig{Name: "tenants", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	send := func(key string, n int, at time.Time) {
		for i := range n {
			m := &transport.Message{Body: []byte("x"), PartitionKey: key, MessageID: fmt.Sprintf("%s-%v-%d", key, at.IsZero(), i)}
			if at.IsZero() {
				_, err = q.Send(ctx, m)
			} else {
				_, err = q.Schedule(ctx, m, at)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	later := time.Now().Add(time.Hour)
	send("tenant-a", 5, later)
	send("tenant-a", 2, time.Time{})
	send("tenant-b", 3, time.Time{})
	send("tenant-c", 1, later)
	send("", 4, later)
	testutil.AwaitTrue(t, 10*time.Second, "15 messages stored", func() bool {
		c, err := q.Counts(ctx)
		return err == nil && c.Active+c.Scheduled == 15
	})

	v := jsonOf[QueueShow](w, 0, "queues", "show", "tenants")
	want := []KeyWork{{Key: "tenant-a", Active: 2, Scheduled: 5}, {Key: "tenant-b", Active: 3}, {Key: "tenant-c", Scheduled: 1}}
	if v.Read != 15 || !v.Complete || v.Keys != 3 || v.WithoutKey != 4 || !slices.Equal(v.TopKeys, want) ||
		v.Active != 5 || v.Scheduled != 10 || v.Partitions != 4 {
		t.Errorf("queues show tenants: %+v\nwant 15 read (all), 3 keys, 4 without, top %+v, 5 active, 10 scheduled, 4 partitions", v, want)
	}
	// A bounded browse says it read only part.
	if v := jsonOf[QueueShow](w, 0, "queues", "show", "tenants", "--max", "6"); v.Read != 6 || v.Complete {
		t.Errorf("--max 6: read %d, complete %v; want 6, not complete", v.Read, v.Complete)
	}
	r := w.run("queues", "show", "tenants")
	if r.code != 0 || !strings.Contains(r.stdout, "read 15 of the queue's messages (all of them): 3 distinct keys, 4 without a key") ||
		!strings.Contains(r.stdout, "tenant-a") {
		t.Errorf("queues show tenants: %+v", r)
	}
	w.must(ExitNotFound, "queues", "show", "nope")

	// The console's queue page shows the same top keys on its "all" tab.
	srv := w.console("", false)
	code, body := get(t, client(t), srv.URL+"/queues/tenants")
	rows := regexp.MustCompile(`<tr class="key"><td class="mono">([^<]*)</td><td class="n">(\d+)</td><td class="n">(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	var page []KeyWork
	for _, r := range rows {
		a, _ := strconv.Atoi(r[2])
		s, _ := strconv.Atoi(r[3])
		page = append(page, KeyWork{Key: r[1], Active: a, Scheduled: s})
	}
	if code != 200 || !slices.Equal(page, want) || !strings.Contains(body, "among the 15 messages read; 4 without a key") {
		t.Errorf("console queue page: %d, keys %+v, want %+v\n%s", code, page, want, body)
	}
	if _, body := get(t, client(t), srv.URL+"/queues/tenants?state=scheduled"); strings.Contains(body, `id="keys"`) {
		t.Error("the scheduled tab shows the keys table; only the all tab should")
	}
}
