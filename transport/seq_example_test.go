package transport_test

import (
	"fmt"

	"github.com/jetsaga/jetsaga/transport"
)

// A sequence number as the jetsaga command shows it: partition, and the
// per-partition sequence, marked "s" for a scheduled message.
func ExampleFormatSeq() {
	fmt.Println(transport.FormatSeq(20))
	fmt.Println(transport.FormatSeq(transport.ScheduledBit | 20))
	fmt.Println(transport.FormatSeq(3<<transport.PartitionShift | 7))
	// Output:
	// 0:20
	// 0:s20
	// 3:7
}
