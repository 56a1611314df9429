package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// metaVersion is the metadata encoding this build writes.
const metaVersion = 2

// metaFirstIncompatible is the first version number reserved for layouts that
// do not start with the version-1 fields (see Meta).
const metaFirstIncompatible = 128

// ErrMetaVersion reports node metadata in a layout this build cannot read.
var ErrMetaVersion = errors.New("gossip: unsupported node metadata version")

// Meta is what a node publishes about itself in its gossip metadata
// (memberlist's Node.Meta). Encoded, it must fit in memberlist.MetaMaxSize
// (512) bytes; New checks that.
//
// Encoding. Byte 0 is the version, then length-prefixed (uvarint) strings.
// Version 1 has one: GRPCAddr. Version 2 appends PeerAddr. Later versions
// 3..127 must keep these fields first and only append, so a reader decodes
// any version in 1..127 it does not know by reading the fields it knows and
// ignoring the rest: an old node keeps routing to a newer one. A layout
// that cannot keep that prefix must use a version from 128 up; readers that
// do not know it fail with ErrMetaVersion rather than guess. Version 0,
// truncated fields, trailing bytes in a known version and an invalid
// address are errors.
type Meta struct {
	// GRPCAddr is the host:port of the client API. An empty or unspecified
	// host (":8081", "0.0.0.0:8081", "[::]:8081") means "the address I
	// gossip from": Membership.Members substitutes the node's gossip IP.
	GRPCAddr string
	// PeerAddr is the host:port peers forward checks and move state to,
	// with the same host rule. Empty (version 1, written by a node that
	// served peers on its client port) means GRPCAddr.
	PeerAddr string
}

// MarshalBinary encodes m in the current version.
func (m Meta) MarshalBinary() ([]byte, error) {
	if err := checkGRPCAddr(m.GRPCAddr); err != nil {
		return nil, err
	}
	if m.PeerAddr != "" {
		if err := checkGRPCAddr(m.PeerAddr); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(m.GRPCAddr)+len(m.PeerAddr))
	b = append(b, metaVersion)
	b = binary.AppendUvarint(b, uint64(len(m.GRPCAddr)))
	b = append(b, m.GRPCAddr...)
	b = binary.AppendUvarint(b, uint64(len(m.PeerAddr)))
	b = append(b, m.PeerAddr...)
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip: node metadata is %d bytes, over memberlist's limit of %d: addresses too long", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// UnmarshalBinary decodes b, written by this or a compatible version.
func (m *Meta) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		return errors.New("gossip: node metadata is empty")
	}
	v := b[0]
	switch {
	case v == 0:
		return errors.New("gossip: node metadata version 0 is invalid")
	case v >= metaFirstIncompatible:
		return fmt.Errorf("gossip: node metadata version %d: %w", v, ErrMetaVersion)
	}
	rest := b[1:]
	addr, rest, ok := cutField(rest)
	if !ok {
		return fmt.Errorf("gossip: node metadata version %d: truncated gRPC address", v)
	}
	if err := checkGRPCAddr(addr); err != nil {
		return err
	}
	var peerAddr string
	if v >= 2 {
		if peerAddr, rest, ok = cutField(rest); !ok {
			return fmt.Errorf("gossip: node metadata version %d: truncated peer address", v)
		}
		if peerAddr != "" {
			if err := checkGRPCAddr(peerAddr); err != nil {
				return err
			}
		}
	}
	if v <= metaVersion && len(rest) != 0 {
		return fmt.Errorf("gossip: node metadata version %d: %d trailing bytes", v, len(rest))
	}
	m.GRPCAddr, m.PeerAddr = addr, peerAddr
	return nil
}

// cutField splits a uvarint-length-prefixed string off b.
func cutField(b []byte) (field string, rest []byte, ok bool) {
	n, size := binary.Uvarint(b)
	if size <= 0 || n > uint64(len(b)-size) {
		return "", nil, false
	}
	return string(b[size : size+int(n)]), b[size+int(n):], true
}

// checkGRPCAddr accepts host:port with a port in 1..65535; the host may be
// empty or unspecified (see Meta.GRPCAddr).
func checkGRPCAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("gossip: gRPC address %q: %w", addr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("gossip: gRPC address %q: port must be 1-65535", addr)
	}
	return nil
}

// resolveGRPCAddr returns the address peers dial for a node whose metadata
// says addr and whose gossip IP is ip: addr itself, or, when addr's host is
// empty or unspecified, ip with addr's port.
func resolveGRPCAddr(addr string, ip net.IP) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || ip == nil {
		return addr
	}
	if h := net.ParseIP(host); host != "" && (h == nil || !h.IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(ip.String(), port)
}

// NodeMeta returns this node's encoded Meta. Called concurrently, when an
// alive message is built; the slice is shared and never modified.
// New checked it fits memberlist.MetaMaxSize; should memberlist
// ever ask for less, nothing is published rather than a truncated record.
func (h *hooks) NodeMeta(limit int) []byte {
	if len(h.m.meta) > limit {
		return nil
	}
	return h.m.meta
}

// NotifyMsg and GetBroadcasts carry the leave notices (heal.go), from
// memberlist's packet and gossip goroutines, concurrently; neither blocks.
func (h *hooks) NotifyMsg(b []byte) { h.m.noticeReceived(b) }
func (h *hooks) GetBroadcasts(overhead, limit int) [][]byte {
	return h.m.notices.GetBroadcasts(overhead, limit)
}

// LocalState and MergeRemoteState carry push/pull user state, which
// Membership does not use.
func (h *hooks) LocalState(bool) []byte            { return nil }
func (h *hooks) MergeRemoteState(_ []byte, _ bool) {}
