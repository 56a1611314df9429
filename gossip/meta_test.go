package gossip

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{
		"10.0.0.7:8081",
		"[fd00::7]:8081",
		"limiter-0.limiter.default.svc.cluster.local:8081",
		":8081",
		"0.0.0.0:1",
	} {
		for _, in := range []Meta{{GRPCAddr: addr}, {GRPCAddr: addr, PeerAddr: addr}, {GRPCAddr: addr, PeerAddr: "10.9.9.9:8082"}} {
			b, err := in.MarshalBinary()
			if err != nil {
				t.Fatalf("%+v.MarshalBinary() error: %v", in, err)
			}
			if b[0] != metaVersion {
				t.Errorf("%+v: version byte %d, want %d", in, b[0], metaVersion)
			}
			var got Meta
			if err := got.UnmarshalBinary(b); err != nil || got != in {
				t.Errorf("UnmarshalBinary(Marshal(%+v)) = %+v, %v; want it back", in, got, err)
			}
		}
	}
}

// field encodes one length-prefixed string as the metadata does.
func field(s string) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(s))), s...)
}

// encodeVersion writes addr as version v would: the version-1 fields, then
// extra.
func encodeVersion(v byte, addr string, extra []byte) []byte {
	b := []byte{v}
	b = binary.AppendUvarint(b, uint64(len(addr)))
	b = append(b, addr...)
	return append(b, extra...)
}

func TestMetaVersions(t *testing.T) {
	t.Parallel()
	const addr = "10.0.0.7:8081"
	tests := []struct {
		name    string
		in      []byte
		want    string // GRPCAddr when no error
		peer    string // PeerAddr when no error
		wantErr string
		version bool // error is ErrMetaVersion
	}{
		{name: "v1", in: encodeVersion(1, addr, nil), want: addr},
		{name: "v2 appends the peer address", in: encodeVersion(2, addr, field("10.0.0.7:8082")), want: addr, peer: "10.0.0.7:8082"},
		{name: "v2 empty peer address", in: encodeVersion(2, addr, field("")), want: addr},
		{name: "v2 bad peer address", in: encodeVersion(2, addr, field("x")), wantErr: "address"},
		{name: "v2 without peer field", in: encodeVersion(2, addr, nil), wantErr: "truncated peer"},
		{name: "v2 trailing bytes", in: encodeVersion(2, addr, append(field(""), 0)), wantErr: "trailing"},
		{name: "v3 appends a field: read the v2 prefix", in: encodeVersion(3, addr, append(field(":8082"), field("abc")...)), want: addr, peer: ":8082"},
		{name: "v127 still compatible", in: encodeVersion(127, addr, append(field(""), 0xff)), want: addr},
		{name: "v128 incompatible layout", in: encodeVersion(128, addr, nil), version: true, wantErr: "version 128"},
		{name: "v255", in: []byte{255, 1, 2, 3}, version: true, wantErr: "version 255"},
		{name: "v0", in: encodeVersion(0, addr, nil), wantErr: "version 0"},
		{name: "empty", in: nil, wantErr: "empty"},
		{name: "no length", in: []byte{1}, wantErr: "truncated"},
		{name: "short address", in: encodeVersion(1, addr, nil)[:6], wantErr: "truncated"},
		{name: "v1 trailing bytes", in: encodeVersion(1, addr, []byte{0}), wantErr: "trailing"},
		{name: "v2 bad address", in: encodeVersion(2, "no-port", field("")), wantErr: "gRPC address"},
		{name: "port 0", in: encodeVersion(1, "h:0", nil), wantErr: "port"},
	}
	for _, tt := range tests {
		var got Meta
		err := got.UnmarshalBinary(tt.in)
		switch {
		case tt.wantErr == "" && (err != nil || got.GRPCAddr != tt.want || got.PeerAddr != tt.peer):
			t.Errorf("%s: UnmarshalBinary(%x) = %+v, %v; want %q", tt.name, tt.in, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: UnmarshalBinary(%x) error = %v, want one containing %q", tt.name, tt.in, err, tt.wantErr)
		case tt.version != errors.Is(err, ErrMetaVersion):
			t.Errorf("%s: errors.Is(%v, ErrMetaVersion) = %v, want %v", tt.name, err, !tt.version, tt.version)
		}
	}
}

func TestMetaSizeLimit(t *testing.T) {
	t.Parallel()
	// version byte + 2-byte uvarint length + address + empty peer address
	// (1 byte) ≤ MetaMaxSize.
	maxAddr := memberlist.MetaMaxSize - 4
	fits := strings.Repeat("a", maxAddr-len(":8081")) + ":8081"
	if b, err := (Meta{GRPCAddr: fits}).MarshalBinary(); err != nil || len(b) != memberlist.MetaMaxSize {
		t.Errorf("Marshal(%d-byte address) = %d bytes, %v; want exactly %d, nil", len(fits), len(b), err, memberlist.MetaMaxSize)
	}
	over := "a" + fits
	if _, err := (Meta{GRPCAddr: over}).MarshalBinary(); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Marshal(%d-byte address) error = %v, want over the limit", len(over), err)
	}
	_, err := New(Config{NodeName: "n", GRPCAddr: over})
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("New with a %d-byte gRPC address: error = %v, want over the limit", len(over), err)
	}
}

func TestMetaResolveGRPCAddr(t *testing.T) {
	t.Parallel()
	ip := net.ParseIP("10.1.2.3")
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.7:8081", "10.0.0.7:8081"},
		{"node-a.test:8081", "node-a.test:8081"},
		{":8081", "10.1.2.3:8081"},
		{"0.0.0.0:8081", "10.1.2.3:8081"},
		{"[::]:8081", "10.1.2.3:8081"},
	} {
		if got := resolveGRPCAddr(tt.in, ip); got != tt.want {
			t.Errorf("resolveGRPCAddr(%q, %v) = %q, want %q", tt.in, ip, got, tt.want)
		}
	}
	if got := resolveGRPCAddr(":8081", net.ParseIP("fd00::1")); got != "[fd00::1]:8081" {
		t.Errorf("resolveGRPCAddr(:8081, fd00::1) = %q, want [fd00::1]:8081", got)
	}
}
