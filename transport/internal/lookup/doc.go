// Package lookup shares cancel record lookups between the receivers of one
// queue partition.
//
// Every pull that brings activations asks the schedule stream whether a
// cancel record landed for any of them: a direct get that holds the
// stream's store lock, which the scheduler's activations wait for. When
// receivers keep up with a burst, each pull brings few activations, and a
// lookup per pull slowed the scheduler enough to tip nats-server into
// reloading the stream's last block after every activation (BENCHMARKS.md,
// "Two modes"). So the receivers of one partition in one broker share
// their lookups through a Group: while one is under way, the lookups asked
// meanwhile wait, and go out together as the next one, up to MaxFilters
// subjects each. A lookup answers for every subject it was asked, so
// sharing one changes nothing a receiver learns, and a failed one fails
// for each receiver that shared it; a receiver waits for at most the
// lookup under way and its own.
package lookup
