package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netLab is a small network of test hosts: one network namespace per
// node, each with an address on a bridge in a namespace of its own (the
// switch), all made by the test and deleted at its cleanup, with every
// nftables table in them. Nothing is added to the test's own namespace:
// the test reaches a node by opening its sockets inside that node's
// namespace (dial), so a cut on the switch separates the nodes from each
// other while the clients still reach all of them.
type netLab struct {
	t      testing.TB
	prefix string   // of the namespace names
	hub    string   // namespace holding the bridge
	ns     []string // one per node
	ips    []string // each node's address, in its namespace
}

// labSubnet is the nodes' subnet. It exists only inside the lab's
// namespaces, so it cannot meet any other network of the machine.
const labSubnet = "10.251.0."

// newNetLab makes n hosts, or skips the test when it cannot (not root, no
// ip or nft, namespaces refused).
func newNetLab(t testing.TB, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces and nftables rules")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2, nftables): %v", tool, err)
		}
	}
	l := &netLab{t: t, prefix: fmt.Sprintf("slh%d", os.Getpid())}
	l.hub = l.prefix + "-sw"
	if out, err := exec.Command("ip", "netns", "add", l.hub).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { l.delNetns(l.hub) })
	l.run("ip", "-n", l.hub, "link", "set", "lo", "up")
	l.run("ip", "-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", l.hub, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("%s-n%d", l.prefix, i+1)
		ip := fmt.Sprintf("%s%d", labSubnet, i+1)
		l.run("ip", "netns", "add", ns)
		t.Cleanup(func() { l.delNetns(ns) })
		port := fmt.Sprintf("p%d", i+1)
		l.run("ip", "-n", l.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.run("ip", "-n", l.hub, "link", "set", port, "master", "br0", "up")
		l.run("ip", "-n", ns, "link", "set", "lo", "up")
		l.run("ip", "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
		l.run("ip", "-n", ns, "link", "set", "eth0", "up")
		l.ns, l.ips = append(l.ns, ns), append(l.ips, ip)
	}
	return l
}

func (l *netLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// delNetns deletes a namespace with its interfaces and nftables tables.
func (l *netLab) delNetns(ns string) {
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		l.t.Errorf("cleanup: ip netns del %s: %v: %s", ns, err, out)
	}
}

// cutTable is the nftables table of cut, on the switch.
const cutTable = "shardlimiter_cut"

// cut drops, on the switch, every IP packet between node i and the other
// nodes, both ways: neither side gets an error, its packets vanish, as in a
// real partition. ARP still passes.
func (l *netLab) cut(i int) {
	l.t.Helper()
	var others []string
	for j, ip := range l.ips {
		if j != i {
			others = append(others, ip)
		}
	}
	set := "{ " + strings.Join(others, ", ") + " }"
	rules := fmt.Sprintf(`table bridge %s {
	chain cut {
		type filter hook forward priority 0; policy accept;
		ip saddr %s ip daddr %s drop
		ip saddr %s ip daddr %s drop
	}
}
`, cutTable, l.ips[i], set, set, l.ips[i])
	cmd := exec.Command("ip", "netns", "exec", l.hub, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft cut: %v: %s", err, out)
	}
}

// heal removes the cut.
func (l *netLab) heal() {
	l.t.Helper()
	l.run("ip", "netns", "exec", l.hub, "nft", "delete", "table", "bridge", cutTable)
}

// inNetns runs f on a thread moved into namespace ns; the sockets f
// opens stay in ns. The thread moves back before it is released, or dies
// with its goroutine if it cannot.
func inNetns(ns string, f func()) error {
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
		return true, fmt.Errorf("setns %s: %w", ns, err)
	}
	f()
	return unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil, nil
}

// dialIn opens a TCP connection to addr from inside namespace ns.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	var derr error
	if err := inNetns(ns, func() { c, derr = new(net.Dialer).DialContext(ctx, "tcp", addr) }); err != nil {
		return nil, err
	}
	return c, derr
}

// freePortIn returns a TCP port free on ip in namespace ns. The lab's
// namespaces hold only the test's nodes, so it is free for UDP too.
func freePortIn(t testing.TB, ns, ip string) int {
	t.Helper()
	var port int
	var lerr error
	err := inNetns(ns, func() {
		var l net.Listener
		if l, lerr = net.Listen("tcp", ip+":0"); lerr == nil {
			port = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
	})
	if err = errors.Join(err, lerr); err != nil {
		t.Fatalf("free port in %s: %v", ns, err)
	}
	return port
}

// httpClient is an HTTP client whose connections are opened in ns.
func httpClient(ns string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialIn(ctx, ns, addr) },
	}}
}
