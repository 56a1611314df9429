package peer

import (
	"cmp"
	"time"

	"github.com/shardlimiter/shardlimiter/snapshot"
)

// ClusterInfo is this node's view of the cluster, served at /v1/cluster.
type ClusterInfo struct {
	Node        string `json:"node"`
	GRPCAddr    string `json:"grpc_addr"`
	PeerAddr    string `json:"peer_addr"`
	RingVersion uint64 `json:"ring_version"`
	// MembersFingerprint fingerprints the member list of the ring (16 hex digits):
	// nodes whose fingerprints are equal route by the same members
	// (ring versions are each node's own counter).
	MembersFingerprint string `json:"members_fingerprint"`
	Ready              bool   `json:"ready"`
	Leaving            bool   `json:"leaving"`
	FailPolicy         string `json:"fail_policy"`
	// Handoff counts the ring partitions marked for handoff, by mark
	// (incoming, moved, received); empty when no handoff is in progress.
	Handoff map[string]int `json:"handoff"`
	// Replication is the replication interval ("100ms"), "off" when 0.
	Replication string `json:"replication"`
	// Memory is what the tables hold against their byte budget.
	Memory MemoryStats `json:"memory"`
	// Snapshot is the durable state (--state-dir); nil (null) without it.
	Snapshot *SnapshotInfo `json:"snapshot"`
	Members  []MemberInfo  `json:"members"`
}

// SnapshotInfo is the state of a node's snapshot file (Config.StateDir).
type SnapshotInfo struct {
	Dir      string `json:"dir"`
	Path     string `json:"path"`     // the file
	Interval string `json:"interval"` // between writes, when something changed
	// Keys is the key count of the file on disk: the last one written, or
	// the one restored at start before the first write.
	Keys int `json:"keys"`
	// LastWritten is when the last successful write began (RFC 3339, UTC);
	// empty before the first write of this process.
	LastWritten string `json:"last_written"`
	// LastError is the last write's error; empty after a success.
	LastError string `json:"last_error"`
}

// MemberInfo is one member of the ring.
type MemberInfo struct {
	Name     string  `json:"name"`
	Addr     string  `json:"addr"`      // client gRPC API
	PeerAddr string  `json:"peer_addr"` // peer RPCs (forwarding, state transfer)
	Share    float64 `json:"share"`     // fraction of the key space it owns
}

// Cluster returns this node's view of the cluster.
func (n *Node) Cluster() ClusterInfo {
	v := n.view.Load()
	shares := v.snap.Shares()
	info := ClusterInfo{
		Node:               n.cfg.Name,
		GRPCAddr:           n.cfg.GRPCAddr,
		PeerAddr:           cmp.Or(n.cfg.PeerAddr, n.cfg.GRPCAddr),
		RingVersion:        v.snap.Version(),
		MembersFingerprint: hex64(fingerprint(v.snap.Members())),
		Ready:              n.Ready(),
		Leaving:            n.leaving.Load(),
		FailPolicy:         n.cfg.FailPolicy.String(),
		Handoff:            n.ho.counts(),
		Replication:        "off",
		Memory:             n.Memory(),
	}
	if n.cfg.ReplicationInterval > 0 {
		info.Replication = n.cfg.ReplicationInterval.String()
	}
	if d := n.mv.dur; d != nil {
		d.statMu.Lock()
		s := &SnapshotInfo{Dir: d.dir, Path: snapshot.Path(d.dir, d.name), Interval: d.interval.String(), Keys: d.lastKeys, LastError: d.lastError}
		if !d.lastWritten.IsZero() {
			s.LastWritten = d.lastWritten.UTC().Format(time.RFC3339)
		}
		d.statMu.Unlock()
		info.Snapshot = s
	}
	for _, m := range v.snap.Members() {
		info.Members = append(info.Members, MemberInfo{Name: m.Name, Addr: m.Addr, PeerAddr: peerAddr(m), Share: shares[m.Name]})
	}
	return info
}
