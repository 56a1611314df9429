package transport

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// Code runs once per answered call; for a call that succeeded it must
// cost no allocation (the targets of errors.As used to escape on every
// call).
func TestCodeOfNilAllocatesNothing(t *testing.T) {
	var c codes.Code
	if allocs := testing.AllocsPerRun(100, func() { c = Code(nil) }); allocs != 0 || c != codes.OK {
		t.Errorf("Code(nil) = %v with %v allocations, want OK with 0", c, allocs)
	}
	if c := Code(&BatchError{N: 2, Max: 1}); c != codes.InvalidArgument {
		t.Errorf("Code(BatchError) = %v, want InvalidArgument", c)
	}
}
