package gossip

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shardlimiter/shardlimiter/ring"
)

// Config configures gossip membership. Optional fields state what
// their zero value means.
type Config struct {
	// NodeName identifies this node in gossip and on the ring. It must be
	// unique in the cluster; several nodes may share an IP. Required, at
	// most 256 bytes.
	NodeName string
	// BindAddr is the host:port memberlist listens on, TCP and UDP. The
	// host is an IP literal, "localhost" or empty (all interfaces); port 0
	// picks a free port (see LocalAddr). Empty means ":7946".
	BindAddr string
	// AdvertiseAddr is where peers reach this node's gossip when that is
	// not the bind address (an all-interfaces bind, NAT; in Kubernetes the
	// pod IP): "host" keeps the bind port, "host:port" sets both. A DNS
	// name is resolved with Resolver when Run starts. Empty: the bind IP,
	// or for an all-interfaces bind the machine's first private IP. With
	// bind port 0 the bound port is advertised.
	AdvertiseAddr string
	// GRPCAddr is the host:port of the client API, published in the node
	// metadata (see Meta). An empty or unspecified host (":8081") is read
	// by peers as this node's gossip IP. Required; port 1-65535.
	GRPCAddr string
	// PeerAddr is the host:port other nodes forward checks and move state
	// to, published like GRPCAddr. Empty means GRPCAddr.
	PeerAddr string
	// Keys encrypt and authenticate gossip (AES-GCM; each 16, 24 or 32
	// bytes): the first encrypts, all decrypt. Messages no key opens are
	// dropped and counted (see Rejected), so a node without a key the
	// others hold cannot join. Nil: plaintext gossip, for development.
	// Encryption cannot be turned on or off at run time, only the keys
	// rotated (SetKeys).
	Keys [][]byte
	// Seeds are the nodes to join: "host:port", "host" (port
	// DefaultPort), "[v6]:port" or "[v6]"; host is an IP or a DNS
	// name. Names are resolved at every attempt (DNS may lag behind pod
	// start) and a name joins every address it resolves to. This node's own
	// address is skipped. Empty: a cluster of one, joined at once.
	Seeds []string
	// JoinRetry is the pause between join attempts until one succeeds,
	// ±20 % jitter. No backoff: an attempt costs a lookup and a TCP
	// exchange, and readiness waits for it. Zero means 1 s.
	JoinRetry time.Duration
	// RejoinInterval is how often, once joined, the seeds are resolved
	// again and the addresses that are not members joined. That merges
	// nodes that started together and each found only itself, and a
	// partition that HealInterval does not (disabled, or longer than a
	// day). Shorter merges sooner for one lookup per interval. Zero means
	// 30 s; negative disables.
	RejoinInterval time.Duration
	// HealInterval is the longest pause between two knocks on a member
	// that failure detection declared dead (not one that left): a knock,
	// one small UDP message, goes 250 ms after the verdict, then at
	// doubling pauses up to HealInterval, for as long as it stays dead (up
	// to a day), and a member that hears it joins this node at once. That
	// merges the halves of a partition within about HealInterval of the
	// heal, however long it lasted (see heal.go). Shorter heals sooner for
	// one packet per dead member per interval. Zero means 1 s; negative
	// disables (partitions then heal through RejoinInterval).
	HealInterval time.Duration
	// Logger receives this type's logs and memberlist's (levels mapped; see
	// gossipLogger). Nil discards them.
	Logger *slog.Logger
	// Resolver looks up a host name's addresses. Nil means
	// net.DefaultResolver.LookupHost; tests substitute a fake.
	Resolver func(ctx context.Context, host string) ([]string, error)
	// GossipInterval is how often each member sends the news it holds
	// (joins, deaths, suspicions) to GossipNodes other members, besides
	// what rides on its probes. News reaches all N members in about
	// log(N) rounds, so larger clusters learn a crash or a join sooner
	// with a shorter interval, at the cost of more wake-ups of an idle
	// member (see gossipConfig). Zero means 500 ms.
	GossipInterval time.Duration
	// GossipNodes is how many members each gossip round sends to. Zero
	// means memberlist's 3.
	GossipNodes int
	// ProbeInterval is how often each member probes one other member
	// (failure detection; see gossipConfig). A crashed member of three to
	// five is out of every ring about 4-6 intervals after the crash:
	// 2.5-3 s at the default 500 ms. Longer costs an idle member less (at
	// 5 s, memberlist's WAN figure, about 40% of the CPU) and notices a
	// crash later, and a member that misses probes is suspected later
	// too. Zero means 500 ms; it must lie within [MinProbeInterval,
	// MaxProbeInterval].
	ProbeInterval time.Duration
	// Transport, when set, makes memberlist's transport from its config
	// when Run starts (it may set the config's ports): an in-memory network
	// runs many members in one process (package sim). Nil: UDP and TCP
	// sockets on BindAddr (socketTransport, transport.go).
	Transport func(*memberlist.Config) (memberlist.Transport, error)
}

// Membership is this node's view of the cluster, kept by gossip
// (hashicorp/memberlist). All methods are safe for concurrent use.
//
// Members comes from memberlist's event callbacks, copied under a mutex, not
// from memberlist.Members: the nodes that returns are read by memberlist's
// goroutines while they update them, a data race once the caller reads them
// outside memberlist's lock.
type Membership struct {
	cfg      Config // defaults filled in
	log      *slog.Logger
	seeds    []seed
	meta     []byte              // encoded Meta; never modified
	keyring  *memberlist.Keyring // nil: plaintext gossip
	rejected rejections
	bindHost string
	bindPort int

	ml           atomic.Pointer[memberlist.Memberlist]
	localAddr    atomic.Pointer[string]
	ran          atomic.Bool
	joined       atomic.Bool
	joinAttempts atomic.Int64                     // for tests
	claims       atomic.Uint64                    // other addresses seen claiming our name
	refutes      atomic.Uint64                    // messages declaring this node dead, refuted
	started      chan struct{}                    // closed by Run once memberlist is up
	changed      chan struct{}                    // cap 1, never closed
	nameClaimed  chan struct{}                    // cap 1, never closed
	deadWake     chan struct{}                    // cap 1, never closed: a member was declared dead
	notices      *memberlist.TransmitLimitedQueue // leave notices (heal.go)
	// testTransport, set by tests before Run, makes memberlist's
	// transport from its config (and may set its ports); nil: as
	// Config.Transport.
	testTransport func(*memberlist.Config) (memberlist.Transport, error)

	mu      sync.Mutex
	members map[string]*member     // by node name, this node included
	dead    map[string]*deadMember // by node name: looked for by healLoop
	leftAt  map[string]time.Time   // by node name: when its leave notice came
	answer  map[string]string      // alive members that knocked, by name: gossip address

	lifeMu sync.Mutex // serializes Leave and the shutdown in Run
	left   bool       // guarded by lifeMu
	down   bool       // guarded by lifeMu: memberlist shut down
	// leaving is left, readable without lifeMu (which memberlist's leave
	// holds while it waits for its broadcast): a node that left rejoins
	// no one.
	leaving atomic.Bool
}

// member is what Membership keeps of one alive node.
type member struct {
	gossip string // gossip host:port
	addr   string // client gRPC address, host substituted (see Meta)
	peer   string // peer gRPC address, host substituted; addr for version 1
	err    error  // undecodable metadata: left out of Members
	logged bool   // err has been logged
}

// The bounds of Config.ProbeInterval: below 100 ms a probe's ack would
// have under 40 ms (the probe timeout is two fifths of the interval);
// above a minute a crash would go unnoticed for several minutes.
const (
	MinProbeInterval = 100 * time.Millisecond
	MaxProbeInterval = time.Minute
)

// defaultProbeInterval keeps crash detection near 3 s (gossipConfig).
const defaultProbeInterval = 500 * time.Millisecond

// withDefaults is c with the defaults of its zero fields (Config).
func (c Config) withDefaults() Config {
	if c.BindAddr == "" {
		c.BindAddr = ":" + strconv.Itoa(DefaultPort)
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = defaultProbeInterval
	}
	if c.JoinRetry <= 0 {
		c.JoinRetry = time.Second
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = 30 * time.Second
	}
	if c.HealInterval == 0 {
		c.HealInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver.LookupHost
	}
	return c
}

// New checks cfg and fills in defaults. It starts nothing and
// binds no socket; Run does.
func New(cfg Config) (*Membership, error) {
	if cfg.NodeName == "" || len(cfg.NodeName) > 256 {
		return nil, errors.New("gossip: node name must be 1-256 bytes")
	}
	cfg = cfg.withDefaults()
	if cfg.ProbeInterval < MinProbeInterval || cfg.ProbeInterval > MaxProbeInterval {
		return nil, fmt.Errorf("gossip: probe interval %v outside [%v, %v]", cfg.ProbeInterval, MinProbeInterval, MaxProbeInterval)
	}
	meta, err := Meta{GRPCAddr: cfg.GRPCAddr, PeerAddr: cfg.PeerAddr}.MarshalBinary()
	if err != nil {
		return nil, err
	}
	host, port, err := splitBind(cfg.BindAddr)
	if err != nil {
		return nil, err
	}
	if cfg.AdvertiseAddr != "" {
		if _, _, err := splitAdvertise(cfg.AdvertiseAddr, 0); err != nil {
			return nil, err
		}
	}
	m := &Membership{meta: meta, bindHost: host, bindPort: port}
	if cfg.Keys != nil {
		if m.keyring, err = newKeyring(cfg.Keys); err != nil {
			return nil, err
		}
	}
	for i, s := range cfg.Seeds {
		sd, err := parseSeed(s)
		if err != nil {
			return nil, fmt.Errorf("gossip: seed %d of %d: %w", i+1, len(cfg.Seeds), err)
		}
		m.seeds = append(m.seeds, sd)
	}
	m.cfg, m.log = cfg, cfg.Logger
	m.started = make(chan struct{})
	m.changed = make(chan struct{}, 1)
	m.nameClaimed = make(chan struct{}, 1)
	m.deadWake = make(chan struct{}, 1)
	m.members = make(map[string]*member)
	m.dead = make(map[string]*deadMember)
	m.leftAt = make(map[string]time.Time)
	m.answer = make(map[string]string)
	m.notices = &memberlist.TransmitLimitedQueue{NumNodes: m.numMembers, RetransmitMult: retransmitMult}
	return m, nil
}

// Run starts memberlist (binding its sockets), joins the seeds in the
// background (see Config.Seeds, JoinRetry), looks for the members declared
// dead (see Config.HealInterval) and serves gossip until ctx is done. Then
// it shuts memberlist down without leaving (call Leave first for a
// graceful exit) and returns nil once its join and heal goroutines have
// exited and memberlist's sockets are closed. memberlist.Shutdown does not
// wait for memberlist's own goroutines: they see the shutdown and exit
// shortly after Run returns (a probe in flight when its ack timer fires, one
// probe interval, 0.5 s; a stream handler in flight within the 3 s TCP
// timeout). A ctx cancelled mid-join is noticed between join targets, so Run
// may take up to that TCP timeout to return. It fails only if memberlist
// cannot start. Run may be called once.
func (m *Membership) Run(ctx context.Context) error {
	if !m.ran.CompareAndSwap(false, true) {
		return errors.New("gossip: membership Run called twice")
	}
	if ctx.Err() != nil {
		return nil
	}
	conf, err := m.gossipConfig(ctx)
	if err != nil {
		return err
	}
	ml, err := memberlist.Create(conf) // calls NotifyJoin for us
	if err != nil {
		if t, ok := conf.Transport.(*socketTransport); ok {
			_ = t.Shutdown() // memberlist leaves it open when the advertise address fails
		}
		return fmt.Errorf("gossip: start gossip on %s: %w", m.cfg.BindAddr, err)
	}
	local := net.JoinHostPort(m.bindHost, strconv.Itoa(conf.BindPort))
	m.localAddr.Store(&local)
	m.ml.Store(ml)
	if len(m.seeds) == 0 {
		m.setJoined()
	}
	close(m.started)
	m.log.Info("gossip started", "name", m.cfg.NodeName, "bind", local, "advertise", m.selfGossip(), "seeds", m.cfg.Seeds)

	var wg sync.WaitGroup
	wg.Go(func() { m.joinLoop(ctx, ml) })
	if m.cfg.HealInterval > 0 {
		contact := func(ctx context.Context, targets []string) (int, int, error) { return m.contact(ctx, ml, targets) }
		wg.Go(func() { m.healLoop(ctx, knock(ml, m.cfg.NodeName), contact) })
	}
	<-ctx.Done()
	wg.Wait()

	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.down = true
	if err := ml.Shutdown(); err != nil { // idempotent; never leaves
		return fmt.Errorf("gossip: stop gossip: %w", err)
	}
	return nil
}

// Started is closed once Run has memberlist up: LocalAddr is known and the
// node answers gossip. It is never closed if Run fails to start or is not
// called, so wait on Run's result too.
func (m *Membership) Started() <-chan struct{} { return m.started }

// LocalAddr is the gossip host:port bound, the real port when BindAddr's is
// 0; the host is as configured ("0.0.0.0" for all interfaces). Empty before
// Started.
func (m *Membership) LocalAddr() string {
	if p := m.localAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Joined reports whether a join has succeeded: a seed answered, the seeds
// resolve to this node alone, or there are no seeds. It stays true after
// Leave and after Run returns.
func (m *Membership) Joined() bool { return m.joined.Load() }

// setJoined records a successful join and signals Changed, so that a
// watcher waiting for Joined needs no timer: the members a join brings
// were signalled before it was recorded.
func (m *Membership) setJoined() {
	m.joined.Store(true)
	m.signal(m.changed)
}

// Changed is signalled, without blocking and coalesced, each time a member
// joins, leaves or changes its metadata, when Run adds this node, and when
// Joined turns true. It has
// capacity 1 and is never closed: receive, then call Members.
func (m *Membership) Changed() <-chan struct{} { return m.changed }

// Members returns the alive members, this node included, sorted by name;
// Addr is each one's gRPC address. Members whose metadata cannot be decoded
// are left out and logged once. Before Run adds this node it returns this
// node alone with GRPCAddr as configured; after Leave this node is absent
// (it has left; the others route its keys); after Run returns it keeps the
// last view.
func (m *Membership) Members() []ring.Member {
	var bad []string
	var badErrs []error
	m.mu.Lock()
	out := make([]ring.Member, 0, len(m.members))
	for name, mb := range m.members {
		if mb.err == nil {
			out = append(out, ring.Member{Name: name, Addr: mb.addr, PeerAddr: mb.peer})
		} else if !mb.logged {
			mb.logged = true
			bad, badErrs = append(bad, name), append(badErrs, mb.err)
		}
	}
	m.mu.Unlock()
	for i, name := range bad {
		m.log.Warn("ignoring member with undecodable metadata", "member", name, "err", badErrs[i])
	}
	if m.ml.Load() == nil && len(out) == 0 {
		return []ring.Member{{Name: m.cfg.NodeName, Addr: m.cfg.GRPCAddr, PeerAddr: cmp.Or(m.cfg.PeerAddr, m.cfg.GRPCAddr)}}
	}
	slices.SortFunc(out, func(a, b ring.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Leave broadcasts that this node is leaving, so the others drop it at once
// instead of detecting a failure, and waits until the broadcast went out,
// no other member is left to hear it, or timeout passed (≤ 0 means 5 s).
// When the others leave at the same time (a whole cluster stopped at once)
// the broadcast has nowhere to go: that is not a failure, and Leave returns
// nil as soon as it sees no other member. Gossip keeps running until Run
// returns. Leave is idempotent and a no-op before Run starts memberlist or
// after it shut down; memberlist's own wait delays Run's shutdown until it
// ends.
func (m *Membership) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	m.lifeMu.Lock()
	ml := m.ml.Load()
	if ml == nil || m.down || m.left {
		m.lifeMu.Unlock()
		return nil
	}
	m.left = true
	m.leaving.Store(true)
	m.notices.QueueBroadcast(newLeftNotice(m.cfg.NodeName)) // rides with memberlist's own
	done := make(chan error, 1)
	go func() {
		// lifeMu is handed to this goroutine: Run must not shut memberlist
		// down under its Leave (memberlist panics on a leave after shutdown).
		defer m.lifeMu.Unlock()
		done <- ml.Leave(timeout)
	}()
	tick := time.NewTicker(leavePoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil && m.othersAlive() {
				return fmt.Errorf("gossip: leave gossip: %w", err)
			}
			return nil
		case <-tick.C:
			if !m.othersAlive() {
				return nil
			}
		}
	}
}

// leavePoll is how often Leave looks whether any other member is left.
const leavePoll = 20 * time.Millisecond

// othersAlive reports whether a member other than this node is alive.
func (m *Membership) othersAlive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.members {
		if name != m.cfg.NodeName {
			return true
		}
	}
	return false
}

// gossipAddrs returns the gossip addresses of the alive members.
func (m *Membership) gossipAddrs() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]bool, len(m.members))
	for _, mb := range m.members {
		out[mb.gossip] = true
	}
	return out
}

// numMembers counts the alive members, this node included. The hooks add a
// node when memberlist marks it alive and drop it when memberlist marks it
// dead or left, so this equals memberlist's NumMembers.
func (m *Membership) numMembers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.members)
}

// randomMembers returns the gossip addresses of up to n other members.
func (m *Membership) randomMembers(n int) []string {
	m.mu.Lock()
	var all []string
	for name, mb := range m.members {
		if name != m.cfg.NodeName {
			all = append(all, mb.gossip)
		}
	}
	m.mu.Unlock()
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// selfGossip is the gossip address this node advertises; empty before Run.
func (m *Membership) selfGossip() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mb := m.members[m.cfg.NodeName]; mb != nil {
		return mb.gossip
	}
	return ""
}

// isSelf reports whether target ("ip:port") is this node's gossip address.
func (m *Membership) isSelf(target string) bool {
	return target == m.selfGossip() || target == m.LocalAddr()
}

// DeathsRefuted returns how many messages declaring this node dead it has
// refuted since New. A message that does not come from this node's own
// previous run (a restart under its name) means members that this node
// still held alive held it dead, took its keys over and decided them,
// while this node's ring never changed: a partition that healed before
// this node noticed it, or a pause longer than failure detection. Each
// refutation signals Changed, so the ring's user can take back from them
// what they decided (peer: a rejoin).
func (m *Membership) DeathsRefuted() uint64 { return m.refutes.Load() }

func (m *Membership) noteDeathRefuted() {
	m.refutes.Add(1)
	m.signal(m.changed)
}

func (m *Membership) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Failure detection. memberlist's LAN profile notices a crashed node in
// about 5-10 s (1 s probes, suspicion 4 × 1 s); we want ≈3 s and at most
// ~5 s for 3-5 nodes, so:
//
//	ProbeInterval  500 ms  each node probes one peer per interval, round-robin
//	                       (Config.ProbeInterval; the figures below are at
//	                       500 ms and scale with it)
//	ProbeTimeout   200 ms  direct UDP ack; then indirect pings via 3 peers and
//	                       a TCP ping until the interval ends (2/5 of the
//	                       interval)
//	SuspicionMult  3       suspect → dead after 3 × 0.5 s × max(1, log10 n)
//	                       = 1.5 s for n ≤ 10, once one other node confirms
//	                       (k = SuspicionMult-2 = 1); with no confirmation
//	                       SuspicionMaxTimeoutMult × 1.5 s = 3 s (below)
//	GossipInterval 500 ms  suspect/dead/alive spread to 3 nodes per round;
//	                       news also rides on every probe and ack (memberlist
//	                       piggybacks queued broadcasts on each packet), so a
//	                       round is only a second path and need not be fast
//
// Crash at t0 (sockets gone), n nodes, n-1 survivors probing round-robin:
//
//	first probe of the dead node  ≤ (n-1) × 0.5 s   (0.5-1 s typical)
//	that probe fails              + 0.5 s          → suspect, sent on
//	a second survivor confirms    its own probe, also within (n-1)×0.5 s + 0.5 s
//	suspicion timeout             + 1.5 s          → dead, spread in ~0.2-0.5 s
//
// n = 3: ≈ 2.5-3.5 s; n = 5: worst ≈ 2 + 0.5 + 1.5 + 0.5 ≈ 4.5 s
// (TestMembershipCrashDetected logs 2.5-3.0 s for 3 nodes and 2.2-3.2 s
// for 5; at a 200 ms gossip round it was 2.3 s and 2.1-3.8 s). A live
// node that misses a probe (loss, a pause) has 1.5 s, 3 gossip rounds and
// its own probes, to refute.
//
// A node cut off from all the others (a partition of one, its own link
// down) gets no confirmation: it is the only one to suspect each peer, so
// each verdict waits for the unconfirmed timeout, and memberlist's health
// score of the node itself (awareness), raised by its unanswered probes,
// stretches its probe interval too. At the LAN profile's
// SuspicionMaxTimeoutMult of 4 (6 s) such a node declared the others dead
// 6.5-7.5 s after the cut, while they declared it dead after 2-2.3 s
// (TestPartitionHealsWithinSeconds in cmd/shardlimiter); at 2 (3 s) it
// takes 4.5-6.8 s. Until its verdict it still forwards to owners it
// cannot reach, and each forward waits for its timeout before the fail
// policy decides: the wait costs latency, not admission. What the
// unconfirmed timeout guards against is a node whose own trouble
// (overload, a lossy link) makes it suspect healthy peers: its verdict
// spreads, and the victims must refute it; 3 s is still six gossip rounds
// and six of the victim's own probes to refute in.
//
// Idle cost: 2 probes/s per node (and the acks), and 2 gossip rounds/s
// that wake memberlist and send only pending news. Each wake-up also
// wakes the Go scheduler's other thread and sysmon, so it costs far more
// than its own work (a bare 500 ms ticker costs about 100 µs of CPU per
// tick on the development VM). The probes are most of it: the gossip
// round fires with the probe (both tickers start together), while a
// probe wakes the prober for its ack and the probed node for the ping.
// An idle member of three used 33-42 ms of CPU per 20 s at 500 ms probes,
// 24-28 ms at 1 s and 13-18 ms at 5 s, where gubernator (memberlist's WAN
// profile, 5 s probes) used 10-14 ms in most rounds; a member alone 9-10 ms
// (docs/PERFORMANCE.md, "Idle against the probe interval"). The search
// for dead members (heal.go) adds nothing while every member is alive.
// Compression is off: memberlist compresses each packet with a fresh LZW
// writer (a 6.5 MB allocation per 20 s for pings and acks of a few dozen
// bytes, so a garbage collection every few seconds on an idle node), and a
// LAN has no use for it; a node with compression on still reads ours, and
// we read its compressed packets. PushPullInterval (30 s) and
// GossipToTheDeadTime (30 s) keep the LAN figures: a full state exchange
// with an alive member every 30 s per node is the anti-entropy. Neither
// reaches a member declared dead once the news of its death is spent, so
// a healed partition merges through healLoop (heal.go).
//
// DeadNodeReclaimTime lets a node restarted under the same name at a new
// address take its name back 0.5 s after the old entry is declared dead
// (memberlist's default 0 never lets it); reclaimName keeps pushing until
// then. TCPTimeout (10 s in the LAN profile) bounds a join attempt and
// push/pull on a LAN, where state for hundreds of nodes moves in
// milliseconds.
func (m *Membership) gossipConfig(ctx context.Context) (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = m.cfg.NodeName
	c.BindAddr, c.BindPort = m.bindHost, m.bindPort
	c.AdvertisePort = m.bindPort
	if m.cfg.AdvertiseAddr != "" {
		host, port, err := splitAdvertise(m.cfg.AdvertiseAddr, m.bindPort)
		if err != nil {
			return nil, err
		}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			ips, err := m.cfg.Resolver(rctx, host)
			cancel()
			if err == nil && len(ips) == 0 {
				err = errors.New("no addresses")
			}
			if err != nil {
				return nil, fmt.Errorf("gossip: resolve advertise address %s: %w", host, err)
			}
			host = ips[0]
		}
		c.AdvertiseAddr, c.AdvertisePort = host, port
	}
	c.ProbeInterval = m.cfg.ProbeInterval
	c.ProbeTimeout = m.cfg.ProbeInterval * 2 / 5
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 500 * time.Millisecond
	if m.cfg.GossipInterval > 0 {
		c.GossipInterval = m.cfg.GossipInterval
	}
	if m.cfg.GossipNodes > 0 {
		c.GossipNodes = m.cfg.GossipNodes
	}
	c.DeadNodeReclaimTime = 500 * time.Millisecond
	c.TCPTimeout = 3 * time.Second
	c.EnableCompression = false
	h := &hooks{m: m}
	c.Delegate, c.Events, c.Conflict, c.Merge = h, h, h, h
	c.Logger = gossipLogger(m.log, &m.rejected, m.noteDeathRefuted)
	mk := m.cfg.Transport
	if m.testTransport != nil {
		mk = m.testTransport
	}
	if mk == nil {
		mk = newSocketTransport
	}
	var err error
	if c.Transport, err = mk(c); err != nil {
		return nil, err
	}
	if m.keyring != nil {
		// GossipVerifyIncoming and GossipVerifyOutgoing stay true (the
		// default): plaintext is neither accepted nor sent.
		c.Keyring = m.keyring
	}
	return c, nil
}

// splitBind parses BindAddr: host:port with an IP, "localhost" or empty host.
func splitBind(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: bind address %q: %w", addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: bind address %q: port must be 0-65535", addr)
	}
	switch {
	case host == "":
		host = "0.0.0.0"
	case host == "localhost":
		host = "127.0.0.1"
	case net.ParseIP(host) == nil:
		return "", 0, fmt.Errorf("gossip: bind address %q: host must be an IP address", addr)
	}
	return host, int(n), nil
}

// splitAdvertise parses AdvertiseAddr, "host" or "host:port"; a bare host
// gets port def.
func splitAdvertise(addr string, def int) (host string, port int, err error) {
	if net.ParseIP(strings.Trim(addr, "[]")) != nil || !strings.Contains(addr, ":") {
		host = strings.Trim(addr, "[]")
		if net.ParseIP(host) == nil && !isDNSName(host) {
			return "", 0, fmt.Errorf("gossip: advertise address %q is not an IP address or a DNS name", addr)
		}
		return host, def, nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: advertise address %q: %w", addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || (net.ParseIP(host) == nil && !isDNSName(host)) {
		return "", 0, fmt.Errorf("gossip: advertise address %q: want host or host:port with port 1-65535", addr)
	}
	return host, int(n), nil
}

// hooks receives memberlist's callbacks. memberlist calls them from its own
// goroutines, often holding its node lock, so none of them may block or call
// back into memberlist: each does a short critical section on Membership.mu
// and a non-blocking send at most. The Delegate methods are in meta.go,
// NotifyConflict in join.go.
type hooks struct{ m *Membership }

var (
	_ memberlist.Delegate         = (*hooks)(nil)
	_ memberlist.EventDelegate    = (*hooks)(nil)
	_ memberlist.ConflictDelegate = (*hooks)(nil)
	_ memberlist.MergeDelegate    = (*hooks)(nil)
)

// NotifyMerge is called when a join (a seed join, a knock answered,
// heal.go) is about to merge a member's view of the cluster: if that
// member holds this node dead, it has taken this node's keys over and
// decided them, though this node may never have noticed (see
// DeathsRefuted). memberlist merges a dead entry as a suspicion and
// refutes it as such, so its log does not tell this case apart; the view
// does. The merge always goes on.
func (h *hooks) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if p.Name == h.m.cfg.NodeName && p.State == memberlist.StateDead {
			h.m.noteDeathRefuted()
		}
	}
	return nil
}

// NotifyJoin, NotifyLeave and NotifyUpdate are called with memberlist's node
// lock held, one at a time and in order, from several goroutines; n is only
// valid during the call.
func (h *hooks) NotifyJoin(n *memberlist.Node)   { h.m.upsert(n) }
func (h *hooks) NotifyUpdate(n *memberlist.Node) { h.m.upsert(n) }
func (h *hooks) NotifyLeave(n *memberlist.Node) {
	h.m.mu.Lock()
	delete(h.m.members, n.Name)
	h.m.markDeadLocked(n, time.Now())
	h.m.mu.Unlock()
	h.m.signal(h.m.changed)
}

// upsert records n as alive; its gRPC address comes from its metadata.
func (m *Membership) upsert(n *memberlist.Node) {
	mb := &member{gossip: n.Address()}
	var meta Meta
	if mb.err = meta.UnmarshalBinary(n.Meta); mb.err == nil {
		mb.addr = resolveGRPCAddr(meta.GRPCAddr, n.Addr)
		mb.peer = mb.addr
		if meta.PeerAddr != "" {
			mb.peer = resolveGRPCAddr(meta.PeerAddr, n.Addr)
		}
	}
	m.mu.Lock()
	if old := m.members[n.Name]; old != nil && old.err != nil && mb.err != nil {
		mb.logged = old.logged // same trouble: do not log it again
	}
	m.members[n.Name] = mb
	m.aliveLocked(n)
	m.mu.Unlock()
	m.signal(m.changed)
}
