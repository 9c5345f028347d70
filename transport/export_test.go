package transport

import "time"

// SetAnswerLost makes JetStream writes (Send, Schedule, Cancel, Complete)
// act as if their answer was lost whenever f returns true; the returned
// function undoes it.
func SetAnswerLost(f func() bool) (undo func()) {
	answerLost = f
	return func() { answerLost = nil }
}

// SetAnswerErr makes JetStream writes that took effect return the error
// f returns instead, when it is not nil; the returned function undoes it.
func SetAnswerErr(f func() error) (undo func()) {
	answerErr = f
	return func() { answerErr = nil }
}

// SetSizeStale sets how old a queue's size may be when Send checks
// MaxBytes; the returned function undoes it.
func SetSizeStale(d time.Duration) (undo func()) {
	old := sizeStale
	sizeStale = d
	return func() { sizeStale = old }
}

// SetHousekeepCycled has f called after each cycle of every broker's
// housekeeping loop, for each queue partition it looks after, with
// the broker's id (one per broker) and whether it holds the partition's
// lease; the returned function undoes it.
func SetHousekeepCycled(f func(broker, queue string, part int, held bool)) (undo func()) {
	housekeepCycled.Store(&f)
	return func() { housekeepCycled.Store(nil) }
}
