package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run runs f on a thread moved into namespace ns; the sockets f opens
// stay in ns. The thread moves back before it is released, or dies with
// its goroutine if it cannot.
func Run(ns string, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := onThreadIn(ns, f)
		if back {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// onThreadIn runs f in ns on the locked current thread; back reports
// whether the thread is in its own namespace again.
func onThreadIn(ns string, f func()) (back bool, err error) {
	self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	if err != nil {
		return true, err
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("netns: setns %s: %w", ns, err)
	}
	f()
	return unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil, nil
}
