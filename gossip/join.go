package gossip

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the gossip port of a seed given without one.
const DefaultPort = 7946

const (
	// joinWarnEvery: a failing join logs at Warn on the first attempt and
	// every joinWarnEvery-th after it; the others log at Debug.
	joinWarnEvery = 10
	// resolveTimeout bounds one seed lookup.
	resolveTimeout = 5 * time.Second
	// reclaimWindow is how long reclaimName keeps pushing this node's state
	// after another address claimed its name: longer than the cluster
	// takes to declare a crashed node dead (see gossipConfig), so that at
	// least one push lands after the verdict.
	reclaimWindow = 20 * time.Second
	// reclaimFanout is how many random members reclaimName pushes to per
	// round besides the seeds, in case no seed is up.
	reclaimFanout = 2
)

// seed is one Seeds entry, checked by New.
type seed struct {
	host string // IP literal or DNS name, without brackets
	port string
	ip   bool // host is an IP literal: joined without a lookup
}

// parseSeed accepts "host:port", "host", "[v6]:port", "[v6]" and a bare IP
// literal ("::1"); host is an IP or a DNS name; the port is 1-65535.
func parseSeed(s string) (seed, error) {
	raw := s
	s = strings.TrimSpace(s)
	if s == "" {
		return seed{}, errors.New("gossip: seed is empty")
	}
	host, port := s, strconv.Itoa(DefaultPort)
	switch {
	case net.ParseIP(s) != nil:
		// A bare literal, IPv6 included: its colons are not a port.
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		host = s[1 : len(s)-1]
		if net.ParseIP(host) == nil {
			return seed{}, fmt.Errorf("gossip: seed %q: brackets hold no IP address", raw)
		}
	case strings.Contains(s, ":"):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return seed{}, fmt.Errorf("gossip: seed %q: %w", raw, err)
		}
		host, port = h, p
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return seed{}, fmt.Errorf("gossip: seed %q: port must be 1-65535", raw)
	}
	if net.ParseIP(host) != nil {
		return seed{host: host, port: port, ip: true}, nil
	}
	if strings.HasPrefix(s, "[") {
		return seed{}, fmt.Errorf("gossip: seed %q: brackets hold no IP address", raw)
	}
	if !isDNSName(host) {
		return seed{}, fmt.Errorf("gossip: seed %q: %q is not an IP address or a DNS name", raw, host)
	}
	return seed{host: host, port: port}, nil
}

// isDNSName reports whether s is a plausible host name: dot-separated labels
// of 1-63 letters, digits, '-' or '_', 253 bytes at most, one trailing dot
// allowed.
func isDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// seedTargets resolves the seeds now into distinct "ip:port" join targets,
// in seed order; a DNS name contributes every address it resolves to. Seeds
// that fail to resolve are reported in err; the others are still returned.
func (m *Membership) seedTargets(ctx context.Context) ([]string, error) {
	var out []string
	var errs []error
	for _, s := range m.seeds {
		hosts := []string{s.host}
		if !s.ip {
			rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			hs, err := m.cfg.Resolver(rctx, s.host)
			cancel()
			if err == nil && len(hs) == 0 {
				err = errors.New("no addresses")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("gossip: resolve seed %s: %w", s.host, err))
				continue
			}
			hosts = hs
		}
		for _, h := range hosts {
			ip := net.ParseIP(h)
			if ip == nil {
				errs = append(errs, fmt.Errorf("gossip: seed %s resolved to %q, not an IP address", s.host, h))
				continue
			}
			out = appendNew(out, net.JoinHostPort(ip.String(), s.port))
		}
	}
	return out, errors.Join(errs...)
}

// contactFunc is one contact step of the join loops: it joins targets and
// reports how many answered and how many were tried (see contact). The loops
// take it as a parameter so that their schedule can be tested in a synctest
// bubble, with a fake step and without memberlist or a network.
type contactFunc func(ctx context.Context, targets []string) (ok, tried int, err error)

// contact pushes this node's state to each target (a memberlist join: a full
// state exchange over TCP), skipping this node's own addresses. Targets are
// joined one at a time so ctx is checked between them; each may take up to
// memberlist's TCPTimeout. It returns how many answered and how many were
// tried.
func (m *Membership) contact(ctx context.Context, ml *memberlist.Memberlist, targets []string) (ok, tried int, err error) {
	var errs []error
	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}
		if m.isSelf(t) {
			continue
		}
		tried++
		if _, jerr := ml.Join([]string{t}); jerr != nil {
			errs = append(errs, fmt.Errorf("gossip: join %s: %w", t, jerr))
			continue
		}
		ok++
	}
	return ok, tried, errors.Join(errs...)
}

// joinLoop joins the seeds, then keeps this node joined until ctx is done.
// Run starts it, and healLoop (heal.go), besides memberlist's own goroutines.
func (m *Membership) joinLoop(ctx context.Context, ml *memberlist.Memberlist) {
	contact := func(ctx context.Context, targets []string) (int, int, error) { return m.contact(ctx, ml, targets) }
	if len(m.seeds) > 0 && !m.joinSeeds(ctx, contact) {
		return
	}
	var rejoin <-chan time.Time
	if m.cfg.RejoinInterval > 0 {
		t := time.NewTicker(m.cfg.RejoinInterval)
		defer t.Stop()
		rejoin = t.C
	}
	for ctx.Err() == nil { // select picks at random among ready cases
		select {
		case <-ctx.Done():
			return
		case <-rejoin:
			if !m.leaving.Load() {
				m.rejoinMissing(ctx, contact)
			}
		case <-m.nameClaimed:
			if !m.leaving.Load() {
				m.reclaimName(ctx, contact)
			}
		}
	}
}

// joinSeeds tries every JoinRetry (±20 %) until a seed answers, or until
// the seeds resolve to this node alone (it is the first of its cluster). It
// reports false if ctx ended first. Each attempt resolves the seeds again
// and hands the targets to contact.
func (m *Membership) joinSeeds(ctx context.Context, contact contactFunc) bool {
	for attempt := 1; ; attempt++ {
		m.joinAttempts.Add(1)
		targets, err := m.seedTargets(ctx)
		ok, tried, cerr := contact(ctx, targets)
		err = errors.Join(err, cerr)
		switch {
		case ok > 0:
			m.setJoined()
			m.log.Info("joined the cluster", "contacted", ok, "attempts", attempt, "members", m.numMembers())
			return true
		case tried == 0 && err == nil:
			m.setJoined()
			m.log.Info("seeds resolve to this node only: starting a new cluster", "seeds", m.cfg.Seeds)
			return true
		case ctx.Err() != nil:
			return false
		}
		if attempt%joinWarnEvery == 1 {
			msg := "join failed, retrying"
			if err != nil && rejectReason([]byte(err.Error())) >= 0 {
				msg = "join failed: the cluster refused this node's gossip; its gossip keys (--gossip-key-file) do not match the cluster's; retrying"
			}
			m.log.Warn(msg, "attempt", attempt, "retry", m.cfg.JoinRetry, "err", err)
		} else {
			m.log.Debug("join failed, retrying", "attempt", attempt, "err", err)
		}
		if !sleepCtx(ctx, jitter(m.cfg.JoinRetry)) {
			return false
		}
	}
}

// rejoinMissing joins the seed addresses that are not alive members. Nodes
// that started together and each found only themselves, and the halves of a
// partition that outlasted memberlist's gossip to the dead, merge this way.
func (m *Membership) rejoinMissing(ctx context.Context, contact contactFunc) {
	targets, err := m.seedTargets(ctx)
	known := m.gossipAddrs()
	missing := targets[:0]
	for _, t := range targets {
		if !known[t] {
			missing = append(missing, t)
		}
	}
	ok, tried, cerr := contact(ctx, missing)
	if ok > 0 {
		m.log.Info("rejoined seeds that were not members", "contacted", ok, "tried", tried)
	}
	if err = errors.Join(err, cerr); err != nil {
		m.log.Debug("rejoin", "tried", tried, "err", err)
	}
}

// reclaimName runs when another address claims this node's name. Usually
// that is this node's previous process: it crashed and this one restarted
// with a new address before the cluster declared the old one dead.
// memberlist ignores our alive messages while the old entry is alive or
// suspect, and once it is dead nobody tells us, so we would stay invisible to
// the others until the next periodic push/pull. For reclaimWindow we
// therefore push our state to the seeds and a few members every JoinRetry;
// the first push that lands after the old entry is declared dead (plus
// DeadNodeReclaimTime) wins. A claim still reported in the last round comes
// from another live node with our name: a configuration error, logged.
func (m *Membership) reclaimName(ctx context.Context, contact contactFunc) {
	m.log.Warn("another address claims this node's name; pushing our state until the cluster takes it", "name", m.cfg.NodeName)
	claimed := false
	for end := time.Now().Add(reclaimWindow); time.Now().Before(end); {
		before := m.claims.Load()
		targets, _ := m.seedTargets(ctx)
		for _, a := range m.randomMembers(reclaimFanout) {
			targets = appendNew(targets, a)
		}
		contact(ctx, targets)
		claimed = m.claims.Load() != before
		if !sleepCtx(ctx, jitter(m.cfg.JoinRetry)) {
			return
		}
	}
	select {
	case <-m.nameClaimed: // counted in the rounds above
	default:
	}
	if claimed {
		m.log.Error("another live node gossips under this node's name; node names must be unique", "name", m.cfg.NodeName)
	}
}

// NotifyConflict is called, node lock held, when other claims the name of
// existing from a different address. memberlist keeps existing and logs the
// conflict itself; when the name is ours, the join goroutine is woken to push
// our state (reclaimName).
func (h *hooks) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name != h.m.cfg.NodeName {
		return
	}
	h.m.claims.Add(1)
	h.m.signal(h.m.nameClaimed)
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// jitter spreads d by ±20 % so restarted nodes do not retry in step.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// sleepCtx waits for d or for ctx; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
