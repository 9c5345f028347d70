package queuestore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/transport"
)

// A dispatcher keeping its sagas' state in its own queue: the step that
// starts the reminder commits its record and both timeouts in one write.
// (On the memory broker here; on JetStream, use it on a replicated
// queue.)
func Example() {
	ctx := context.Background()
	b, _ := transport.NewMemory()
	defer b.Close()
	st := queuestore.New(b, "reminders")
	d, err := saga.NewDispatcher(b, st, "reminders", saga.WithSagas(reminderSaga(time.Minute)))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := d.Send(ctx, remind{ID: "r1"}); err != nil {
		fmt.Println(err)
		return
	}
	q, _ := b.Queue(ctx, "reminders")
	ds, err := q.Receive(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	d.Handle(ctx, ds[0])
	inst, err := d.Instance(ctx, "reminder", "r1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, pt := range inst.Timeouts {
		fmt.Println("pending:", pt.Type)
	}
	for key, err := range st.ListKeys(ctx, "reminder.") {
		fmt.Println("record:", key, err)
	}
	c, _ := q.Counts(ctx)
	fmt.Println("scheduled on the queue:", c.Scheduled)
	// Output:
	// pending: queuestore_test.soon
	// pending: queuestore_test.nextHour
	// record: reminder.cjE <nil>
	// scheduled on the queue: 2
}
