package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/netns"
)

// netLab is a small network of test hosts (internal/netns): one network
// namespace per node, each with an address on a bridge in a namespace of
// its own (the switch), all made by the test and deleted at its cleanup,
// with every nftables table in them. Nothing is added to the test's own
// namespace: the test reaches a node by opening its sockets inside that
// node's namespace (dialIn), so a cut on the switch separates the nodes
// from each other while the clients still reach all of them.
type netLab struct {
	t   testing.TB
	lab *netns.Lab
	ns  []string // one per node
	ips []string // each node's address, in its namespace
}

// newNetLab makes n hosts, or skips the test when it cannot (not root, no
// ip or nft, namespaces refused).
func newNetLab(t testing.TB, n int) *netLab {
	t.Helper()
	if err := netns.Usable(); err != nil {
		t.Skip(err)
	}
	lab, err := netns.New(fmt.Sprintf("slh%d", os.Getpid()), n)
	if err != nil {
		t.Skipf("cannot make the network namespaces here: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l := &netLab{t: t, lab: lab}
	for i := range n {
		l.ns, l.ips = append(l.ns, lab.NS(i)), append(l.ips, lab.IP(i))
	}
	return l
}

// cutTable is the nftables table of cut, on the switch.
const cutTable = "shardlimiter_cut"

// cut drops, on the switch, every IP packet between node i and the other
// nodes, both ways: neither side gets an error, its packets vanish, as in a
// real partition. ARP still passes.
func (l *netLab) cut(i int) {
	l.t.Helper()
	var others []int
	for j := range l.ips {
		if j != i {
			others = append(others, j)
		}
	}
	if err := l.lab.Drop(cutTable, [2][]int{{i}, others}, [2][]int{others, {i}}); err != nil {
		l.t.Fatal(err)
	}
}

// heal removes the cut.
func (l *netLab) heal() {
	l.t.Helper()
	if err := l.lab.Undrop(cutTable); err != nil {
		l.t.Fatal(err)
	}
}

// dialIn opens a TCP connection to addr from inside namespace ns.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	return netns.Dial(ctx, ns, addr)
}

// freePortIn returns a TCP port free on ip in namespace ns. The lab's
// namespaces hold only the test's nodes, so it is free for UDP too.
func freePortIn(t testing.TB, ns, ip string) int {
	t.Helper()
	port, err := netns.FreePort(ns, ip)
	if err != nil {
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
