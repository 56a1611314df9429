package transport

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// dirtyPool is a mem.BufferPool that hands out buffers without clearing
// them. gRPC's default pool clears every buffer it hands out, its whole
// capacity (a request of 40 KB clears 64 KB), so that a caller that reads
// before writing cannot see an earlier message; the codec writes every byte
// it then reads (a copy of the request, an encoding of exactly its
// size), so the clearing bought nothing here and cost 8–9% of a node's CPU
// at batch 1000 (docs/PERFORMANCE.md, "The hot path at batch 1000").
//
// Buffers come in powers of two from 256 bytes to 4 MiB, one sync.Pool
// each; larger ones are allocated and left to the garbage collector.
type dirtyPool struct {
	tiers [maxTier - minTier + 1]sync.Pool
}

const (
	minTier = 8  // 256 B
	maxTier = 22 // 4 MiB
)

var bufs dirtyPool

// tier returns the index of the smallest tier holding n bytes, or -1.
func tier(n int) int {
	t := bits.Len(uint(n - 1))
	if n <= 1<<minTier {
		t = minTier
	}
	if t > maxTier {
		return -1
	}
	return t - minTier
}

// Get returns a buffer of length n; its contents are whatever it last held.
func (p *dirtyPool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minTier))
	return &b
}

// Put takes back a buffer from Get; one of another capacity is dropped.
func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if t := tier(c); t >= 0 && c == 1<<(t+minTier) {
		p.tiers[t].Put(b)
	}
}

var _ mem.BufferPool = (*dirtyPool)(nil)
