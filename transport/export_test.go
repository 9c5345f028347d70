package transport

import "time"

// SetAnswerLost makes JetStream writes (Send, Schedule, Cancel, Complete)
// act as if their answer was lost whenever f returns true; the returned
// function undoes it.
func SetAnswerLost(f func() bool) (undo func()) {
	answerLost = f
	return func() { answerLost = nil }
}

// SetSizeStale sets how old a queue's size may be when Send checks
// MaxBytes; the returned function undoes it.
func SetSizeStale(d time.Duration) (undo func()) {
	old := sizeStale
	sizeStale = d
	return func() { sizeStale = old }
}
