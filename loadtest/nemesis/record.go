package nemesis

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/shardlimiter/shardlimiter/limit"
)

// The load of loadtest --mode nemesis: closed-loop workers, each call a batch of
// 1–100 checks over every algorithm, a few hot keys (always over their
// limit) and many cold ones, to the nodes in turn.
const (
	HotKeys  = 2   // per algorithm
	ColdKeys = 200 // per algorithm
	HotShare = 0.3 // of the checks
	MaxBatch = 100
	// MaxChecks bounds the checks recorded (16 bytes each, 1.9 GB at
	// most); past it the workers stop, and the run fails its verdict: the
	// faults after it ran without load. A 30-minute run of 5 nodes and
	// 2 workers on a quiet 2-core machine records about 45 M.
	MaxChecks = 120_000_000
)

// Algorithms are the algorithms of the load, one rule each.
var Algorithms = []limit.Algorithm{limit.TokenBucket, limit.LeakyBucket, limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog}

// check flags of a recorded check.
const (
	ckAdmitted uint8 = 1 << iota
	ckItemError
	ckCallFailed
)

// checkRec is one check as the client saw it, in 16 bytes: sent at send
// (Unix ns), answered lat ns later (capped at 4.29 s).
type checkRec struct {
	send  int64
	lat   uint32
	flags uint8
	node  uint8 // 1-based target
	owner uint8 // the node that decided it, from its answer's owner (by the number its name ends in); 0 unknown
}

func (c checkRec) recv() int64 { return c.send + int64(c.lat) }

// Call is one call: when, to which node, and whether it was answered.
type Call struct {
	Send, Recv int64 // Unix ns
	Node       uint8 // 1-based
	Failed     bool
	Kind       string // the failure's kind, e.g. "rpc:Unavailable"
}

// KeySpace names the load's keys: key k of algorithm a is index
// a×PerAlg + k, the hot ones first.
type KeySpace struct {
	Names []string
	Rules []limit.Rule // per algorithm
}

func (ks *KeySpace) PerAlg() int { return HotKeys + ColdKeys }

func NewKeySpace(id string, rule func(limit.Algorithm) limit.Rule) *KeySpace {
	ks := &KeySpace{}
	for _, a := range Algorithms {
		ks.Rules = append(ks.Rules, rule(a))
		for k := range ks.PerAlg() {
			kind := "c"
			if k < HotKeys {
				kind = "h"
			}
			ks.Names = append(ks.Names, fmt.Sprintf("nm-%s-%v-%s%d", id, a, kind, k))
		}
	}
	return ks
}

// Recorder keeps every check per key and every call, sharded by key.
type Recorder struct {
	mu     []sync.Mutex
	checks [][]checkRec // per key
	callMu sync.Mutex
	calls  []Call
	total  int64 // checks recorded, under callMu
	full   bool
	fullAt int64 // Unix ns of the call that filled it
}

// Full reports whether the recorder stopped at MaxChecks, and when (the
// Unix ns of the call that filled it).
func (r *Recorder) Full() (full bool, at int64) {
	r.callMu.Lock()
	defer r.callMu.Unlock()
	return r.full, r.fullAt
}

const recorderShards = 64

func NewRecorder(keys int) *Recorder {
	return &Recorder{mu: make([]sync.Mutex, recorderShards), checks: make([][]checkRec, keys)}
}

// Add records one call and its checks (keys[i] answered by res[i]); it
// reports false once the bound on recorded checks is reached.
func (r *Recorder) Add(c Call, keys []int, res []limit.Result) bool {
	r.callMu.Lock()
	r.calls = append(r.calls, c)
	r.total += int64(len(keys))
	ok := r.total < MaxChecks
	if !ok && !r.full {
		r.full, r.fullAt = true, c.Recv
	}
	r.callMu.Unlock()
	lat := uint32(min(c.Recv-c.Send, int64(^uint32(0))))
	for i, k := range keys {
		rec := checkRec{send: c.Send, lat: lat, node: c.Node}
		switch {
		case c.Failed:
			rec.flags = ckCallFailed
		case i >= len(res) || res[i].Error != "":
			rec.flags = ckItemError
		case res[i].Allowed:
			rec.flags = ckAdmitted
		}
		if !c.Failed && i < len(res) {
			rec.owner = ownerNumber(res[i].Owner)
		}
		m := &r.mu[k%recorderShards]
		m.Lock()
		r.checks[k] = append(r.checks[k], rec)
		m.Unlock()
	}
	return ok
}

// ownerNumber is the number a node's name ends in ("loadtest-2": 2), 0 when
// it ends in none or one over 255.
func ownerNumber(name string) uint8 {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(name[i:])
	if err != nil || n > 255 {
		return 0
	}
	return uint8(n)
}
