// Package netns builds small networks of test hosts out of Linux network
// namespaces, and cuts and slows their links: one namespace per node, each
// with a veth pair to a bridge in a namespace of its own (the switch).
// Nothing is added to the caller's own namespace: a caller reaches a node
// by opening its sockets inside that node's namespace (Dial), so a cut on
// the switch separates the nodes from each other while the caller still
// reaches all of them, over each namespace's loopback.
//
// Everything needs root and the ip and nft tools (tc for Netem); New says
// clearly when they are missing. Namespaces, bridge, veths, nftables
// tables and qdiscs all live inside the lab's namespaces, so Close, which
// deletes the namespaces, removes them all.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// Subnet is the nodes' subnet (node i has Subnet + (i+1)). It exists only
// inside the lab's namespaces, so it cannot meet any other network of the
// machine.
const Subnet = "10.251.0."

// ErrUnsupported is returned where network namespaces are not available.
var ErrUnsupported = errors.New("netns: network namespaces need Linux")

// Lab is a switch namespace and one namespace per node.
type Lab struct {
	hub string   // namespace holding the bridge
	ns  []string // one per node
	ips []string // each node's address, in its namespace
}

// Usable reports why a lab cannot be made here, or nil: not root, or a
// tool missing.
func Usable(tools ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root to make network namespaces and nftables rules")
	}
	for _, tool := range append([]string{"ip", "nft"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("netns: needs %s: %w", tool, err)
		}
	}
	return nil
}

// New makes n hosts whose namespaces are named prefix-sw (the switch) and
// prefix-n1 … prefix-nN. On error it removes what it made.
func New(prefix string, n int) (_ *Lab, err error) {
	if err := Usable(); err != nil {
		return nil, err
	}
	l := &Lab{hub: prefix + "-sw"}
	if err := run("ip", "netns", "add", l.hub); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, args := range [][]string{
		{"-n", l.hub, "link", "set", "lo", "up"},
		{"-n", l.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", l.hub, "link", "set", "br0", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return nil, err
		}
	}
	for i := range n {
		if err := l.addHost(fmt.Sprintf("%s-n%d", prefix, i+1), fmt.Sprintf("%s%d", Subnet, i+1), i+1); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// addHost adds namespace ns with address ip on eth0, whose peer is port
// p<num> of the switch's bridge.
func (l *Lab) addHost(ns, ip string, num int) error {
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	l.ns, l.ips = append(l.ns, ns), append(l.ips, ip)
	port := fmt.Sprintf("p%d", num)
	for _, args := range [][]string{
		{"-n", l.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", l.hub, "link", "set", port, "master", "br0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// Close deletes every namespace of the lab, with its interfaces, rules and
// qdiscs. It reports every failure.
func (l *Lab) Close() error {
	var errs []error
	for _, ns := range append(l.ns, l.hub) {
		errs = append(errs, run("ip", "netns", "del", ns))
	}
	l.ns = nil
	return errors.Join(errs...)
}

// NS returns node i's namespace (0-based).
func (l *Lab) NS(i int) string { return l.ns[i] }

// IP returns node i's address (0-based).
func (l *Lab) IP(i int) string { return l.ips[i] }

// Len returns the number of nodes.
func (l *Lab) Len() int { return len(l.ns) }

// NodeOf returns the node whose address is ip, or -1.
func (l *Lab) NodeOf(ip string) int {
	for i, a := range l.ips {
		if a == ip {
			return i
		}
	}
	return -1
}

// Drop adds nftables table name on the switch, which drops every IP packet
// from a node of from to a node of to: the sender gets no error, its
// packets vanish, as in a real partition (ARP still passes). A two-way
// partition is Drop(a, b) plus Drop(b, a) in one table: give both
// directions in pairs. Each table is removed by Undrop(name).
func (l *Lab) Drop(name string, pairs ...[2][]int) error {
	var rules strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&rules, "\t\tip saddr %s ip daddr %s drop\n", l.set(p[0]), l.set(p[1]))
	}
	spec := fmt.Sprintf("table bridge %s {\n\tchain cut {\n\t\ttype filter hook forward priority 0; policy accept;\n%s\t}\n}\n", name, rules.String())
	cmd := exec.Command("ip", "netns", "exec", l.hub, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft table %s: %w: %s", name, err, out)
	}
	return nil
}

// Undrop removes table name added by Drop.
func (l *Lab) Undrop(name string) error {
	return run("ip", "netns", "exec", l.hub, "nft", "delete", "table", "bridge", name)
}

// set writes the addresses of nodes as an nftables set.
func (l *Lab) set(nodes []int) string {
	ips := make([]string, len(nodes))
	for k, i := range nodes {
		ips[k] = l.ips[i]
	}
	return "{ " + strings.Join(ips, ", ") + " }"
}

// Netem puts a tc netem qdisc on node i's eth0 (its packets to the other
// nodes, not the loopback its callers use), e.g. "delay", "200ms",
// "100ms", "loss", "10%". NetemOff removes it.
func (l *Lab) Netem(i int, args ...string) error {
	return run("ip", append([]string{"netns", "exec", l.ns[i], "tc", "qdisc", "replace", "dev", "eth0", "root", "netem"}, args...)...)
}

// NetemOff removes node i's qdisc (Netem's or Throttle's).
func (l *Lab) NetemOff(i int) error {
	return run("ip", "netns", "exec", l.ns[i], "tc", "qdisc", "del", "dev", "eth0", "root")
}

// HasNetem reports whether the kernel has tc's netem (sch_netem), tried on
// the switch's loopback.
func (l *Lab) HasNetem() bool {
	if run("ip", "netns", "exec", l.hub, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") != nil {
		return false
	}
	return run("ip", "netns", "exec", l.hub, "tc", "qdisc", "del", "dev", "lo", "root") == nil
}

// Throttle is what a kernel without netem can do to node i's link: a
// token-bucket qdisc of rate (e.g. "256kbit") on its eth0, whose queue
// delays its packets up to latency (e.g. "300ms"), and, in nftables table
// name on the switch, a loss of lossPct % of the packets from and to it.
// NetemOff and Undrop(name) remove them.
func (l *Lab) Throttle(name string, i int, rate, latency string, lossPct int) error {
	if err := run("ip", "netns", "exec", l.ns[i], "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
		"rate", rate, "burst", "16kbit", "latency", latency); err != nil {
		return err
	}
	ip := l.ips[i]
	spec := fmt.Sprintf("table bridge %s {\n\tchain loss {\n\t\ttype filter hook forward priority 0; policy accept;\n"+
		"\t\tip saddr %s numgen random mod 100 < %d drop\n\t\tip daddr %s numgen random mod 100 < %d drop\n\t}\n}\n", name, ip, lossPct, ip, lossPct)
	cmd := exec.Command("ip", "netns", "exec", l.hub, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft table %s: %w: %s", name, err, out)
	}
	return nil
}

// Command returns the command that runs bin with args in node i's
// namespace (ip netns exec replaces itself with bin: the process is the
// server's).
func (l *Lab) Command(ctx context.Context, i int, bin string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.ns[i], bin}, args...)...)
}

// Dial opens a TCP connection to addr from inside namespace ns.
func Dial(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	var derr error
	if err := Run(ns, func() { c, derr = new(net.Dialer).DialContext(ctx, "tcp", addr) }); err != nil {
		return nil, err
	}
	return c, derr
}

// FreePort returns a TCP port free on ip in namespace ns.
func FreePort(ns, ip string) (int, error) {
	var port int
	var lerr error
	err := Run(ns, func() {
		var l net.Listener
		if l, lerr = net.Listen("tcp", net.JoinHostPort(ip, "0")); lerr == nil {
			port = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
	})
	return port, errors.Join(err, lerr)
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
