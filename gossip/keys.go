package gossip

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// ParseKeys reads a gossip key file: one base64 AES key (16, 24 or 32
// bytes once decoded) per line, the first line the primary key, which
// encrypts; every key decrypts. Blank lines and lines starting with # are
// skipped; a key listed twice is kept once, at its first place. The error
// names the line of the first bad key but never prints key material.
func ParseKeys(file []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(file), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("gossip: key file line %d: not base64", i+1)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("gossip: key file line %d: a key must be 16, 24 or 32 bytes, got %d", i+1, len(k))
		}
		if !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip: key file holds no key")
	}
	return keys, nil
}

// checkKeys validates keys as Config.Keys and SetKeys take them.
func checkKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("gossip: no keys")
	}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("gossip: key %d of %d: a key must be 16, 24 or 32 bytes, got %d", i+1, len(keys), len(k))
		}
	}
	return nil
}

// newKeyring builds memberlist's keyring from keys, the first primary.
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	return memberlist.NewKeyring(keys[1:], keys[0])
}

// SetKeys replaces the gossip keys while gossip runs: keys[0] becomes the
// primary (it encrypts from now on), every key in keys decrypts, and keys not
// in keys no longer do. memberlist's keyring is safe for concurrent use,
// and the steps go add, then switch the primary, then remove, so a message
// in flight under any key that stays is never refused.
//
// Rotation without downtime takes three updates of every node's keys, each
// waiting until all nodes have the previous one: add the new key second,
// make it first, drop the old one. SetKeys fails if Config.Keys was nil
// (encryption cannot be turned on at run time) or a key is not 16, 24 or
// 32 bytes; the keys then stay as they were.
func (m *Membership) SetKeys(keys [][]byte) error {
	if m.keyring == nil {
		return errors.New("gossip: encryption is off (started without keys); restart with keys to turn it on")
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.keyring.AddKey(k); err != nil {
			return fmt.Errorf("gossip: add key: %w", err)
		}
	}
	if err := m.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: use key: %w", err)
	}
	for _, old := range m.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := m.keyring.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip: remove key: %w", err)
			}
		}
	}
	return nil
}

// Encrypted reports whether gossip is encrypted (Config.Keys was set).
func (m *Membership) Encrypted() bool { return m.keyring != nil }

// Reasons gossip from another node is refused, as Rejected counts them.
const (
	RejectedWrongKey  = "wrong_key" // no key this node holds opens it: another key, or garbage
	RejectedPlaintext = "plaintext" // not encrypted, and this node requires it
	RejectedEncrypted = "encrypted" // encrypted, and this node has no keys
)

// RejectedReasons lists the reasons Rejected takes, in a fixed order.
var RejectedReasons = []string{RejectedWrongKey, RejectedPlaintext, RejectedEncrypted}

// rejections counts refused gossip by reason; memberlist reports refusals
// only in its log, so gossipLogger classifies its lines (see rejectReason).
type rejections [3]atomic.Uint64

// Rejected returns how many gossip messages and streams from other nodes
// were refused for reason (one of RejectedReasons) since New; a node
// without the cluster's key shows up here on every node it tries to reach.
func (m *Membership) Rejected(reason string) uint64 {
	if i := slices.Index(RejectedReasons, reason); i >= 0 {
		return m.rejected[i].Load()
	}
	return 0
}

// rejectReason classifies one memberlist log line: the index in
// RejectedReasons of the refusal it reports, or -1. The phrases are
// memberlist v0.7.0's (net.go: readStream, ingestPacket; security.go:
// decryptPayload); a test pins them against the real library.
func rejectReason(line []byte) int {
	switch {
	case bytes.Contains(line, []byte("remote state is not encrypted")),
		bytes.Contains(line, []byte("Decrypt packet failed: unsupported encryption version")):
		// A plaintext packet's first byte is its message type, read as an
		// encryption version: types 0 and 1 fail as undecryptable instead.
		return 1
	case bytes.Contains(line, []byte("could decrypt")),
		bytes.Contains(line, []byte("Decrypt packet failed")):
		return 0
	case bytes.Contains(line, []byte("encryption is not configured")):
		return 2
	}
	return -1
}
