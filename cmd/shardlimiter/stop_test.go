package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimiter/shardlimiter/internal/poll"
	"github.com/shardlimiter/shardlimiter/limit"
)

// TestWholeClusterStopLogs stops three real nodes (127.0.0.131-133) at
// once, as deleting a deployment does, and reads their logs: each says once
// that no other member is left to take its keys, and none logs what reads
// as a failure of that ordinary stop (pulls that time out, a leave
// broadcast that nobody could hear, a leaving node rejoining its seeds).
// The drain is cut short once the others are gone: the grace is far longer
// than the test waits.
func TestWholeClusterStopLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	bin := buildBinary(t)
	hosts := []string{"127.0.0.131", "127.0.0.132", "127.0.0.133"}
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startProc(t, bin, h, port, seed, "--log-level", "info", "--shutdown-grace", "60s"))
	}
	converge(t, procs...)
	// A cluster that has been running: the joins' transfers are over.
	poll.Until(t, 20*time.Second, func() bool {
		for _, p := range procs {
			if handoffMarks(p) != 0 {
				return false
			}
		}
		return true
	}, "the joins' handoffs end")
	api := dialAPI(t, procs[0].grpc)
	rule := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Period: time.Minute}
	var checks []limit.Check
	for i := range 30 {
		checks = append(checks, limit.Check{Name: "stop", Key: fmt.Sprint("k", i), Hits: 1, Rule: rule})
	}
	if _, err := api.GetRateLimits(context.Background(), checks); err != nil {
		t.Fatal(err)
	}

	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan error, len(procs))
	for _, p := range procs {
		go func() { exited <- p.cmd.Wait() }()
	}
	timeout := time.After(30 * time.Second)
	for range procs {
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit: %v", err)
			}
		case <-timeout:
			t.Fatal("the nodes did not exit within 30 s (the grace is 60 s: the drain should end when the others are gone)")
		}
	}

	misleading := []string{
		"pull failed",                         // a leaving node pulled from others leaving
		"DeadlineExceeded",                    // the same, as its error
		"timeout waiting for leave broadcast", // nobody was left to hear it
		"rejoined seeds",                      // a leaving node rejoined the cluster
		"handoff not acknowledged",
		"level=ERROR",
	}
	for _, p := range procs {
		log := p.stderr.String()
		for _, s := range misleading {
			if strings.Contains(log, s) {
				t.Errorf("%s logged %q on a whole-cluster stop:\n%s", p.name, s, log)
			}
		}
		if n := strings.Count(log, "no other member left to take the keys"); n != 1 {
			t.Errorf("%s said %d times that no other member is left to take the keys, want once:\n%s", p.name, n, log)
		}
		if !strings.Contains(log, "msg=stopped") {
			t.Errorf("%s did not log its stop:\n%s", p.name, log)
		}
	}
}

// handoffMarks is the number of partitions p marks for handoff (-1 when its
// cluster view cannot be read).
func handoffMarks(p *proc) int {
	resp, err := http.Get("http://" + p.http + "/v1/cluster")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		Handoff map[string]int `json:"handoff"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return -1
	}
	n := 0
	for _, c := range v.Handoff {
		n += c
	}
	return n
}

// TestThreeNodesWithoutPeerAddr starts three real nodes on 127.0.0.141-143
// with only their HTTP, gRPC and gossip addresses, the command line of the
// README before the peer port existed: each peer listener takes its gRPC
// host with port 8082, so they do not collide on *:8082, and the three
// form one cluster that forwards.
func TestThreeNodesWithoutPeerAddr(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	hosts := []string{"127.0.0.141", "127.0.0.142", "127.0.0.143"}
	for _, h := range hosts {
		// The default port is fixed by design; these hosts are this test's.
		l, err := net.Listen("tcp", net.JoinHostPort(h, defaultPeerPort))
		if err != nil {
			t.Skipf("%s:%s is taken on this machine: %v", h, defaultPeerPort, err)
		}
		l.Close()
	}
	bin := buildBinary(t)
	port := freeGossipPort(t, hosts...)
	seed := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	var procs []*proc
	for _, h := range hosts {
		procs = append(procs, startArgs(t, bin, "node-"+h, []string{
			"--http-addr", h + ":0", "--grpc-addr", h + ":0",
			"--gossip-addr", net.JoinHostPort(h, strconv.Itoa(port)),
			"--node-name", "node-" + h, "--join", seed, "--log-level", "warn", "--shutdown-grace", "0s"}))
	}
	for i, p := range procs {
		if want := net.JoinHostPort(hosts[i], defaultPeerPort); p.peer != want {
			t.Errorf("%s: peer listener %q, want %q", p.name, p.peer, want)
		}
	}
	converge(t, procs...)
	// A key owned by each node, decided through node 1: forwarding works.
	api := dialAPI(t, procs[0].grpc)
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Period: time.Hour}
	owners := map[string]bool{}
	for i := 0; len(owners) < len(procs) && i < 1000; i++ {
		res, err := api.GetRateLimits(context.Background(), []limit.Check{{Name: "nopeer", Key: fmt.Sprint("k", i), Hits: 1, Rule: rule}})
		if err != nil || res[0].Error != "" || !res[0].Allowed {
			t.Fatalf("check k%d: %+v %v", i, res, err)
		}
		owners[res[0].Owner] = true
	}
	if len(owners) != len(procs) {
		t.Fatalf("owners seen %v, want all %d nodes", owners, len(procs))
	}
}
