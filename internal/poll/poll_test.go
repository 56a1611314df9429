package poll

import (
	"fmt"
	"testing"
	"time"
)

type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestUntilReturnsOnceTrue(t *testing.T) {
	n := 0
	var f fakeTB
	Until(&f, time.Second, func() bool { n++; return n == 3 }, "n reaches 3")
	if f.failed != "" || n != 3 {
		t.Fatalf("Until: failed %q after %d calls, want success after 3", f.failed, n)
	}
}

func TestUntilFailsAfterTimeout(t *testing.T) {
	var f fakeTB
	Until(&f, 20*time.Millisecond, func() bool { return false }, "never %s", "true")
	if f.failed == "" {
		t.Fatal("Until: a condition that never holds did not fail the test")
	}
	if want := "never true"; len(f.failed) < len(want) || f.failed[len(f.failed)-len(want):] != want {
		t.Fatalf("Until failure = %q, want it to end with %q", f.failed, want)
	}
}
