package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardlimiter/shardlimiter/limit"
	"github.com/shardlimiter/shardlimiter/ring"
	"github.com/shardlimiter/shardlimiter/snapshot"
)

// Durable state (Config.StateDir): so that counts survive a stop of every
// node. See docs/DURABILITY.md for what survives what.
//
// Every Config.SnapshotInterval, and once more when Run ends (after Leave
// handed the keys over and the servers stopped, so nothing is decided
// afterwards), the node writes every key its tables hold (the keys it owns,
// the replicas it holds for others, copies left by a handoff) to its
// snapshot file (package snapshot). A round when nothing was decided or
// merged here since the last one writes nothing.
//
// The write walks the tables shard by shard (limit.StateMover.Range copies
// one shard's keys under its read lock, then each key is exported under its
// own lock for a few loads) and streams to the file: no lock is held across
// the tables, and memory is one shard's keys plus the write buffer. Checks
// go on meanwhile; a key changed after it was written is in the next
// snapshot. So the file is not one instant's state: each key's state is
// one it had during the write.
//
// Restore, before the node serves, merges the file into the tables as a
// handoff would (Limiter.Import: the state that consumed more wins; states
// expired by now change nothing). The file is verified whole first: a
// damaged one is refused (logged, counted, kept aside as .corrupt) and the
// node starts empty rather than from a part. Keys restored here that the
// ring gives to other nodes reach them when this node first joins others
// (restorePushes), so that a cluster restarted in any order converges.

// DefaultSnapshotInterval is the snapshot interval when Config leaves it 0.
// A SIGKILL of every node loses at most this much of each key's hits. 10 s
// keeps the cost small (a write of 1M keys takes 0.5–0.8 s of one core:
// docs/DURABILITY.md), while a day's or a month's limit loses a negligible
// share of its count; per-second limits lose nothing that matters.
const DefaultSnapshotInterval = 10 * time.Second

// durable is a node's snapshot state; nil without Config.StateDir.
type durable struct {
	dir, name string // the snapshot file: snapshot.Path(dir, name)
	interval  time.Duration
	// dirty: something was decided or merged here since the last snapshot
	// began. Set on the check path only when clear (a load, rarely a
	// store), cleared by a snapshot as it starts.
	dirty atomic.Bool
	// restored: keys were loaded that may belong to other nodes; cleared
	// when they are sent to their owners.
	restored atomic.Bool
	mu       sync.Mutex // serializes writes
	m        durableMetrics
	// members: the names of the last ring this node decided in with its
	// cluster (joined, not leaving), written beside the snapshot when it
	// changed (membersWritten, guarded by mu). stopMembers: the ones the
	// restored file's node had when it stopped, until the first ring with
	// other members has been compared with them (noteAbsentOwners;
	// guarded by the node's rebuildMu after Restore).
	members        atomic.Pointer[[]string]
	membersWritten []string
	stopMembers    []string
	// The last write, for ClusterInfo; guarded by statMu (not mu, which a
	// write holds for its whole length). lastKeys starts as the restored
	// file's record count (the file on disk until the first write).
	statMu      sync.Mutex
	lastKeys    int
	lastWritten time.Time // when the last successful write began; zero before one
	lastError   string    // the last write's error; empty after a success
}

// attrs are the log attributes naming the snapshot file; none without a
// state directory.
func (d *durable) attrs() []any {
	if d == nil {
		return nil
	}
	return []any{"snapshot", snapshot.Path(d.dir, d.name)}
}

type durableMetrics struct {
	duration    prometheus.Observer
	keys        prometheus.Gauge
	lastSuccess prometheus.Gauge
	writeErrors prometheus.Counter
	loadErrors  prometheus.Counter
	loadedKeys  prometheus.Counter
	skipped     prometheus.Counter
}

func newDurable(cfg Config) *durable {
	if cfg.StateDir == "" {
		return nil
	}
	d := &durable{dir: cfg.StateDir, name: cmp.Or(cfg.SnapshotName, cfg.Name), interval: cfg.SnapshotInterval}
	if d.interval <= 0 {
		d.interval = DefaultSnapshotInterval
	}
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shardlimiter_snapshot_write_duration_seconds",
		Help:    "Time to write one snapshot of the node's key states to --state-dir.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	})
	d.m = durableMetrics{
		duration: duration,
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardlimiter_snapshot_keys",
			Help: "Key states in the last snapshot written.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardlimiter_snapshot_last_success_timestamp_seconds",
			Help: "Unix time at which the last snapshot written began: it holds every decision made before; 0 before the first. A crash of every node loses the hits since.",
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_snapshot_write_errors_total",
			Help: "Snapshots that could not be written (the previous file is kept).",
		}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_snapshot_load_errors_total",
			Help: "Snapshot files refused at start (damaged, truncated, unreadable): the node started without them.",
		}),
		loadedKeys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_snapshot_loaded_keys_total",
			Help: "Key states read from the snapshot at start and merged.",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardlimiter_snapshot_skipped_total",
			Help: "Snapshot rounds that wrote nothing because nothing changed since the last.",
		}),
	}
	if r := cfg.Registerer; r != nil {
		r.MustRegister(duration, d.m.keys, d.m.lastSuccess, d.m.writeErrors, d.m.loadErrors, d.m.loadedKeys, d.m.skipped)
	}
	return d
}

// changed notes that the tables changed: the next snapshot is written.
func (d *durable) changed() {
	if d != nil && !d.dirty.Load() {
		d.dirty.Store(true)
	}
}

// restore merges the node's snapshot into its tables (Node.Restore).
func (mv *mover) restore() error {
	d := mv.dur
	if d == nil {
		return nil
	}
	if err := os.MkdirAll(d.dir, 0o750); err != nil {
		return fmt.Errorf("peer: state dir: %w", err)
	}
	if k := snapshot.RemoveTemp(d.dir, d.name); k > 0 {
		mv.log.Info("snapshot: removed unfinished writes", "files", k)
	}
	path := snapshot.Path(d.dir, d.name)
	start := time.Now()
	now := mv.cfg.Now().UnixNano()
	var loaded, bad int
	var first error
	info, err := snapshot.Load(d.dir, d.name, func(ks limit.KeyState) error {
		if ks.Algorithm == limit.LeaseBook { // written after the states
			if err := mv.leases.importRecords(ks.Key, ks.State, now); err != nil && first == nil {
				first = err
			}
			return nil
		}
		if int(ks.Algorithm) >= len(mv.host.tables()) {
			bad++
			return nil
		}
		if err := mv.host.tables()[ks.Algorithm].Import(ks.Key, ks.State, now, true); err != nil {
			if first == nil {
				first = err
			}
			bad++
			return nil
		}
		loaded++
		return nil
	})
	if err != nil {
		return mv.loadFailed(path, err)
	}
	d.m.loadedKeys.Add(float64(loaded))
	if bad > 0 {
		mv.m.transferMalformed.Add(float64(bad))
		mv.log.Warn("snapshot: keys refused", "refused", bad, "of", info.Records, "err", first)
	}
	if loaded > 0 {
		d.restored.Store(true)
	}
	mv.loadMembers()
	d.statMu.Lock()
	d.lastKeys = int(info.Records)
	d.statMu.Unlock()
	mv.log.Info("snapshot: restored", "path", path, "records", info.Records, "age", time.Duration(now-info.WrittenAt).Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// loadMembers reads the members the restored snapshot's node had when it
// stopped (noteAbsentOwners). Without the file (a node that never decided
// in a cluster, or a state dir of an older version) nothing is compared.
func (mv *mover) loadMembers() {
	d := mv.dur
	names, err := snapshot.LoadMembers(d.dir, d.name)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		mv.log.Warn("snapshot: members file unreadable; partitions of members not back after a stop of every node are not told apart", "err", err)
	default:
		d.stopMembers = names
		d.membersWritten = names
	}
}

// noteMembers records the members of a ring this node decides in with its
// cluster; a change is written with the next snapshot.
func (d *durable) noteMembers(snap *ring.Snapshot) {
	if d == nil {
		return
	}
	names := make([]string, snap.Len())
	for i := range names {
		names[i] = snap.Member(i).Name
	}
	if old := d.members.Load(); old == nil || !slices.Equal(*old, names) {
		d.members.Store(&names)
		d.changed()
	}
}

// noteAbsentOwners runs at the first rebuild with other members after a
// restore. The partitions cur gives this node whose owner, in the ring the
// restored file's node had when it stopped, is not in cur are decided from
// the copies held here (the replicas, restored): when every node stopped,
// their newest state is in the absent owner's snapshot alone (its last
// replication rounds or its leave's pushes may not have landed: a slow
// link), so until that owner rejoins and merges it, each such key can admit
// again what the owner had counted beyond the copy here. That is a
// decision from the replica, counted as one (or as an incomplete handoff
// without replication) and logged. Rebuilds under rebuildMu.
func (mv *mover) noteAbsentOwners(cur *view) {
	d := mv.dur
	if d == nil || d.stopMembers == nil || cur.self < 0 {
		return
	}
	stop := d.stopMembers
	d.stopMembers = nil
	var absent []string
	ms := make([]ring.Member, len(stop))
	for i, name := range stop {
		ms[i] = ring.Member{Name: name}
		if cur.snap.IndexOf(name) < 0 {
			absent = append(absent, name)
		}
	}
	if len(absent) == 0 {
		return
	}
	was, err := ring.New(ms, 0, mv.cfg.Ring)
	if err != nil || was.Partitions() != cur.snap.Partitions() {
		return
	}
	parts := 0
	for p := range cur.snap.Partitions() {
		if cur.snap.PartitionOwner(p) == cur.self && slices.Contains(absent, was.Member(was.PartitionOwner(p)).Name) {
			parts++
		}
	}
	if parts == 0 {
		return
	}
	counter := "shardlimiter_handoff_replica_fallbacks_total"
	if mv.cfg.ReplicationInterval > 0 {
		mv.m.replicaFallbacks.Inc()
	} else {
		mv.m.handoffIncomplete.Inc()
		counter = "shardlimiter_handoff_incomplete_total"
	}
	mv.log.Warn("handoff: partitions of members not back since they stopped are decided from the copies held here until those members rejoin (their newest state is in their snapshots)",
		"absent", absent, "partitions", parts, "counted_in", counter)
}

// loadFailed handles a snapshot that could not be loaded: none is a first
// start; a damaged one is counted, renamed aside and otherwise ignored, as
// is one that cannot be read. The error is for a state directory that is
// not there.
func (mv *mover) loadFailed(path string, err error) error {
	d := mv.dur
	switch {
	case errors.Is(err, os.ErrNotExist):
		mv.log.Info("snapshot: none to restore", "path", path)
		return nil
	case errors.Is(err, snapshot.ErrCorrupt):
		d.m.loadErrors.Inc()
		aside := path + ".corrupt"
		if rerr := os.Rename(path, aside); rerr != nil {
			aside = ""
		}
		mv.log.Error("snapshot: refused, starting without it", "path", path, "kept_as", aside, "err", err)
		return nil
	default:
		d.m.loadErrors.Inc()
		if _, serr := os.Stat(filepath.Dir(path)); serr != nil {
			return fmt.Errorf("peer: state dir: %w", serr)
		}
		mv.log.Error("snapshot: unreadable, starting without it", "path", path, "err", err)
		return nil
	}
}

// snapshotLoop writes a snapshot every interval until ctx is done.
func (mv *mover) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(mv.dur.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			mv.writeSnapshot()
		}
	}
}

// writeSnapshot writes every key state held to the snapshot file, unless
// nothing changed since the last write. A failed write keeps the old file
// and leaves the node dirty, so the next round tries again.
func (mv *mover) writeSnapshot() {
	if keys, took, err := mv.snapshotNow(); err == nil && took > 0 {
		mv.log.Debug("snapshot: written", "keys", keys, "took", took)
	}
}

// writeFinalSnapshot writes the last snapshot as the node stops, and says
// so at info with its key count and path: an operator stopping every node
// reads here that the keys are kept. A last write with nothing changed
// since the previous one keeps that file, which holds the same keys.
func (mv *mover) writeFinalSnapshot() {
	d := mv.dur
	keys, took, err := mv.snapshotNow()
	switch {
	case err != nil: // logged by snapshotNow
	case took == 0:
		mv.log.Info("snapshot: final snapshot unchanged since the last write, kept", "keys", keys, "path", snapshot.Path(d.dir, d.name))
	default:
		mv.log.Info("snapshot: final snapshot written", "keys", keys, "path", snapshot.Path(d.dir, d.name), "took", took.Round(time.Microsecond))
	}
}

// snapshotNow writes the snapshot if something changed since the last
// write (took > 0 then), and returns the key count of the file on disk.
// A failure is logged and counted here.
func (mv *mover) snapshotNow() (keys int, took time.Duration, err error) {
	d := mv.dur
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dirty.Swap(false) {
		d.m.skipped.Inc()
		d.statMu.Lock()
		defer d.statMu.Unlock()
		return d.lastKeys, 0, nil
	}
	start := time.Now()
	now := mv.cfg.Now().UnixNano()
	var merr error // the members file's: a failed write too
	if m := d.members.Load(); m != nil && !slices.Equal(*m, d.membersWritten) {
		if merr = snapshot.WriteMembers(d.dir, d.name, *m); merr == nil {
			d.membersWritten = *m
		}
	}
	info, err := snapshot.Write(d.dir, d.name, now, func(w *snapshot.Writer) error {
		var werr error
		for a, l := range mv.host.tables() {
			l.Range(func(key string) bool {
				if st, ok := l.Export(key, now); ok {
					werr = w.Write(limit.KeyState{Algorithm: limit.Algorithm(a), Key: key, State: st})
				}
				return werr == nil
			})
			if werr != nil {
				return werr
			}
		}
		// The lease records after the states they were debited from.
		return mv.leases.exportAll(w.Write)
	})
	took = max(time.Since(start), 1)
	if err == nil {
		err = merr
	}
	if err != nil {
		d.dirty.Store(true)
		d.m.writeErrors.Inc()
		d.statMu.Lock()
		d.lastError = err.Error()
		d.statMu.Unlock()
		mv.log.Error("snapshot: write failed; the previous one is kept", "dir", d.dir, "err", err)
		return 0, 0, err
	}
	d.m.duration.Observe(took.Seconds())
	d.m.keys.Set(float64(info.Records))
	// The round's start, not its end: the snapshot holds every decision
	// made before it began, and maybe some made while it ran.
	d.m.lastSuccess.Set(float64(start.UnixNano()) / 1e9)
	d.statMu.Lock()
	d.lastKeys, d.lastWritten, d.lastError = int(info.Records), start, ""
	d.statMu.Unlock()
	return int(info.Records), took, nil
}

// restorePushes queues the push of the keys held here in the partitions
// cur gives to other nodes, to their owners: the keys a snapshot restored
// that are theirs. It runs once, at the first rebuild with other members,
// for a node that restored keys and joins others (a node that decided
// alone first pushes all it lost anyway, see rebuild). Keys only: the
// owners hold these partitions already, and an owner that is still
// pulling one from elsewhere must not see it settled by this push.
func (mv *mover) restorePushes(cur *view) {
	jobs := map[string]*job{}
	for p := range cur.snap.Partitions() {
		if o := cur.snap.PartitionOwner(p); o != cur.self {
			m := cur.snap.Member(o)
			addPart(jobs, m.Name, job{peer: m, why: limit.Join, pushed: make(chan struct{}), keysOnly: true}, p)
		}
	}
	mv.queue(jobs)
	mv.log.Info("snapshot: sending restored keys to their owners", "owners", len(jobs))
}

// keptOrDropped says what becomes of the keys this node holds when it
// exits with no member left to take them: with Config.StateDir its last
// snapshot, written as Run ends, keeps them.
func (mv *mover) keptOrDropped() string {
	if mv.dur != nil {
		return "kept in the snapshot written at exit"
	}
	return "dropped (no --state-dir)"
}

// takeRestored reports, once, whether keys were restored that may belong
// to other nodes: the first rebuild with other members sends them on
// (restorePushes).
func (mv *mover) takeRestored() bool { return mv.dur != nil && mv.dur.restored.Swap(false) }
