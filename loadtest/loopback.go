package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Local nodes listen on loopback addresses of their own: node i (1-based,
// in start order) on 127.0.0.(firstHost+i) for gossip, gRPC and HTTP, so
// that a node is recognisable by its address in logs and metrics, and a
// node restarted under its name gets the same addresses back (memberlist
// takes a name back at once at the same address, only after a reclaim
// delay at a new one). Linux routes all of 127.0.0.0/8 to the loopback
// interface; macOS and others have only 127.0.0.1 unless aliases are
// configured, so the scheme is probed once and falls back to 127.0.0.1.
// Ports are always probed or picked by the kernel, never fixed.
const (
	firstHost     = 10              // node i listens on 127.0.0.(10+i)
	maxLocalNodes = 254 - firstHost // started plus joined, in one cluster
	sharedHost    = "127.0.0.1"     // the fallback: every node here
)

// loopbackScheme is decided once per process: whether node 1's address
// can be bound, and if not, why.
var loopbackScheme struct {
	once     sync.Once
	distinct bool
	err      error
}

func probeLoopback() {
	s := &loopbackScheme
	s.once.Do(func() {
		var l net.Listener
		if l, s.err = net.Listen("tcp", loopbackIP(1)+":0"); s.err == nil {
			l.Close()
			s.distinct = true
		}
	})
}

// nodeHost returns the loopback IP node i (1-based) listens on.
func nodeHost(i int) string {
	if probeLoopback(); !loopbackScheme.distinct {
		return sharedHost
	}
	return loopbackIP(i)
}

// loopbackNote says why the nodes share 127.0.0.1; "" when they do not.
func loopbackNote() string {
	if probeLoopback(); loopbackScheme.distinct {
		return ""
	}
	return fmt.Sprintf("binding %s failed (%v): every node listens on %s (on macOS, `sudo ifconfig lo0 alias 127.0.0.N up` gives each its own)",
		loopbackIP(1), loopbackScheme.err, sharedHost)
}

// loopbackIP is node i's address in the distinct scheme.
func loopbackIP(i int) string { return fmt.Sprintf("127.0.0.%d", firstHost+i) }

// freeGossipPort returns a port on host that was free for both TCP and UDP
// a moment ago (memberlist binds both).
func freeGossipPort(host string) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no loopback port free for both TCP and UDP on " + host)
}

// tcpFree reports whether addr (host:port) can be listened on now.
func tcpFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// gossipFree reports whether addr is free for both TCP and UDP now.
func gossipFree(addr string) bool {
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	defer u.Close()
	return tcpFree(addr)
}

// nodeAddrs are the listen addresses of one node process.
type nodeAddrs struct {
	gossip, grpc, http string // host:port; grpc and http may end in :0
}

// freshAddrs returns addresses on host: a probed gossip port, kernel-picked
// gRPC and HTTP ports.
func freshAddrs(host string) (nodeAddrs, error) {
	port, err := freeGossipPort(host)
	if err != nil {
		return nodeAddrs{}, err
	}
	return nodeAddrs{
		gossip: net.JoinHostPort(host, strconv.Itoa(port)),
		grpc:   net.JoinHostPort(host, "0"),
		http:   net.JoinHostPort(host, "0"),
	}, nil
}

// reuseAddrs returns prev's addresses where they are free now and fresh
// ones where not; same says whether all three were kept.
func reuseAddrs(prev nodeAddrs, host string) (a nodeAddrs, same bool, err error) {
	a, same = prev, true
	if !gossipFree(prev.gossip) {
		port, err := freeGossipPort(host)
		if err != nil {
			return a, false, err
		}
		a.gossip, same = net.JoinHostPort(host, strconv.Itoa(port)), false
	}
	if !tcpFree(prev.grpc) {
		a.grpc, same = net.JoinHostPort(host, "0"), false
	}
	if !tcpFree(prev.http) {
		a.http, same = net.JoinHostPort(host, "0"), false
	}
	return a, same, nil
}
